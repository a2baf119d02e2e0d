"""What the machine supports, in CUDA terms, read from the PTX validator's own table.

The prompt must not promise what the validator refuses (or hide what it accepts), so every line
below is guarded by the instruction forms it needs in `gpu_layers.ptx.validator.SUPPORTED`: when
the table grows (f64, say), the prompt grows with it, and the prompt's hash in the record changes.
"""
from __future__ import annotations

import hashlib

from gpu_layers.ptx.validator import SUPPORTED


def _has(*forms) -> bool:
    return all(f in SUPPORTED for f in forms)


def _any(prefix: str, contains: str = "") -> bool:
    return any(k.startswith(prefix) and contains in k for k in SUPPORTED)


def _limits():
    try:  # the interpreter's launch limits (fall back to CUDA's usual values)
        from gpu_layers.interp import machine as m

        return (getattr(m, "MAX_THREADS_PER_BLOCK", 1024), getattr(m, "MAX_SHARED_BYTES", 48 * 1024))
    except Exception:  # pragma: no cover
        return 1024, 48 * 1024


def supported_lines() -> list:
    S = SUPPORTED
    out = []
    if _has("add.s32", "mul.lo.s32", "div.s32", "div.u32", "rem.s32", "rem.u32", "add.s64", "mul.lo.s64", "div.u64"):
        out.append("int, unsigned int, long long, unsigned long long (and char/short loads and stores): "
                   "+ - * / % (signed and unsigned), min, max, abs, comparisons, the ?: operator")
    bits = [("shl.b32", "<< >>"), ("and.b32", "& | ^ ~"), ("popc.b32", "__popc/__popcll"), ("clz.b32", "__clz"),
            ("brev.b32", "__brev"), ("bfind.u32", "__ffs"), ("prmt.b32", "__byte_perm"),
            ("shf.l.wrap.b32", "__funnelshift_l/_r"), ("mul.hi.u32", "__mulhi/__umulhi"),
            ("mul24.lo.s32", "__mul24"), ("sad.u32", "__sad/__usad")]
    have = [name for form, name in bits if form in S]
    if have:
        out.append("bit operations: " + ", ".join(have))
    if _has("add.f32", "mul.f32", "div.rn.f32", "fma.rn.f32", "sqrt.rn.f32"):
        fl = "float (32-bit, IEEE round to nearest): + - * /, fmaf, sqrtf, fabsf, fminf, fmaxf"
        if _has("cvt.rmi.f32.f32", "cvt.rpi.f32.f32", "cvt.rzi.f32.f32", "cvt.rni.f32.f32"):
            fl += ", floorf, ceilf, truncf, rintf"
        if _any("cvt.rn.f32.s") and _any("cvt.rzi.s32.f32"):
            fl += ", conversions between float and the integer types"
        if _any("add.rz.f32"):
            fl += ", the __fadd_rn/__fmul_rn/__fdiv_rz/... rounding intrinsics"
        out.append(fl)
    if _has("add.f64", "mul.f64", "fma.rn.f64"):
        d = "double (64-bit float): + - * /, fma"
        if "sqrt.rn.f64" in S:
            d += ", sqrt"
        if _any("cvt.rn.f64.") or _any("cvt.f64.f32"):
            d += ", conversions to and from float and the integers"
        out.append(d)
    mem = "memory: the kernel's pointer arguments (global memory), __shared__ arrays (static, or extern dynamic), " \
          "local arrays inside a thread (up to 64 KB per thread)"
    if "ld.global.v4.f32" in S:
        mem += ", float2/float4/int4 vector loads and stores"
    out.append(mem)
    atoms = []
    for form, name in (("atom.global.add.u32", "atomicAdd (int, unsigned"), ("atom.global.add.s32", "atomicSub"),
                       ("atom.global.min.s32", "atomicMin"), ("atom.global.max.s32", "atomicMax"),
                       ("atom.global.and.b32", "atomicAnd/Or/Xor"), ("atom.global.exch.b32", "atomicExch"),
                       ("atom.global.cas.b32", "atomicCAS"), ("atom.global.inc.u32", "atomicInc/Dec")):
        if form in S:
            if name.startswith("atomicAdd"):
                kinds = ["int", "unsigned"] + (["unsigned long long"] if "atom.global.add.u64" in S else []) + \
                        (["float"] if "atom.global.add.f32" in S else []) + \
                        (["double"] if "atom.global.add.f64" in S else [])
                name = f"atomicAdd ({', '.join(kinds)})"
            atoms.append(name)
    if atoms:
        where = " in global or shared memory" if _any("atom.shared.") else " in global memory"
        out.append("atomics: " + ", ".join(atoms) + where)
    sync = []
    if _any("bar.sync") or _any("barrier.sync"):
        sync.append("__syncthreads()")
    if "bar.warp.sync" in S:
        sync.append("__syncwarp()")
    if _any("membar.") or _any("fence."):
        sync.append("__threadfence()")
    if sync:
        out.append("synchronisation: " + ", ".join(sync))
    warp = []
    if "shfl.sync.idx.b32" in S:
        warp.append("__shfl_sync, __shfl_up_sync, __shfl_down_sync, __shfl_xor_sync (32-bit values)")
    if "vote.sync.ballot.b32" in S:
        warp.append("__ballot_sync")
    if _has("vote.sync.all.pred", "vote.sync.any.pred"):
        warp.append("__all_sync, __any_sync")
    if "match.any.sync.b32" in S:
        warp.append("__match_any_sync, __match_all_sync")
    if "activemask.b32" in S:
        warp.append("__activemask")
    if warp:
        out.append("warp intrinsics (warps of 32 threads): " + ", ".join(warp))
    out.append("built-in variables: threadIdx, blockIdx, blockDim, gridDim (x, y, z), warpSize")
    return out


