"""Tasks whose natural solution uses double precision, warp intrinsics or shared memory."""
from __future__ import annotations

import numpy as np

from agent.tasks.spec import Close, InputSet, Param, Task, filled, grid_for

B64 = (64, 1, 1)
LAUNCH_1D = ("1-D blocks of 64 threads, gridDim.x = ceil(n / 64) (at least 1 block), so the grid can have "
             "more threads than elements")


# ------------------------------------------------------------------------------ dot_double
def _dot_inputs():
    rng = np.random.default_rng(401)
    sets = []
    for n in (1, 100, 1000, 129):
        sets.append(InputSet(f"n={n}", {"x": rng.uniform(-1, 1, n), "y": rng.uniform(-1e3, 1e3, n),
                                        "out": filled("f64", 2), "n": n}, (1, 1, 1), (128, 1, 1)))
    return sets


def _dot_expected(s):
    n = s.values["n"]
    out = s.values["out"].copy()
    out[0] = float(np.dot(s.values["x"][:n], s.values["y"][:n]))
    return {"out": out}


DOT_DOUBLE = Task(
    name="dot_double", title="double-precision dot product",
    statement="Dot product in double precision: out[0] = x[0]*y[0] + x[1]*y[1] + ... + x[n-1]*y[n-1] "
              "(any summation order; the result must be accurate to about 1e-12 relative). n can exceed the "
              "block size: each thread accumulates a strided part, then the block combines the partial sums "
              "(for example a tree in shared memory).",
    kernel="dot_double",
    params=(Param("x", "double", "in"), Param("y", "double", "in"), Param("out", "double", "out"),
            Param("n", "int", "scalar")),
    launch="one block of 128 threads; 1 <= n <= 4000",
    make_inputs=_dot_inputs, expected=_dot_expected, compare={"out": Close(1e-12, 1e-12)},
    reference="dot_double.cu", wrong=("stride > 0;", "stride > 1;", "stops before the last tree step"),
    kinds=("double", "reduction", "shared"), level=2)


# ------------------------------------------------------------------------------ horner_double
def _horner_inputs():
    rng = np.random.default_rng(402)
    sets = []
    for deg, n in ((0, 5), (3, 64), (7, 90)):
        coef = rng.uniform(-2, 2, deg + 1)
        x = rng.uniform(-1.5, 1.5, n)
        sets.append(InputSet(f"degree={deg}, n={n}", {"coef": coef, "degree": deg, "x": x, "out": filled("f64", n + 1),
                                                     "n": n}, grid_for(n, 64), B64))
    return sets


def _horner_expected(s):
    n, deg = s.values["n"], s.values["degree"]
    c = s.values["coef"]
    x = s.values["x"][:n]
    out = s.values["out"].copy()
    out[:n] = sum(c[d] * x ** d for d in range(deg + 1))
    return {"out": out}


