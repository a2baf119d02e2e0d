"""Demonstration circuit: a 4-lane register file of 4 x 32-bit registers per lane, with an adder.

Machine vocabulary (one token = one step; the host appends each generated token):
  <w l{L} r{R}>      select lane L, register R as the target of the next register write
  <b{K}:{XX}>        byte K (0 = least significant) of the value; <b3:..> commits the word to the
                     target register (bytes are sent in order b0, b1, b2, b3)
  <sum l{L} r{A} r{B}>   ask for lane L's rA + rB (mod 2^32); the model emits four tokens
  <s{K}:{XX}>        byte K of the sum (emitted by the model, fed back by the host)
  <end>              emitted after <s3:..> (and after any non-sum token)
Unwritten registers read as 0.

Circuit (layer positions as the scheduler places them for a tiny host's shapes):
  L0 mixer  scratch memories: 4 byte slots (one port per byte, each read at a constant slot; the
            byte being written is seen by write-then-read), the target lane and register
  L0 MLP    per-lane write enables: [token is <b3> and target lane == l]
  L1 mixer  register file copy A: key = target register, 4 lanes (one value head each, masked per
            lane writes), read at rA
  L1 MLP    operand a = lane mux of copy A's reads (absent reads are 0)
  L2        register file copy B (read at rB), operand b
  L3-L5     32-bit carry-lookahead adder (3 MLP stages)
  L6 mixer  sum store: written at <sum>, read at every token (write-then-read at <sum> itself)
  LM head   logit(<s{K}:{V}>) = sum_i (+-1 per bit of V) * (2 A_i of the stored sum's byte K) +
            16 [next == K]; logit(<end>) = 8 + 16 [next == 4]: the right token wins by >= 2.

    from gpu_layers.craft.demo_regfile import build_regfile
    demo = build_regfile(config)          # config: a Qwen3.5 text config (or shapes dict)
    model = demo.model()                  # machine-only Qwen3_5ForCausalLM
    ids = demo.encode(["<w l0 r1>", "<b0:2a>", ...])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from . import blocks as B
from .assemble import compile_circuit
from .blocks.base import MLPBuilder
from .circuit import Circuit
from .fields import Lin, bits, dual, lsum, onehot
from .machine_model import CompiledCircuit

LANES, REGS, BYTES = 4, 4, 4
KINDS = ("w", "b", "sum", "s", "end")


def _tok_w(l, r):
    return f"<w l{l} r{r}>"


def _tok_b(k, x):
    return f"<b{k}:{x:02x}>"


def _tok_sum(l, a, b):
    return f"<sum l{l} r{a} r{b}>"


def _tok_s(k, x):
    return f"<s{k}:{x:02x}>"


@dataclass
class RegfileDemo(CompiledCircuit):
    label: ClassVar[str] = "the register-file demo"


def build_regfile(config, adder: str = "lookahead") -> RegfileDemo:
    """adder: 'lookahead' (3 stages, exact in fp32) or 'prefix' (Kogge-Stone, 7 stages, exact in bf16 too)."""
    c = Circuit("regfile4x4x32")
    kind = c.input(onehot("kind", len(KINDS)), default=KINDS.index("end"))
    lane = c.input(bits("lane", 2), default=0)          # <w>: target lane; <sum>: lane
    reg = c.input(bits("reg", 2), default=0)            # <w>: target register
    bpos = c.input(onehot("bpos", BYTES + 1), default=BYTES)   # <b K>: K; else BYTES (none)
    bval = c.input(bits("bval", 8), default=0)
    ra = c.input(bits("ra", 2), default=0)
    rb = c.input(bits("rb", 2), default=0)
    nxt = c.input(onehot("next", BYTES + 1), default=BYTES)    # which <s K> to emit next (BYTES: <end>)

    # L0: scratch memories (constant read slots; the byte ports write at slot 0 when their byte comes)
    byte_reads = []
    for k in range(BYTES):
        m = B.memory(c, f"byte{k}", 1, 8, 0, 0, bval, we=bpos.hot(k))
        byte_reads.append(m.outputs[0])
    tl = B.memory(c, "tlane", 1, 2, 0, 0, lane, we=kind.hot(KINDS.index("w"))).outputs[0]
    tr = B.memory(c, "treg", 1, 2, 0, 0, reg, we=kind.hot(KINDS.index("w"))).outputs[0]

    # per-lane write enables: <b3> and target lane == l
    wen = c.new_field(dual("wen", LANES))
    mb = MLPBuilder(c, "wen")
    for l in range(LANES):
        match = lsum(tl.bit(i) if (l >> i) & 1 else 1.0 - tl.bit(i) for i in range(2))
        mb.threshold(wen, l, bpos.hot(BYTES - 1) + match - 2.5, 0.5)
    mb.build()

    # register file, two copies (one per read port), lanes = value heads
    word = [byte_reads] * LANES
    rfa = B.memory(c, "rfa", REGS, 32, tr, ra, word, we=[wen.bit(l) for l in range(LANES)], lanes=LANES)
    rfb = B.memory(c, "rfb", REGS, 32, tr, rb, word, we=[wen.bit(l) for l in range(LANES)], lanes=LANES)
    a = B.mux(c, lane, rfa.outputs, name="opa")
    b = B.mux(c, lane, rfb.outputs, name="opb")
    if adder == "prefix":
        s = B.prefix_adder(c, a.outputs[0], b.outputs[0], name="sum")
    else:
        s = B.adder(c, a.outputs[0], b.outputs[0], name="sum")
    st = B.memory(c, "sstore", 1, 32, 0, 0, s.outputs[0], we=kind.hot(KINDS.index("sum"))).outputs[0]

    # vocabulary
    for l in range(LANES):
        for r in range(REGS):
            c.token(_tok_w(l, r), kind=KINDS.index("w"), lane=l, reg=r)
    for k in range(BYTES):
        for x in range(256):
            c.token(_tok_b(k, x), kind=KINDS.index("b"), bpos=k, bval=x)
    for l in range(LANES):
        for x in range(REGS):
            for y in range(REGS):
                c.token(_tok_sum(l, x, y), kind=KINDS.index("sum"), lane=l, ra=x, rb=y, next=0)
    for k in range(BYTES):
        for x in range(256):
            c.token(_tok_s(k, x), kind=KINDS.index("s"), next=k + 1)
            c.logit(_tok_s(k, x), lsum(((1.0 if (x >> i) & 1 else -1.0) * 2.0) * (st.bit(8 * k + i) - 0.5)
                                       for i in range(8)) + 16.0 * nxt.hot(k))
    c.token("<end>", kind=KINDS.index("end"))
    c.logit("<end>", Lin({}, 8.0) + 16.0 * nxt.hot(BYTES))
    comp = compile_circuit(c, config)
    ids = {n: i for i, n in enumerate(comp.machine.token_names)}
    return RegfileDemo(comp, ids)


def random_program(rng, n_ops: int, p_sum=0.4):
    """A random program of n_ops operations and its expected transcript: (token names, expected
    names, emit mask). A write is 5 tokens, a sum 1 token + 4 emitted sum bytes. expected[t] is the
    token the model must emit after position t (only where mask[t])."""
    regs = np.zeros((LANES, REGS), dtype=np.int64)
    toks, expect, mask = [], [], []
    for _ in range(n_ops):
        if rng.random() < p_sum:
            l, x, y = (int(v) for v in rng.integers(0, [LANES, REGS, REGS]))
            sm = int((regs[l, x] + regs[l, y]) % 2 ** 32)
            seq = [_tok_sum(l, x, y)] + [_tok_s(k, (sm >> (8 * k)) & 0xFF) for k in range(BYTES)]
            toks += seq
            expect += seq[1:] + ["<end>"]
            mask += [True] * len(seq)
        else:
            l, r = int(rng.integers(LANES)), int(rng.integers(REGS))
            v = int(rng.integers(0, 2 ** 32)) if rng.random() < 0.8 else int(rng.choice([0, 2 ** 32 - 1, 1]))
            regs[l, r] = v
            toks += [_tok_w(l, r)] + [_tok_b(k, (v >> (8 * k)) & 0xFF) for k in range(BYTES)]
            expect += [""] * 5
            mask += [False] * 5
    return toks, expect, mask
