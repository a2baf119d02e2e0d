"""DeltaNet memory ports: write a word at a one-hot address, read a word, reset, per-lane writes.

Physics (tests/test_craft_physics.py checks each): the gate is held open (in_proj_a = 0,
dt_bias = -100: exp(g) == 1.0); conv taps (0,..,0,1) are the identity on the current token; a key
pre-activation of 100 at slot j and exact 0 elsewhere stays exactly one-hot through SiLU and the L2
norm (binary addresses are decoded inside in_proj_qkv: 200 * (matches - n + 0.5) is +100 at one
slot and <= -100 elsewhere, and silu(-100) == -0); beta = sigmoid(+-200) is exactly 1 or 0, so a
write replaces the column; a bit is stored dual rail (silu(+-100 b)), so every written column has
the same norm and the per-head gated RMSNorm returns a data-independent scale; z = 32 * re makes
the read enable exact (silu(0) = 0); a reset drives in_proj_a to 1000 (exp(g) == 0) and wipes the
heads' state before this token's write.

The read lands in a `rail3` field: (A_i, B_i) = (+.5, -.5) for 1, (-.5, +.5) for 0 and (-.5, -.5)
when the cell is unwritten or the read disabled. The -.5 offsets come from one constant head per
layer (every token writes and reads a fixed column), so the residual's sum of squares is the same
in all three cases.
"""
from __future__ import annotations

from ..circuit import Circuit, CircuitError, MemoryPort, MixerStage
from ..fields import Field, Lin, bits
from .base import MLPBuilder, finish, out_field


def memory(c: Circuit, name: str, slots: int, wbits: int, waddr, raddr,
           data, we: list | Lin | None = None, re: Lin | None = None,
           reset: Lin | None = None, lanes: int | None = None, read: bool = True,
           blank: list | Lin | None = None, out: list | None = None):
    """A memory port. Addresses: a onehot field, a binary (bits / rail3) field, an int (a constant
    slot) or None (slot 0). `data`: one entry per lane (a single field = one lane); an entry is a
    field or a list of fields whose bits are concatenated (low bits first) (bits, dual or rail3; an absent rail3
    stores 0s). `we`: one 0/1 Lin per lane (or one for all, or None = always write). Returns the
    block, whose outputs are the rail3 read fields `name_r{lane}` (`name_r` for one lane).

    blank: one 0/1 Lin per lane (or one for all): where it is 1, the lane's write stores an
    unwritten word instead of its data (the slot then reads as never written: how a register file
    keeps poison); the data must be dual or rail3 fields (0/1 rails).

    read=False: a write-only port (no read fields, no residual dims; raddr must be None): its
    contents live only in the layer's recurrent state, read from the cache by the inspection API
    (gpu_layers.craft.state).

    out: existing rail3 read fields (one per lane) to read into, shared with other ports that
    read into them: every such port needs a read enable `re`, and the caller enables at most one
    of them per token, so their reads add up to the enabled one's (a banked register file's
    banks in one field per lane instead of one per bank: the residual's width)."""
    port = _port(c, name, slots, wbits, waddr, raddr, data, we, re, reset, lanes, read, blank, out=out)
    outs = port.out
    st = MixerStage(name, [port], outs)
    c.add_stage(st)
    ins = [f for f in [waddr, raddr] if isinstance(f, Field)]
    for d in port.data:
        ins += d if isinstance(d, list) else [d]
    blk = finish(c, name, "memory", ins, outs, [st], None, {"slots": slots, "wbits": wbits, "lanes": port.lanes})
    blk.ref = MemoryModel(port)
    return blk


