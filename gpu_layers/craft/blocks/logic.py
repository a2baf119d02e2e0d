"""Boolean gates, threshold functions, word equality / comparison, multiplexers and shifts.

All of them are MLP stages of threshold steps (see `MLPBuilder`). Inputs may be any field with
bits (bits, dual, rail3, onehot entries); outputs are new fields (bits by default, `enc=` to choose).
"""
from __future__ import annotations

from ..circuit import Circuit, CircuitError
from ..fields import Field, Lin, lsum
from .base import MLPBuilder, finish, out_field, symmetric_terms

GATES = {
    # name: table over popcount k of n inputs (n filled at build time)
    "AND": lambda n: [0] * n + [1],
    "OR": lambda n: [0] + [1] * n,
    "NAND": lambda n: [1] * n + [0],
    "NOR": lambda n: [1] + [0] * n,
    "XOR": lambda n: [k % 2 for k in range(n + 1)],
    "XNOR": lambda n: [1 - k % 2 for k in range(n + 1)],
}


def _ins(xs) -> list[Lin]:
    return [x if isinstance(x, Lin) else x.bit(0) for x in xs]


def gate(c: Circuit, op: str, inputs, name: str | None = None, enc: str = "bits"):
    """One boolean gate of n inputs (Lins of 0/1 values, or 1-bit fields): AND/OR/NAND/NOR/XOR/XNOR/NOT.
    XOR of n inputs is parity (n steps); AND/OR/NAND/NOR are one step."""
    xs = _ins(inputs)
    op = op.upper()
    if op == "NOT":
        if len(xs) != 1:
            raise CircuitError("NOT takes one input")
        op = "NOR"
    if op not in GATES:
        raise CircuitError(f"unknown gate {op}")
    table = GATES[op](len(xs))
    name = name or c.unique(op.lower())
    out = out_field(c, name, enc, 1)
    b = MLPBuilder(c, name)
    terms, c0 = symmetric_terms(lsum(xs), table)
    b.boolean(out, 0, terms, c0)
    st = b.build()
    in_names = [x.name for x in inputs if isinstance(x, Field)]

    def ref(v):
        k = sum(int(v[n]) & 1 for n in in_names)
        return {out.name: table[k]}

    return finish(c, name, "gate", [x for x in inputs if isinstance(x, Field)], [out], [st], ref,
                  {"op": op, "n": len(xs)})


def threshold_gate(c: Circuit, inputs, weights, theta: float, name: str | None = None, enc: str = "bits"):
    """[sum_i w_i x_i >= theta] for 0/1 inputs and integer weights: one step."""
    xs = _ins(inputs)
    if any(int(w) != w for w in weights) or int(theta) != theta:
        raise CircuitError("threshold gates take integer weights and threshold")
    name = name or c.unique("thr")
    out = out_field(c, name, enc, 1)
    b = MLPBuilder(c, name)
    b.threshold(out, 0, lsum(w * x for w, x in zip(weights, xs)) - (theta - 0.5), 0.5)
    st = b.build()
    in_names = [x.name for x in inputs if isinstance(x, Field)]

    def ref(v):
        s = sum(w * (int(v[n]) & 1) for w, n in zip(weights, in_names))
        return {out.name: int(s >= theta)}

    return finish(c, name, "threshold", [x for x in inputs if isinstance(x, Field)], [out], [st], ref,
                  {"n": len(xs), "theta": theta})


def bitwise(c: Circuit, op: str, a: Field, b: Field | None = None, name: str | None = None, enc: str = "bits"):
    """Bitwise AND/OR/XOR/... of two words (NOT of one): one stage, 1-2 steps per bit."""
    op = op.upper()
    n = a.n
    name = name or c.unique(op.lower() + "w")
    out = out_field(c, name, enc, n)
    mb = MLPBuilder(c, name)
    for i in range(n):
        xs = [a.bit(i)] if op == "NOT" else [a.bit(i), b.bit(i)]
        table = GATES["NOR" if op == "NOT" else op](len(xs))
        terms, c0 = symmetric_terms(lsum(xs), table)
        mb.boolean(out, i, terms, c0)
    st = mb.build()
    mask = (1 << n) - 1
    fn = {"AND": lambda x, y: x & y, "OR": lambda x, y: x | y, "XOR": lambda x, y: x ^ y,
          "NAND": lambda x, y: ~(x & y), "NOR": lambda x, y: ~(x | y), "XNOR": lambda x, y: ~(x ^ y),
          "NOT": lambda x, y: ~x}[op]

    def ref(v):
        return {out.name: fn(int(v[a.name]), int(v[b.name]) if b is not None else 0) & mask}

    return finish(c, name, "bitwise", [a] + ([b] if b is not None else []), [out], [st], ref, {"op": op, "n": n})