HORNER_DOUBLE = Task(
    name="horner_double", title="evaluate a polynomial in double precision",
    statement="Polynomial evaluation in double precision: out[i] = coef[0] + coef[1]*x[i] + coef[2]*x[i]^2 + "
              "... + coef[degree]*x[i]^degree for 0 <= i < n (Horner's rule; accurate to about 1e-12).",
    kernel="horner_double",
    params=(Param("coef", "double", "in"), Param("degree", "int", "scalar"), Param("x", "double", "in"),
            Param("out", "double", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_horner_inputs, expected=_horner_expected, compare={"out": Close(1e-11, 1e-12)},
    reference="horner_double.cu", wrong=("d >= 0;", "d > 0;", "never adds the constant coefficient"),
    kinds=("double", "arithmetic"), level=2)


# ------------------------------------------------------------------------------ mean_std_double
def _mean_std_inputs():
    rng = np.random.default_rng(403)
    sets = []
    for n, loc in ((1, 3.0), (300, 1000.0), (1000, -2.5), (2, 0.0)):
        x = (loc + rng.normal(0, 2, n)).astype(np.float32)
        sets.append(InputSet(f"n={n}", {"x": x, "n": n, "out": filled("f64", 3)}, (1, 1, 1), (256, 1, 1)))
    return sets


def _mean_std_expected(s):
    n = s.values["n"]
    x = s.values["x"][:n].astype(np.float64)
    out = s.values["out"].copy()
    out[0] = x.mean()
    out[1] = x.std()
    return {"out": out}


MEAN_STD_DOUBLE = Task(
    name="mean_std_double", title="mean and standard deviation in double",
    statement="Mean and population standard deviation of n floats, computed in double precision: out[0] = "
              "mean = (x[0] + ... + x[n-1]) / n, out[1] = sqrt((sum of x[i]^2) / n - mean^2) (the population "
              "formula, divide by n). Accurate to about 1e-9 relative. One block handles everything.",
    kernel="mean_std_double",
    params=(Param("x", "float", "in"), Param("n", "int", "scalar"), Param("out", "double", "out")),
    launch="one block of 256 threads; 1 <= n <= 4000",
    make_inputs=_mean_std_inputs, expected=_mean_std_expected, compare={"out": Close(1e-9, 1e-9)},
    reference="mean_std_double.cu", wrong=("s2[0] / n - mean * mean", "s2[0] / (n - 1) - mean * mean",
                                           "divides the sum of squares by n - 1"),
    kinds=("double", "reduction", "shared"), level=3)


# ------------------------------------------------------------------------------ warp_ballot_count
def _ballot_inputs():
    rng = np.random.default_rng(404)
    sets = []
    for n in (32, 64, 100, 7):
        a = rng.integers(-3, 4, n).astype(np.int32)
        a[0] = 0
        warps = 2 * max(1, -(-n // 64))
        sets.append(InputSet(f"n={n}", {"a": a, "out": filled("i32", warps + 1), "n": n}, grid_for(n, 64), B64))
    return sets


def _ballot_expected(s):
    n = s.values["n"]
    w = 2 * s.grid[0]
    pos = np.zeros(32 * w, dtype=np.int32)
    pos[:n] = s.values["a"][:n] > 0
    out = s.values["out"].copy()
    out[:w] = pos.reshape(w, 32).sum(axis=1)
    return {"out": out}


WARP_BALLOT = Task(
    name="warp_ballot_count", title="count positives per warp with a ballot",
    statement="Positives per warp: the grid's threads form warps of 32 consecutive global indices; out[w] = "
              "the number of indices i of warp w with i < n and a[i] > 0. Use __ballot_sync(0xffffffff, ...) "
              "and __popc (every thread of the warp takes part in the ballot).",
    kernel="warp_ballot_count",
    params=(Param("a", "int", "in"), Param("out", "int", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D + "; out has one element per warp of the grid (2 per block)",
    make_inputs=_ballot_inputs, expected=_ballot_expected,
    reference="warp_ballot_count.cu", wrong=("a[i] > 0", "a[i] >= 0", "counts zeros as positive"),
    kinds=("warp", "reduction"), level=2)


# ------------------------------------------------------------------------------ warp_max
def _warp_max_inputs():
    rng = np.random.default_rng(405)
    sets = []
    for n in (32, 64, 96, 10):
        a = rng.integers(-10**6, 10**6, n).astype(np.int32)
        sets.append(InputSet(f"n={n}", {"a": a, "out": filled("i32", n + 1), "n": n}, grid_for(n, 64), B64))
    neg = np.full(40, -2**31, dtype=np.int32)
    neg[37] = -2**31 + 1
    sets.append(InputSet("n=40, values near INT_MIN", {"a": neg, "out": filled("i32", 41), "n": 40},
                         grid_for(40, 64), B64))
    return sets


def _warp_max_expected(s):
    n = s.values["n"]
    a = s.values["a"][:n]
    out = s.values["out"].copy()
    for w in range(0, n, 32):
        out[w:min(n, w + 32)] = a[w:w + 32].max()
    return {"out": out}


WARP_MAX = Task(
    name="warp_max", title="warp all-reduce max with xor shuffles",
    statement="Warp maximum broadcast: the grid's threads form warps of 32 consecutive global indices; for "
              "i < n, out[i] = the maximum of a[j] over the indices j < n of i's warp. Use a butterfly of "
              "__shfl_xor_sync(0xffffffff, ...) so that every lane ends with the maximum (every thread of "
              "the warp takes part, also those with index >= n).",
    kernel="warp_max",
    params=(Param("a", "int", "in"), Param("out", "int", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_warp_max_inputs, expected=_warp_max_expected,
    reference="warp_max.cu", wrong=("off >= 1;", "off > 1;", "skips the last butterfly step"),
    kinds=("warp", "reduction"), level=3)


# ------------------------------------------------------------------------------ vote_all_rows
def _vote_inputs():
    rng = np.random.default_rng(406)
    sets = []
    for rows in (1, 4, 5):
        m = rng.integers(1, 9, (rows, 32)).astype(np.int32)
        if rows > 1:
            m[1, 7] = 0           # a zero: not all positive, any zero
        if rows > 2:
            m[2, 31] = -4         # a negative: not all positive, no zero
        if rows > 3:
            m[3, 0] = 0
            m[3, 1] = -1
        sets.append(InputSet(f"rows={rows}", {"m": m.reshape(-1), "all_pos": filled("i32", rows + 1),
                                              "any_zero": filled("i32", rows + 1), "rows": rows},
                             (max(1, -(-rows // 2)), 1, 1), B64))
    return sets


def _vote_expected(s):
    rows = s.values["rows"]
    m = s.values["m"].reshape(rows, 32)
    ap, az = s.values["all_pos"].copy(), s.values["any_zero"].copy()
    ap[:rows] = (m > 0).all(axis=1)
    az[:rows] = (m == 0).any(axis=1)
    return {"all_pos": ap, "any_zero": az}


VOTE_ROWS = Task(
    name="vote_all_rows", title="warp votes over matrix rows",
    statement="Row tests with warp votes: m is a rows x 32 int matrix (row-major); warp number r of the grid "
              "(threads 32*r .. 32*r+31 in global order, lane j reads m[r * 32 + j]) handles row r. "
              "all_pos[r] = 1 if every element of row r is > 0, else 0; any_zero[r] = 1 if some element of "
              "row r is 0, else 0. Use __all_sync and __any_sync. Warps with r >= rows do nothing.",
    kernel="vote_all_rows",
    params=(Param("m", "int", "in"), Param("all_pos", "int", "out"), Param("any_zero", "int", "out"),
            Param("rows", "int", "scalar")),
    launch="1-D blocks of 64 threads (2 warps, 2 rows per block), gridDim.x = ceil(rows / 2)",
    make_inputs=_vote_inputs, expected=_vote_expected,
    reference="vote_all_rows.cu", wrong=("v == 0", "v <= 0", "counts negative elements as zeros"),
    kinds=("warp", "search"), level=2)


# ------------------------------------------------------------------------------ reverse_blocks
def _reverse_blocks_inputs():
    rng = np.random.default_rng(407)
    return [InputSet(f"{b} block(s) of 64", {"in": rng.integers(-999, 999, 64 * b).astype(np.int32),
                                             "out": filled("i32", 64 * b)}, (b, 1, 1), B64) for b in (1, 3)]


def _reverse_blocks_expected(s):
    a = s.values["in"]
    return {"out": a.reshape(-1, 64)[:, ::-1].reshape(-1).copy()}


REVERSE_BLOCKS = Task(
    name="reverse_blocks", title="reverse each block's segment through shared memory",
    statement="Reverse each block's 64-element segment through shared memory: for block b and thread t, "
              "out[64*b + t] = in[64*b + 63 - t]. Load the segment into a __shared__ array, "
              "__syncthreads(), then write it out reversed. The arrays hold exactly 64 * gridDim.x elements.",
    kernel="reverse_blocks",
    params=(Param("in", "int", "in"), Param("out", "int", "out")),
    launch="1-D blocks of 64 threads; gridDim.x blocks (1 to 4)",
    make_inputs=_reverse_blocks_inputs, expected=_reverse_blocks_expected,
    reference="reverse_blocks.cu", wrong=("tile[63 - t]", "tile[(64 - t) % 64]", "off by one in the mirror index"),
    kinds=("shared",), level=2)


# ------------------------------------------------------------------------------ stencil_1d
def _stencil_inputs():
    rng = np.random.default_rng(408)
    sets = []
    for n in (1, 64, 150, 65):
        a = np.concatenate([rng.integers(-100, 100, n), [777, 888]]).astype(np.int32)   # junk past n
        sets.append(InputSet(f"n={n}", {"a": a, "out": filled("i32", n + 2), "n": n}, grid_for(n, 64), B64))
    return sets


def _stencil_expected(s):
    n = s.values["n"]
    a = np.concatenate([[0], s.values["a"][:n].astype(np.int64), [0]])
    out = s.values["out"].copy()
    out[:n] = (a[:-2] + a[1:-1] + a[2:]).astype(np.int32)
    return {"out": out}


STENCIL_1D = Task(
    name="stencil_1d", title="3-point stencil with a shared-memory halo",
    statement="Three-point stencil: out[i] = a[i-1] + a[i] + a[i+1] for 0 <= i < n, where a[-1] and a[n] "
              "count as 0 (a may hold other data past index n-1: do not read it). The natural solution "
              "loads each block's 64 elements plus one halo element on each side into shared memory.",
    kernel="stencil_1d",
    params=(Param("a", "int", "in"), Param("out", "int", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_stencil_inputs, expected=_stencil_expected,
    reference="stencil_1d.cu", wrong=("if (t == 63) s[65] = i + 1 < n ? a[i + 1] : 0;", "if (t == 63) s[65] = 0;",
                                      "drops the right neighbour across a block boundary"),
    kinds=("shared", "arithmetic"), level=2)


TASKS = [DOT_DOUBLE, HORNER_DOUBLE, MEAN_STD_DOUBLE, WARP_BALLOT, WARP_MAX, VOTE_ROWS, REVERSE_BLOCKS, STENCIL_1D]