def _port(c: Circuit, name, slots, wbits, waddr, raddr, data, we, re, reset, lanes, read, blank,
          out: list | None = None) -> MemoryPort:
    """A validated MemoryPort (no stage yet); `out`: its read fields when they already exist (the
    banks of a banked memory with a shared read), else new rail3 fields."""
    data = [data] if isinstance(data, Field) else list(data)
    lanes = lanes or len(data)
    if len(data) != lanes:
        raise CircuitError(f"memory {name}: {lanes} lanes need {lanes} data fields")
    if not isinstance(we, list):
        we = [we] * lanes
    if len(we) != lanes:
        raise CircuitError(f"memory {name}: one write enable per lane")
    if blank is not None and not isinstance(blank, list):
        blank = [blank] * lanes
    if blank is not None and len(blank) != lanes:
        raise CircuitError(f"memory {name}: one blank flag per lane")
    for d in data:
        fs = d if isinstance(d, list) else [d]
        if any(f.enc not in ("bits", "dual", "rail3") for f in fs) or sum(f.n for f in fs) != wbits:
            raise CircuitError(f"memory {name}: data {[f.name for f in fs]} must be bits/dual/rail3 of "
                               f"{wbits} bits in all")
    for f, what in ((waddr, "write"), (raddr, "read")):
        if f is None:
            continue
        if isinstance(f, int):
            if not 0 <= f < slots:
                raise CircuitError(f"memory {name}: constant {what} address {f} out of range")
            continue
        if f.enc == "onehot":
            if f.n > slots:
                raise CircuitError(f"memory {name}: {what} address one-hot of {f.n} > {slots} slots")
        elif f.enc in ("bits", "rail3"):
            if (1 << f.n) > slots:
                raise CircuitError(f"memory {name}: {what} address of {f.n} bits needs {1 << f.n} slots")
        else:
            raise CircuitError(f"memory {name}: {what} address must be onehot or bits")
    if not read and (raddr is not None or re is not None):
        raise CircuitError(f"memory {name}: a write-only port takes no read address or read enable")
    if out is not None and (re is None or len(out) != lanes or any(f.enc != "rail3" or f.n != wbits for f in out)):
        raise CircuitError(f"memory {name}: a shared read needs a read enable and one rail3 field of "
                           f"{wbits} bits per lane")
    if out is None:
        out = [out_field(c, f"{name}_r{l}" if lanes > 1 else f"{name}_r", "rail3", wbits)
               for l in range(lanes)] if read else []
    return MemoryPort(name, slots, wbits, lanes, waddr, raddr, data, we, re, reset, out, blank)


class MemoryModel:
    """The Python definition of a port: call step(values) once per token, in order."""

    def __init__(self, port: MemoryPort):
        self.p = port
        self.mem = [dict() for _ in range(port.lanes)]

    def reset_state(self):
        self.mem = [dict() for _ in range(self.p.lanes)]

    def step(self, v: dict) -> dict:
        """v: logical values of every field the port reads ({name: int}) plus '_we' (list of 0/1 per
        lane), '_re' (0/1), '_reset' (0/1), '_blank' (list of 0/1 per lane); returns {out field name: word or None}."""
        p = self.p
        if v.get("_reset", 0):
            self.reset_state()
        addr = lambda f: 0 if f is None else (f if isinstance(f, int) else int(v[f.name]))  # noqa: E731
        wa, ra = addr(p.waddr), addr(p.raddr)
        wes = v.get("_we", [1] * p.lanes)
        blanks = v.get("_blank", [0] * p.lanes)
        for l in range(p.lanes):
            if wes[l] and blanks[l]:
                self.mem[l].pop(wa, None)
            elif wes[l]:
                word, sh = 0, 0
                for f in (p.data[l] if isinstance(p.data[l], list) else [p.data[l]]):
                    x = v[f.name]
                    word |= (0 if x is None or x < 0 else int(x)) << sh
                    sh += f.n
                self.mem[l][wa] = word
        out = {}
        for l in range(len(p.out)):
            out[p.out[l].name] = self.mem[l].get(ra) if v.get("_re", 1) else None
        return out


def read_bits(c: Circuit, r: Field, name: str | None = None, enc: str = "bits", with_present: bool = False):
    """Re-digitize a rail3 read into a word (absent reads as 0), optionally with a dual `present` bit."""
    if r.enc != "rail3":
        raise CircuitError("read_bits takes a rail3 field")
    name = name or c.unique(r.name + "_w")
    out = out_field(c, name, enc, r.n)
    mb = MLPBuilder(c, name)
    for i in range(r.n):
        # bit(i) = A + 0.5 is 1 (bit 1), 0 (bit 0 or absent): threshold at 0.5
        mb.threshold(out, i, r.bit(i) - 0.5, 0.5)
    pres = None
    if with_present:
        pres = out_field(c, name + "_present", "dual", 1)
        mb.threshold(pres, 0, r.present(0) - 0.5, 0.5)
    st = mb.build()

    def ref(v):
        x = v[r.name]
        o = {out.name: 0 if x is None or x < 0 else int(x)}
        if pres is not None:
            o[pres.name] = int(x is not None and x >= 0)
        return o

    outs = [out] + ([pres] if pres is not None else [])
    return finish(c, name, "read_bits", [r], outs, [st], ref, {"n": r.n})