def equal(c: Circuit, a: Field, b: Field | int, name: str | None = None, enc: str = "dual",
          fanin: int | None = None):
    """[a == b] for two words (2 stages: per-bit XOR, then NOR) or a word and a constant (1 stage).
    fanin: reduce the mismatches in an OR tree of this fan-in first (bf16-safe with fanin <= 16;
    one more stage per tree level)."""
    if fanin is not None and not isinstance(b, int):
        return _equal_tree(c, a, b, name or c.unique("eq"), enc, fanin)
    n = a.n
    name = name or c.unique("eq")
    out = out_field(c, name, enc, 1)
    if isinstance(b, int):
        mb = MLPBuilder(c, name)
        match = lsum(a.bit(i) if (b >> i) & 1 else 1.0 - a.bit(i) for i in range(n))
        mb.threshold(out, 0, match - (n - 0.5), 0.5)
        stages = [mb.build()]
        inputs = [a]

        def ref(v):
            return {out.name: int(int(v[a.name]) == b)}
    else:
        diff = out_field(c, name + "_diff", "bits", n)
        m1 = MLPBuilder(c, name + "_xor")
        for i in range(n):
            terms, c0 = symmetric_terms(a.bit(i) + b.bit(i), [0, 1, 0])
            m1.boolean(diff, i, terms, c0)
        s1 = m1.build()
        m2 = MLPBuilder(c, name)
        m2.threshold(out, 0, 0.5 - lsum(diff.bit(i) for i in range(n)), 0.5)
        stages = [s1, m2.build()]
        inputs = [a, b]

        def ref(v):
            return {out.name: int(int(v[a.name]) == int(v[b.name]))}

    return finish(c, name, "equal", inputs, [out], stages, ref, {"n": n})


def _equal_tree(c, a, b, name, enc, fanin):
    n = a.n
    out = out_field(c, name, enc, 1)
    diff = out_field(c, name + "_diff", "bits", n)
    m1 = MLPBuilder(c, name + "_xor")
    for i in range(n):
        terms, c0 = symmetric_terms(a.bit(i) + b.bit(i), [0, 1, 0])
        m1.boolean(diff, i, terms, c0)
    stages = [m1.build()]
    cur = [diff.bit(i) for i in range(n)]
    level = 0
    while len(cur) > fanin:
        groups = [cur[k:k + fanin] for k in range(0, len(cur), fanin)]
        f = out_field(c, f"{name}_or{level}", "bits", len(groups))
        mk = MLPBuilder(c, f"{name}_or{level}")
        for j, g in enumerate(groups):
            mk.threshold(f, j, lsum(g) - 0.5, 0.5)
        stages.append(mk.build())
        cur = [f.bit(j) for j in range(len(groups))]
        level += 1
    m2 = MLPBuilder(c, name)
    m2.threshold(out, 0, 0.5 - lsum(cur), 0.5)
    stages.append(m2.build())

    def ref(v):
        return {out.name: int(int(v[a.name]) == int(v[b.name]))}

    return finish(c, name, "equal", [a, b], [out], stages, ref, {"n": n, "fanin": fanin})


def compare(c: Circuit, a: Field, b: Field, signed: bool = False, chunk: int = 8, name: str | None = None,
            enc: str = "dual", mode: str = "chunk"):
    """[a < b] (unsigned or two's-complement signed).

    mode 'chunk' (2 stages, fp32): per chunk of `chunk` bits lt/gt (threshold of sum 2^i (b_i - a_i),
    exact in fp32 for chunk <= 20), then a lexicographic threshold over chunks: sign of
    sum_c 2^(c+1) (lt_c - gt_c) - 1.
    mode 'prefix' (bf16-safe, 2 + ceil(log2 n) stages): a < b iff a + ~b + 1 has no carry out
    (Kogge-Stone carries; signed: both sign bits flipped)."""
    if mode == "prefix":
        from .arith import prefix_carries
        n = a.n
        name = name or c.unique("lt")
        out = out_field(c, name, enc, 1)
        A = [a.bit(i) for i in range(n)]
        Bn = [1.0 - b.bit(i) for i in range(n)]
        if signed:
            A[n - 1], Bn[n - 1] = 1.0 - a.bit(n - 1), b.bit(n - 1)
        G, stages = prefix_carries(c, name, A, Bn, 1.0, n - 1)
        mk = MLPBuilder(c, name)
        mk.threshold(out, 0, 0.5 - G[n - 1], 0.5)
        stages.append(mk.build())

        def val(x):
            x = int(x)
            return x - (1 << n) if signed and (x >> (n - 1)) & 1 else x

        def ref(v):
            return {out.name: int(val(v[a.name]) < val(v[b.name]))}

        return finish(c, name, "compare", [a, b], [out], stages, ref, {"n": n, "signed": signed, "mode": mode})
    n = a.n
    if b.n != n:
        raise CircuitError("compare needs equal widths")
    name = name or c.unique("lt")
    out = out_field(c, name, enc, 1)
    nch = (n + chunk - 1) // chunk
    lg = out_field(c, name + "_chunks", "bits", 2 * nch)
    m1 = MLPBuilder(c, name + "_chunk")
    for ch in range(nch):
        d = Lin()
        for i in range(ch * chunk, min(n, (ch + 1) * chunk)):
            w = float(1 << (i - ch * chunk))
            if signed and i == n - 1:
                w = -w
            d = d + w * (b.bit(i) - a.bit(i))
        m1.threshold(lg, 2 * ch, d - 0.5, 0.5)        # lt_c: d >= 1
        m1.threshold(lg, 2 * ch + 1, -d - 0.5, 0.5)   # gt_c: d <= -1
    s1 = m1.build()
    m2 = MLPBuilder(c, name)
    t = lsum(float(2 ** (ch + 1)) * (lg.bit(2 * ch) - lg.bit(2 * ch + 1)) for ch in range(nch)) - 1.0
    m2.threshold(out, 0, t, 1.0)
    s2 = m2.build()

    def val(x):
        x = int(x)
        return x - (1 << n) if signed and (x >> (n - 1)) & 1 else x

    def ref(v):
        return {out.name: int(val(v[a.name]) < val(v[b.name]))}

    return finish(c, name, "compare", [a, b], [out], [s1, s2], ref, {"n": n, "signed": signed, "chunk": chunk})


