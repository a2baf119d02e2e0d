"""The memory unit's map (v0): where each word of global and shared memory lives in the machine,
which lane of a lane group accesses memory at which position, and the memory's prompt and dump
tokens. The circuit is gpu_layers/machine/memunit.py.

Two memories of 32-bit words in DeltaNet heads of 128 rows (slots): global memory in 32 banks
(16 KB; written by the prompt, never reset) and shared memory in 4 banks (2 KB; reset at every
`<blk>`). A word at byte address x (the low 14 bits of a global access's address, the low 12 of a
shared one's) sits in global bank (x >> 2) & 31, row x >> 7, or shared bank (x >> 2) & 3, row
(x >> 4) & 127: bank and row are bits of the address, so no adder stands between the address
and the key. A 64-bit access is two words
in banks b, b + 1.

Global buffers are packed into the machine's 16 KB: `layout` gives each buffer argument an offset
(outputs first, each at a multiple of 32 bytes); the launch places buffer k at GLOBAL_BASE +
k * GLOBAL_STRIDE + offset (gpu_layers.interp.launch `buffer_offsets`), so its pointer's low 14
bits are its machine address and the kernel's own address arithmetic lands on the right words.
Shared memory is addressed through the generic window (SHARED_WINDOW + offset): the memory
instruction's immediate carries the window.

One lane per position: a memory instruction's first executed lane of a group is served at the
group's executing position; each further executed lane J is served at a tick token `<mt J>` of
its own, in lane order, before the group's `<g>` (`tick_lanes`). Stores to one word are therefore
applied in lane order (the last lane wins, as in the interpreter), and the loads of an instruction
all read memory as it was before it.

Prompt (after the program): `<nw N>` (words the dump covers), then per nonzero global word
`<ma A>` (its machine word address: resets the chunk registers), `<mc0 X>`, `<mc1 X>` (chunks 0
and 1, 11 bits each, sent when nonzero) and `<mc2 X>` (chunk 2, 10 bits, always sent: it commits
the word). A word never written reads as 0 (global buffers are initialised, so global loads are
never undefined; a shared word never written is, as in the interpreter).

Dump (after `<halt>`): for A = 0 .. N - 1, `<xa A>` and the word's nonzero chunks `<xc C X>`;
then `<end>`. Output buffers come first in the layout, so the dump covers exactly them (and the
padding between them); `decode_dump` reads the output buffers back from these tokens alone.

Bounds (`access_ok`, the circuit's exact rule): a served lane whose access the machine refuses
makes the model emit `<fault>` at that position, and the run ends. With B the base register, I
the immediate, n = 14 for a global access and 12 for a shared one, c the carry out of bit n - 1
of their low n bits and w the word (bits 2..n-1 of B + I): a global access needs B's bit 36 set,
bits 37..63 and 14..31 clear, I >> 14 all zeros (c = 0) or all ones (c = 1), alignment, and
lo_k <= w (+1 for 8 bytes) < hi_k for the buffer k = bits 32..35 of B (the prompt's table,
`<mbk K> <mbl L> <mbh H>`); a shared access needs B < 4096, I >> 12 the window's (c = 0) or one
less (c = 1), alignment, and w (+1) below the shared words (`<ss S>`). Every in-bounds access of
the suite passes; what fails is out of bounds in the interpreter too, except a base register more
than 16 KB (shared: 4 KB) away from the address it reaches (refused, never run wrongly).

Scope v0 (`MemoryMapError` names what is refused): scalar ld/st of 4 or 8 bytes, .global or
.shared, into / from a register of the same width (or a 64-bit one for .u32/.b32/.f32:
zero-extended, truncated); no local memory, generic addresses, vector
accesses, sub-word accesses or atomics; up to 16 KB of buffers and 2 KB of shared memory. (The
machine core's lowering for one warp turns vectors, sub-word accesses and atomics into the scalar
accesses served here: gpu_layers/machine/word_memory.py.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu_layers.errors import QwenGPUError
from gpu_layers.interp.memory import SHARED_WINDOW
from gpu_layers.ptx.ir import Addr, Reg, Sym

ROWS = 128
GLOBAL_BITS = 14                     # a global address's machine bits: 16 KB (32 banks)
SHARED_BITS = 12                     # a shared address's: the window's low 12 bits (2 KB used)
BANKS = {"global": 1 << (GLOBAL_BITS - 9), "shared": 4}
CAPACITY = {sp: 4 * n * ROWS for sp, n in BANKS.items()}     # bytes per memory
WORDS = CAPACITY["global"] // 4
ALIGN = 32                           # a buffer starts at a row
CHUNK_BITS = (11, 11, 10)            # a 32-bit word in prompt / dump chunks
SPACES = ("global", "shared")
M64 = (1 << 64) - 1


class MemoryMapError(QwenGPUError, ValueError):
    """A kernel or launch outside what the memory unit v0 holds."""


@dataclass(frozen=True)
class MemOp:
    kind: str                 # "load" or "store"
    space: str                # "global" or "shared"
    size: int                 # bytes: 4 or 8
    base: str | None          # the address register (None: a constant address)
    imm: int                  # added to the base (64-bit pattern; shared: includes SHARED_WINDOW)
    value: str               # a store's source register; a load's destination


@dataclass
class Layout:
    offsets: dict             # {argument index: byte offset of the buffer in global memory}
    sizes: dict               # {argument index: bytes}
    outputs: list             # argument indices dumped, in layout order
    dump_words: int           # N: words 0 .. N - 1 are dumped
    table: dict = None        # {buffer number k (k-th buffer argument): (lo, hi) word range}


def memory_ops(kernel) -> dict:
    """{pc: MemOp} for every memory instruction of machine code `kernel` (ld.param excluded: it is
    an immediate). Raises MemoryMapError naming the first instruction v0 does not run."""
    from gpu_layers.interp.machine import program_for

    prog = program_for(kernel)
    L = prog.layout
    out = {}
    for pc, ins in enumerate(kernel.instructions):
        op = ins.opcode
        if op not in ("ld", "st", "atom", "red"):
            continue
        mods = ins.modifiers
        if op == "ld" and "param" in mods:
            continue

        def bad(why):
            raise MemoryMapError(f"line {ins.line}: `{ins}`: {why} (the memory unit v0 runs scalar "
                                 "32/64-bit ld/st of .global and .shared)")

        if op in ("atom", "red"):
            bad("atomics are not in the memory unit yet")
        space = next((m for m in mods if m in ("global", "shared", "local")), None)
        if space is None:
            bad("a generic address")
        if space == "local":
            bad("local memory is not in the memory unit yet")
        if any(m in ("v2", "v4") for m in mods):
            bad("a vector access")
        t = ins.types[0] if ins.types else None
        size = {"u32": 4, "s32": 4, "b32": 4, "f32": 4, "u64": 8, "s64": 8, "b64": 8, "f64": 8}.get(t)
        if size is None:
            bad(f"a .{t} access (sub-word accesses are not in the memory unit yet)")
        vop, aop = ins.operands if op == "ld" else ins.operands[::-1]
        rbits = prog.regbits.get(vop.name) if isinstance(vop, Reg) else None
        widen = size == 4 and rbits == 64 and (op == "st" or t != "s32")
        if rbits != 8 * size and not widen:     # a 32-bit load zero-extends, a store truncates
            bad(f"the register must be {8 * size} bits (or 64 for an unsigned 32-bit access)")
        if not isinstance(aop, Addr):
            bad("the address is not [reg+offset] or [symbol+offset]")
        if isinstance(aop.base, Sym):
            if aop.base.name not in L.shared:
                bad(f"`{aop.base.name}` is not a .shared variable")
            base, imm = None, L.shared[aop.base.name] + aop.offset
        elif isinstance(aop.base, Reg):
            base, imm = aop.base.name, aop.offset
        else:
            base, imm = None, aop.offset
        if space == "shared":
            imm += SHARED_WINDOW
        out[pc] = MemOp("load" if op == "ld" else "store", space, size, base, imm & M64, vop.name)
    return out


def layout(args, outputs) -> Layout:
    """The packing of a launch's buffer arguments (numpy arrays) into global memory: `outputs`
    (argument indices) first, in order, then the other buffers; each at a multiple of 32 bytes."""
    bufs = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    order = [i for i in outputs if i in bufs] + [i for i in bufs if i not in outputs]
    offsets, sizes, at = {}, {}, 0
    dump_end = 0
    for i in order:
        offsets[i], sizes[i] = at, args[i].nbytes
        if i in outputs:
            dump_end = at + args[i].nbytes
        at += -(-max(args[i].nbytes, 1) // ALIGN) * ALIGN
    if at > CAPACITY["global"]:
        raise MemoryMapError(f"the buffers need {at} bytes of global memory: the memory unit v0 holds "
                             f"{CAPACITY['global']}")
    table = {k: (offsets[i] // 4, (offsets[i] + sizes[i]) // 4) for k, i in enumerate(bufs)}
    if len(bufs) > 16:
        raise MemoryMapError(f"{len(bufs)} buffer arguments: the memory unit v0 holds 16")
    return Layout(offsets, sizes, [i for i in order if i in outputs], -(-dump_end // 4), table)


def check_shared(shared_bytes: int):
    if shared_bytes > CAPACITY["shared"]:
        raise MemoryMapError(f"{shared_bytes} bytes of shared memory: the memory unit v0 holds "
                             f"{CAPACITY['shared']}")


SHARED_HI = SHARED_WINDOW >> SHARED_BITS


def access_ok(op: MemOp, base: int, lay: Layout, shared_words: int) -> bool:
    """Whether the machine serves this access (the circuit's rule, module docstring): base is the
    base register's value (0 without one)."""
    nb = GLOBAL_BITS if op.space == "global" else SHARED_BITS
    mask = (1 << nb) - 1
    imm = op.imm
    low = (base & mask) + (imm & mask)
    c, x = low >> nb, low & mask
    ih = imm >> nb
    w = x >> 2
    span = op.size // 4 - 1
    if x % op.size:
        return False
    if op.space == "global":
        if base >> 36 != 1 or (base >> nb) & ((1 << (32 - nb)) - 1):
            return False
        if (ih, c) not in ((0, 0), ((1 << (64 - nb)) - 1, 1)):
            return False
        lo, hi = lay.table.get((base >> 32) & 15, (0, 0))
        return lo <= w and w + span < hi
    if base >> nb or (ih, c) not in ((SHARED_HI, 0), (SHARED_HI - 1, 1)):
        return False
    return w + span < shared_words


def tick_lanes(executed: list) -> list:
    """The lanes of a memory instruction's group served at ticks: every executed lane but the first."""
    return sorted(executed)[1:]


def words_of(buffers: dict, lay: Layout) -> dict:
    """{machine word address: 32-bit value} of global memory holding `buffers` ({arg index: array})."""
    mem = bytearray(CAPACITY['global'])
    for i, off in lay.offsets.items():
        raw = np.ascontiguousarray(buffers[i]).tobytes()
        mem[off:off + len(raw)] = raw
    return {a: int.from_bytes(mem[4 * a:4 * a + 4], "little") for a in range(WORDS)}


def chunks(x: int) -> list[int]:
    out, sh = [], 0
    for n in CHUNK_BITS:
        out.append((x >> sh) & ((1 << n) - 1))
        sh += n
    return out


def prompt_tokens(args, lay: Layout, shared_bytes: int = 0) -> list[str]:
    """`<nw N>`, `<ss S>`, the buffer table and the nonzero words of the launch's buffers (see the
    module docstring)."""
    words = words_of({i: args[i] for i in lay.offsets}, lay)
    out = [f"<nw {lay.dump_words}>", f"<ss {shared_bytes // 4}>"]
    for k, (lo, hi) in lay.table.items():
        out += [f"<mbk {k}>", f"<mbl {lo}>", f"<mbh {hi}>"]
    for a, x in words.items():
        if not x:
            continue
        c = chunks(x)
        out.append(f"<ma {a}>")
        out += [f"<mc{k} {c[k]:03x}>" for k in (0, 1) if c[k]]
        out.append(f"<mc2 {c[2]:03x}>")
    return out


def dump_tokens(buffers: dict, lay: Layout) -> list[str]:
    """What the machine emits after `<halt>`: words 0 .. N - 1 of global memory, then `<end>`."""
    words = words_of(buffers, lay)
    out = []
    for a in range(lay.dump_words):
        out.append(f"<xa {a}>")
        out += [f"<xc {k} {x:03x}>" for k, x in enumerate(chunks(words[a])) if x]
    out.append("<end>")
    return out


def decode_dump(tokens, lay: Layout, like: dict) -> dict:
    """The output buffers ({arg index: array shaped and typed like like[index]}) read from the
    dump tokens alone (`<xa A>` / `<xc C X>`; everything else is ignored)."""
    mem = bytearray(CAPACITY["global"])
    cur = None
    for t in tokens:
        if t.startswith("<xa "):
            cur = int(t[4:-1])
        elif t.startswith("<xc ") and cur is not None:
            k, x = t[4:-1].split()
            k, x = int(k), int(x, 16)
            word = int.from_bytes(mem[4 * cur:4 * cur + 4], "little")
            word |= x << sum(CHUNK_BITS[:k])
            mem[4 * cur:4 * cur + 4] = (word & 0xFFFFFFFF).to_bytes(4, "little")
    out = {}
    for i in lay.outputs:
        ref = like[i]
        off = lay.offsets[i]
        out[i] = np.frombuffer(bytes(mem[off:off + ref.nbytes]), dtype=ref.dtype).reshape(ref.shape).copy()
    return out