def banked_memory(c: Circuit, name: str, slots: int, wbits: int, waddr: tuple, raddr: tuple, data,
                  we: Lin | None = None, with_present: bool = False, parts: list | None = None):
    """A one-lane memory of more slots than a key head has, split into banks (one port each).
    `data`: a field or a list of fields (concatenated, low bits first) of wbits bits in all.
    `parts` [(name, bits), ...] (summing to wbits): the word read out as several `bits` fields,
    low bits first, instead of one `name` (a word that packs what several readers take).

    Addresses are pairs (low, bank): `low` a binary field (bits / rail3) of the slot inside a bank
    (a bank has 2**low.n slots), `bank` a binary field (bits / dual / rail3) of the bank index, or
    None when one bank holds every slot. A write goes to the addressed bank only (per-bank write
    enable we + [bank == b] - 1); every bank reads at the low address, and one MLP stage selects
    the addressed bank's word (absent reads as 0). Output: a `bits` field `name` (plus a dual
    `name_present` with with_present). Cost: ceil(slots / 2**low.n) ports in one mixer, then
    2 * wbits * banks neurons (one bank: read_bits).

    A **one-hot read bank** (`bank_select`'s output, entries >= banks allowed) enables one bank's
    read instead (its entry is the port's read enable: a disabled read is an exact 0), so the banks
    share one rail3 read field and the MLP stage only re-digitizes it: 2 * wbits residual dims
    and neurons instead of 2 * wbits * banks each (why: the program memories' banks were most of
    the core's width). The banks then sit in one mixer stage, one layer."""
    from .logic import mux

    (wlo, whi), (rlo, rhi) = waddr, raddr
    if wlo.n != rlo.n:
        raise CircuitError(f"banked memory {name}: read and write low addresses differ in width")
    bank_slots = 1 << wlo.n
    banks = -(-slots // bank_slots)
    if banks > 1 and (whi is None or rhi is None or (1 << min(whi.n, rhi.n)) < banks):
        raise CircuitError(f"banked memory {name}: {banks} banks need a bank address field")
    fields = data if isinstance(data, list) else [data]
    if banks > 1 and rhi.enc == "onehot":
        return _shared_read_banks(c, name, slots, wbits, waddr, raddr, fields, we, with_present, parts, banks,
                                  bank_slots)
    ports = []
    for b in range(banks):
        web = _bank_we(we, whi, b) if banks > 1 else we
        ports.append(memory(c, f"{name}_b{b}" if banks > 1 else f"{name}_m", min(bank_slots, slots), wbits,
                            wlo, rlo, [fields], we=web))
    reads = [p.outputs[0] for p in ports]
    if parts is not None:
        if sum(n for _, n in parts) != wbits or with_present:
            raise CircuitError(f"banked memory {name}: parts must add up to {wbits} bits, without present")
        outs, st = _split_read(c, name, rhi if banks > 1 else None, reads, parts)
        stages = [st]
    elif banks == 1:
        out = read_bits(c, reads[0], name=name, with_present=with_present)
        outs, stages = list(out.outputs), list(out.stages)
    else:
        if with_present:
            raise CircuitError("banked memory: with_present is only implemented for one bank")
        out = mux(c, rhi, reads, name=name)
        outs, stages = list(out.outputs), list(out.stages)
    blk = finish(c, name, "banked_memory", [f for f in (wlo, whi, rlo, rhi) if f is not None],
                 outs, [st for p in ports for st in p.stages] + stages, None,
                 {"slots": slots, "wbits": wbits, "banks": banks, "bank_slots": bank_slots})
    blk.ref = BankedMemoryModel(bank_slots, banks, waddr, raddr, fields, outs, parts)
    return blk


def _bank_we(we, whi, b: int) -> Lin:
    """Bank b's write enable: the memory's (None: always) and [whi == b]."""
    from .logic import _select_term

    sel, cnt = _select_term(whi, b)
    return (we if we is not None else Lin({}, 1.0)) + sel - float(cnt)


def _shared_read_banks(c, name, slots, wbits, waddr, raddr, fields, we, with_present, parts, banks, bank_slots):
    """banked_memory with a one-hot read bank: one mixer stage of `banks` ports whose reads, each
    enabled by its bank's entry, land in one shared rail3 field; one MLP stage re-digitizes it."""
    (wlo, whi), (rlo, rhi) = waddr, raddr
    if rhi.n < banks:
        raise CircuitError(f"banked memory {name}: a one-hot read bank of {rhi.n} entries for {banks} banks")
    if with_present:
        raise CircuitError("banked memory: with_present is only implemented for one bank")
    shared = out_field(c, f"{name}_r", "rail3", wbits)
    ports = []
    for b in range(banks):
        ports.append(_port(c, f"{name}_b{b}", min(bank_slots, slots), wbits, wlo, rlo, [fields],
                           _bank_we(we, whi, b), rhi.hot(b), None, None, True, None, out=[shared]))
    st = MixerStage(name + "_banks", ports, [shared])
    c.add_stage(st)
    if parts is not None and sum(n for _, n in parts) != wbits:
        raise CircuitError(f"banked memory {name}: parts must add up to {wbits} bits")
    outs, rd = _split_read(c, name, None, [shared], parts or [(name, wbits)])
    blk = finish(c, name, "banked_memory", [wlo, whi, rlo, rhi], outs, [st, rd], None,
                 {"slots": slots, "wbits": wbits, "banks": banks, "bank_slots": bank_slots, "shared_read": True})
    blk.ref = BankedMemoryModel(bank_slots, banks, waddr, raddr, fields, outs, parts)
    return blk


def bank_select(c: Circuit, name: str, bank: Field, n: int | None = None):
    """The one-hot (n entries, default 2**bank.n) of a binary bank index, in one MLP stage: the read
    bank of a banked memory whose banks share one read field (banked_memory)."""
    from .logic import _select_term

    n = n or (1 << bank.n)
    out = out_field(c, name, "onehot", n)
    mb = MLPBuilder(c, name)
    for b in range(n):
        s, cnt = _select_term(bank, b)
        mb.threshold(out, b, s - (cnt - 0.5), 0.5)
    st = mb.build()

    def ref(v):
        x = v[bank.name]
        return {out.name: 0 if x is None or x < 0 else int(x)}

    return finish(c, name, "bank_select", [bank], [out], [st], ref, {"n": n})


def _split_read(c: Circuit, name: str, rhi, reads: list, parts: list) -> list:
    """One MLP stage: the addressed bank's read (rhi: the bank index, None for one bank),
    re-digitized into one `bits` field per part."""
    from .logic import _select_term

    outs = [c.new_field(bits(pn, n)) for pn, n in parts]
    mb = MLPBuilder(c, name)
    base = 0
    for f in outs:
        for i in range(f.n):
            terms = []
            for b, r in enumerate(reads):
                s, cnt = _select_term(rhi, b) if rhi is not None else (Lin({}, 0.0), 0)
                terms.append((s + r.bit(base + i) - (cnt + 0.5), 0.5, 1.0))
            mb.boolean(f, i, terms)
        base += f.n
    return outs, mb.build()


class BankedMemoryModel:
    """The Python definition of a banked memory: call step(values) once per token, in order.
    values: logical values of the address and data fields ({name: int}) plus '_we' (0/1); returns
    {output name: word} (absent words read as 0; `present` 0/1 when the block has it)."""

    def __init__(self, bank_slots, banks, waddr, raddr, data, outs, parts=None):
        self.bank_slots, self.banks = bank_slots, banks
        self.waddr, self.raddr, self.outs, self.parts = waddr, raddr, outs, parts
        self.data = data
        self.mem = {}

    def _addr(self, pair, v):
        lo, hi = pair
        bank = int(v[hi.name]) if hi is not None and self.banks > 1 else 0
        return bank * self.bank_slots + int(v[lo.name])

    def step(self, v: dict) -> dict:
        if v.get("_we", 1):
            word, sh = 0, 0
            for f in self.data:
                word |= int(v[f.name]) << sh
                sh += f.n
            self.mem[self._addr(self.waddr, v)] = word
        got = self.mem.get(self._addr(self.raddr, v))
        if self.parts is not None:
            out, sh = {}, 0
            for f in self.outs:
                out[f.name] = ((got or 0) >> sh) & ((1 << f.n) - 1)
                sh += f.n
            return out
        out = {self.outs[0].name: got or 0}
        if len(self.outs) > 1:
            out[self.outs[1].name] = int(got is not None)
        return out