def _select_term(sel: Field, k: int) -> tuple[Lin, int]:
    """(sum of matches, count) such that selector == k iff the sum equals count."""
    if sel.enc == "onehot":
        return sel.hot(k), 1
    nb = sel.n
    return lsum(sel.bit(j) if (k >> j) & 1 else 1.0 - sel.bit(j) for j in range(nb)), nb


def mux(c: Circuit, sel: Field, words: list[Field], name: str | None = None, enc: str = "bits"):
    """out = words[sel]: sel one-hot of len(words) or a binary index; one stage, one step per
    (word, bit): [sel == k and w_k[i]]."""
    n = words[0].n
    if any(w.n != n for w in words):
        raise CircuitError("mux words must have equal widths")
    if sel.enc == "onehot" and sel.n != len(words):
        raise CircuitError("one-hot selector size must equal the number of words")
    if sel.enc != "onehot" and (1 << sel.n) < len(words):
        raise CircuitError("binary selector too narrow")
    name = name or c.unique("mux")
    out = out_field(c, name, enc, n)
    mb = MLPBuilder(c, name)
    for i in range(n):
        terms = []
        for k, w in enumerate(words):
            s, cnt = _select_term(sel, k)
            terms.append((s + w.bit(i) - (cnt + 0.5), 0.5, 1.0))
        mb.boolean(out, i, terms)
    st = mb.build()

    def ref(v):
        k = int(v[sel.name])
        return {out.name: int(v[words[k].name]) if k < len(words) else 0}

    return finish(c, name, "mux", [sel, *words], [out], [st], ref, {"n": n, "ways": len(words)})


def shift(c: Circuit, x: Field, amt: Field, left: bool = True, fill: str = "zero", digit_bits: int = 3,
          name: str | None = None, enc: str = "bits"):
    """x << amt (left) or x >> amt (right; fill 'zero' = logical, 'sign' = arithmetic).

    amt one-hot of n positions: one stage of n*n AND steps. amt binary (bits): a barrel shifter,
    one stage per digit of `digit_bits` bits (radix 2**digit_bits), each [digit == v and x[i -+ v*2^s]].
    Amounts >= n give 0 (or all sign bits)."""
    n = x.n
    name = name or c.unique("shl" if left else "shr")
    if amt.enc == "onehot":
        digits = [(0, None)]
    else:
        digits = [(s, list(range(s, min(amt.n, s + digit_bits)))) for s in range(0, amt.n, digit_bits)]
    cur = x
    stages = []
    for di, (s, jbits) in enumerate(digits):
        last = di == len(digits) - 1
        out = out_field(c, name if last else f"{name}_d{di}", enc if last else "bits", n)
        mb = MLPBuilder(c, name if last else f"{name}_d{di}")
        if jbits is None:
            vals = [(v, amt.hot(v), 1, v) for v in range(amt.n)]
        else:
            vals = []
            for v in range(1 << len(jbits)):
                m = lsum(amt.bit(j) if (v >> (j - s)) & 1 else 1.0 - amt.bit(j) for j in jbits)
                vals.append((v, m, len(jbits), v << s))
        for i in range(n):
            terms = []
            for v, match, cnt, dist in vals:
                src = i - dist if left else i + dist
                if 0 <= src < n:
                    terms.append((match + cur.bit(src) - (cnt + 0.5), 0.5, 1.0))
                elif not left and fill == "sign":
                    terms.append((match + cur.bit(n - 1) - (cnt + 0.5), 0.5, 1.0))
            if terms:
                mb.boolean(out, i, terms)
            else:
                mb.boolean(out, i, [], 0.0)
        stages.append(mb.build())
        cur = out
    mask = (1 << n) - 1

    def ref(v):
        xv, k = int(v[x.name]), int(v[amt.name])
        if left:
            r = (xv << k) & mask if k < n else 0
        else:
            if fill == "sign" and (xv >> (n - 1)) & 1:
                xs = xv - (1 << n)
                r = (xs >> min(k, n)) & mask
            else:
                r = xv >> k if k < n else 0
        return {cur.name: r}

    return finish(c, name, "shift", [x, amt], [cur], stages, ref,
                  {"n": n, "left": left, "fill": fill, "amount": amt.enc})
