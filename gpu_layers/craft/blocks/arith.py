"""An n-bit adder / subtractor built for depth: carry-lookahead over chunks in 3 MLP stages.

Threshold logic makes carries cheap: the carry out of the low p bits of a+b+cin is the single
threshold [sum_{j<p} 2^j (a_j + b_j) + cin >= 2^p]; fp32 keeps such sums exact only while they are
small, so the word is cut into chunks of `chunk` bits:

  stage 1  per chunk d: generate G_d = [A_d + B_d >= 2^k], propagate P_d = [A_d + B_d >= 2^k - 1]
  stage 2  carry into chunk c: sign of sum_{d<c} 2^(d+1) (G_d + P_d - 1) +- 1 (cin); lexicographic
           over {generate: +1, propagate: 0, kill: -1}, never 0, so margin 1
  stage 3  sum bit i (position p in chunk c): with Y = sum_{j<=p in chunk} 2^j (a_j + b_j) + C_c,
           s_i = floor(Y / 2^p) mod 2 = [Y >= 2^p] - [Y >= 2^(p+1)] + [Y >= 3 2^p]

Subtraction is a + ~b + 1 (~b is the linear form 1 - b). A word that fits one chunk needs only
stage 3 (depth 1). Cost: 2 steps per chunk + 1 per carry + 3 per sum bit (2 neurons per step).
"""
from __future__ import annotations

from ..circuit import Circuit, CircuitError
from ..fields import Field, Lin, lsum
from .base import MLPBuilder, finish, out_field


def _operands(a: Field, b: Field, sub: bool):
    """(n, carry in, a's bits, b's bits or their complements) of a + b, or a - b = a + ~b + 1."""
    n = a.n
    if b.n != n:
        raise CircuitError("adder needs equal widths")
    A = [a.bit(i) for i in range(n)]
    B = [(1.0 - b.bit(i)) if sub else b.bit(i) for i in range(n)]
    return n, (1.0 if sub else 0.0), A, B


def adder(c: Circuit, a: Field, b: Field, sub: bool = False, chunk: int = 8, carry_out: bool = False,
          name: str | None = None, enc: str = "bits"):
    """a + b (or a - b) mod 2^n into a new bits field `name` (and `name_cout` when carry_out)."""
    n, cin, A, B = _operands(a, b, sub)
    name = name or c.unique("sub" if sub else "add")
    nch = (n + chunk - 1) // chunk
    chunks = [list(range(ch * chunk, min(n, (ch + 1) * chunk))) for ch in range(nch)]
    stages = []
    need_carries = nch > 1 or carry_out
    carry_lin: list[Lin | float] = [cin]
    cout_field = None
    if need_carries:
        gp = out_field(c, name + "_gp", "bits", 2 * nch)
        m1 = MLPBuilder(c, name + "_gp")
        for ch, idx in enumerate(chunks):
            s = lsum(float(1 << (i - idx[0])) * (A[i] + B[i]) for i in idx)
            full = float(1 << len(idx))
            m1.threshold(gp, 2 * ch, s - (full - 0.5), 0.5)        # generate
            m1.threshold(gp, 2 * ch + 1, s - (full - 1.5), 0.5)    # propagate (or generate)
        stages.append(m1.build())
        ncarry = nch if carry_out else nch - 1
        cf = out_field(c, name + "_carry", "dual", ncarry)
        m2 = MLPBuilder(c, name + "_carry")
        for cc in range(1, ncarry + 1):
            t = Lin() + (2.0 * cin - 1.0)
            for d in range(cc):
                t = t + float(2 ** (d + 1)) * (gp.bit(2 * d) + gp.bit(2 * d + 1) - 1.0)
            m2.threshold(cf, cc - 1, t, 1.0)
        stages.append(m2.build())
        carry_lin = [cin] + [cf.bit(cc - 1) for cc in range(1, ncarry + 1)]
        if carry_out:
            cout_field = cf
    out = out_field(c, name, enc, n)
    m3 = MLPBuilder(c, name)
    for ch, idx in enumerate(chunks):
        for p, i in enumerate(idx):
            Y = lsum(float(1 << q) * (A[idx[q]] + B[idx[q]]) for q in range(p + 1)) + carry_lin[ch]
            u = float(1 << p)
            terms = [(Y - (u - 0.5), 0.5, 1.0), (Y - (2 * u - 0.5), 0.5, -1.0), (Y - (3 * u - 0.5), 0.5, 1.0)]
            m3.boolean(out, i, terms)
    stages.append(m3.build())
    mask = (1 << n) - 1

    def ref(v):
        x, y = int(v[a.name]), int(v[b.name])
        r = {out.name: (x - y) & mask if sub else (x + y) & mask}
        if carry_out:
            total = x + ((~y) & mask) + 1 if sub else x + y
            cbits = 0
            for cc in range(1, nch + 1):
                lo = min(n, cc * chunk)
                lm = (1 << lo) - 1
                xl, yl = x & lm, (((~y) & mask) if sub else y) & lm
                if (xl + yl + int(cin)) >> lo:
                    cbits |= 1 << (cc - 1)
            r[cout_field.name] = cbits
            del total
        return r

    outs = [out] + ([cout_field] if cout_field is not None else [])
    return finish(c, name, "adder", [a, b], outs, stages, ref, {"n": n, "sub": sub, "chunk": chunk})