def unsupported_lines() -> list:
    S = SUPPORTED
    out = []
    if not _any("add.f64"):
        out.append("double (64-bit floating point): use float")
    if not _any("add.f16"):
        out.append("half precision (__half, __nv_bfloat16)")
    if "ex2.approx.f32" not in S:
        out.append("expf, exp2f, logf, log2f, sinf, cosf, tanf, powf, tanhf, erff, rsqrtf and the fast-math "
                   "intrinsics __expf, __logf, __sinf, __fdividef ... (they compile to approximate instructions)")
    if "call" not in S and "call.uni" not in S:
        out.append("calls that are not inlined: recursion, function pointers, virtual functions, printf, malloc, "
                   "new (mark device helper functions __forceinline__)")
    if not _any("tex"):
        out.append("textures and surfaces")
    if not _any("mma") and not _any("wmma"):
        out.append("tensor cores (wmma/mma) and asynchronous copies")
    if not _any("ld.const") and not _any("ld.global.const"):
        out.append("__constant__ and __device__ global variables (pass data through the kernel's arguments)")
    return out


def capabilities_text() -> str:
    threads, shared = _limits()
    head = (f"The kernel runs on a small exact SIMT machine (compiled by nvcc to PTX for sm_75, then checked "
            f"against the machine's instruction table): warps of 32 threads, up to {threads} threads per block, "
            f"up to {shared // 1024} KB of shared memory per block.")
    sup = "\n".join(f"- {l}" for l in supported_lines())
    uns = "\n".join(f"- {l}" for l in unsupported_lines())
    return f"{head}\nSupported:\n{sup}\nNot supported (the machine refuses them by name):\n{uns}"


def table_sha256() -> str:
    """sha256 of the validator's table (which forms, which operand signatures)."""
    h = hashlib.sha256()
    for k in sorted(SUPPORTED):
        f = SUPPORTED[k]
        h.update(f"{k}\t{f.kind}\t{f.sig}\n".encode())
    return h.hexdigest()