def prefix_carries(c: Circuit, name: str, A: list, B: list, cin: float, upto: int):
    """Kogge-Stone carries of A + B + cin (0/1 Lins per bit): returns (G, stages) where G[i] is the
    0/1 Lin of the carry out of bit i, for i <= upto. Every threshold has |t| / margin <= 5.

      stage 0   G_0 = [A_0 + B_0 + cin >= 2] (carry out of bit 0); G_i = [A_i + B_i >= 2],
                P_i = [A_i + B_i >= 1] for i >= 1
      level k   for i >= 2^k: G_i' = [2 G_i + P_i + G_{i-2^k} >= 2], P_i' = [P_i + P_{i-2^k} >= 2]
    """
    stages = []
    gp = out_field(c, name + "_gp0", "bits", 2 * (upto + 1))
    m0 = MLPBuilder(c, name + "_gp0")
    m0.threshold(gp, 0, A[0] + B[0] + cin - 1.5, 0.5)
    m0.boolean(gp, 1, [], 0.0)                      # P_0 = 0: nothing propagates past the carry-in
    for i in range(1, upto + 1):
        m0.threshold(gp, 2 * i, A[i] + B[i] - 1.5, 0.5)
        m0.threshold(gp, 2 * i + 1, A[i] + B[i] - 0.5, 0.5)
    stages.append(m0.build())
    G = [gp.bit(2 * i) for i in range(upto + 1)]
    Pp = [gp.bit(2 * i + 1) for i in range(upto + 1)]
    dist, level = 1, 1
    while dist <= upto:
        idx = list(range(dist, upto + 1))
        f = out_field(c, f"{name}_gp{level}", "bits", 2 * len(idx))
        mk = MLPBuilder(c, f"{name}_gp{level}")
        for j, i in enumerate(idx):
            mk.threshold(f, 2 * j, 2.0 * G[i] + Pp[i] + G[i - dist] - 1.5, 0.5)
            mk.threshold(f, 2 * j + 1, Pp[i] + Pp[i - dist] - 1.5, 0.5)
        stages.append(mk.build())
        for j, i in enumerate(idx):
            G[i], Pp[i] = f.bit(2 * j), f.bit(2 * j + 1)
        dist *= 2
        level += 1
    return G, stages


def prefix_adder(c: Circuit, a: Field, b: Field, sub: bool = False, name: str | None = None, enc: str = "bits"):
    """a + b (or a - b) mod 2^n with a Kogge-Stone prefix carry tree (`prefix_carries`): every
    threshold has a tiny range (|t| / margin <= 5), which keeps it exact in bf16 too, at depth
    2 + ceil(log2(n - 1)); the sum bit is s_i = parity(a_i + b_i + c_i), c_0 = cin, c_i = G_{i-1}."""
    n, cin, A, Bv = _operands(a, b, sub)
    name = name or c.unique("psub" if sub else "padd")
    G, stages = prefix_carries(c, name, A, Bv, cin, n - 2) if n > 1 else ([], [])
    out = out_field(c, name, enc, n)
    ms = MLPBuilder(c, name)
    for i in range(n):
        s = A[i] + Bv[i] + (cin if i == 0 else G[i - 1])
        ms.boolean(out, i, [(s - 0.5, 0.5, 1.0), (s - 1.5, 0.5, -1.0), (s - 2.5, 0.5, 1.0)])
    stages.append(ms.build())
    mask = (1 << n) - 1

    def ref(v):
        x, y = int(v[a.name]), int(v[b.name])
        return {out.name: (x - y) & mask if sub else (x + y) & mask}

    return finish(c, name, "adder", [a, b], [out], stages, ref, {"n": n, "sub": sub, "mode": "prefix"})
