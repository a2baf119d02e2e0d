"""Reductions, scans and histograms: atomics, shared-memory trees, warp shuffles."""
from __future__ import annotations

import numpy as np

from agent.tasks.spec import InputSet, Param, Task, filled, grid_for, text_bytes

B64 = (64, 1, 1)
LAUNCH_1D = ("1-D blocks of 64 threads, gridDim.x = ceil(n / 64) (at least 1 block), so the grid can have "
             "more threads than elements")


def _ints(rng, n, lo=-1000, hi=1000):
    return rng.integers(lo, hi, max(n, 1)).astype(np.int32)


# ------------------------------------------------------------------------------ sum_atomic
def _sum_inputs():
    rng = np.random.default_rng(201)
    sets = [InputSet(f"n={n}", {"a": _ints(rng, n), "total": np.zeros(1, np.int32), "n": n}, grid_for(n, 64), B64)
            for n in (1, 64, 200, 0)]
    big = np.full(40, 2**30, dtype=np.int32)           # the 32-bit sum wraps around
    sets.append(InputSet("n=40, values 2^30 (the sum wraps)", {"a": big, "total": np.zeros(1, np.int32), "n": 40},
                         grid_for(40, 64), B64))
    return sets


def _sum_expected(s):
    n = s.values["n"]
    return {"total": np.array([np.sum(s.values["a"][:n].astype(np.int64))], dtype=np.int64).astype(np.int32)}


SUM_ATOMIC = Task(
    name="sum_atomic", title="sum of an int array",
    statement="Sum an int array: total[0] = a[0] + a[1] + ... + a[n-1] with 32-bit wrap-around. total[0] is "
              "0 when the kernel starts.",
    kernel="sum_atomic",
    params=(Param("a", "int", "in"), Param("total", "int", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_sum_inputs, expected=_sum_expected,
    reference="sum_atomic.cu", wrong=("atomicAdd(total, a[i]);", "*total += a[i];",
                                      "a plain read-modify-write races between threads"),
    kinds=("reduction", "atomics"), level=1)


# ------------------------------------------------------------------------------ max_atomic
def _max_inputs():
    rng = np.random.default_rng(202)
    sets = []
    for n in (1, 50, 130):
        a = _ints(rng, n, -10**6, 10**6)
        sets.append(InputSet(f"n={n}", {"a": a, "result": np.array([-2**31], np.int32), "n": n},
                             grid_for(n, 64), B64))
    a = _ints(rng, 70, -500, -100)
    a[0] = -7                                           # the maximum is the very first element
    sets.append(InputSet("n=70, all negative, maximum at index 0", {"a": a, "result": np.array([-2**31], np.int32),
                                                                   "n": 70}, grid_for(70, 64), B64))
    return sets


def _max_expected(s):
    return {"result": np.array([s.values["a"][:s.values["n"]].max()], dtype=np.int32)}


MAX_ATOMIC = Task(
    name="max_atomic", title="maximum of an int array",
    statement="Maximum of an int array (n >= 1, values may be negative): result[0] = max(a[0], ..., a[n-1]). "
              "result[0] holds INT_MIN (-2147483648) when the kernel starts.",
    kernel="max_atomic",
    params=(Param("a", "int", "in"), Param("result", "int", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_max_inputs, expected=_max_expected,
    reference="max_atomic.cu", wrong=("if (i < n)", "if (i > 0 && i < n)", "ignores element 0"),
    kinds=("reduction", "atomics"), level=1)


# ------------------------------------------------------------------------------ block_sum_shared
def _block_sum_inputs():
    rng = np.random.default_rng(203)
    sets = []
    for n in (1, 128, 300, 256):
        blocks = max(1, -(-n // 128))
        sets.append(InputSet(f"n={n}", {"a": _ints(rng, n, -10**5, 10**5), "out": filled("i32", blocks + 1), "n": n},
                             (blocks, 1, 1), (128, 1, 1)))
    return sets


def _block_sum_expected(s):
    n = s.values["n"]
    a = s.values["a"][:n].astype(np.int64)
    out = s.values["out"].copy()
    blocks = s.grid[0]
    for b in range(blocks):
        out[b] = np.int64(a[128 * b:128 * (b + 1)].sum()).astype(np.int32)
    return {"out": out}


BLOCK_SUM = Task(
    name="block_sum_shared", title="per-block sums with a shared-memory tree",
    statement="Per-block sums: block b sums its 128 elements a[128*b .. 128*b+127] (elements at index n or "
              "beyond count as 0) and writes out[b]. Use a tree reduction in shared memory with "
              "__syncthreads() between the steps.",
    kernel="block_sum_shared",
    params=(Param("a", "int", "in"), Param("out", "int", "out"), Param("n", "int", "scalar")),
    launch="1-D blocks of 128 threads, gridDim.x = ceil(n / 128) (at least 1 block); out has one element per block",
    make_inputs=_block_sum_inputs, expected=_block_sum_expected,
    reference="block_sum_shared.cu", wrong=("stride > 0;", "stride > 1;", "stops before the last tree step"),
    kinds=("reduction", "shared"), level=2)


# ------------------------------------------------------------------------------ warp_sum
def _warp_sum_inputs():
    rng = np.random.default_rng(204)
    sets = []
    for n in (32, 64, 100, 5):
        warps = 2 * max(1, -(-n // 64))
        sets.append(InputSet(f"n={n}", {"a": _ints(rng, n), "out": filled("i32", warps + 1), "n": n},
                             grid_for(n, 64), B64))
    return sets


def _warp_sum_expected(s):
    n = s.values["n"]
    a = np.zeros(2 * 64 * s.grid[0], dtype=np.int64)
    a[:n] = s.values["a"][:n]
    out = s.values["out"].copy()
    w = 2 * s.grid[0]
    out[:w] = a[:32 * w].reshape(w, 32).sum(axis=1).astype(np.int32)
    return {"out": out}


WARP_SUM = Task(
    name="warp_sum", title="warp-shuffle reduction",
    statement="Warp sums with shuffles: the grid's threads form warps of 32 consecutive global indices; "
              "warp w sums a[32*w .. 32*w+31] (elements at index n or beyond count as 0) and writes out[w]. "
              "Use __shfl_down_sync (or __shfl_xor_sync) with the full mask 0xffffffff: every thread of the "
              "warp must take part in each shuffle, also those whose index is >= n.",
    kernel="warp_sum",
    params=(Param("a", "int", "in"), Param("out", "int", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D + "; out has one element per warp of the grid (2 per block)",
    make_inputs=_warp_sum_inputs, expected=_warp_sum_expected,
    reference="warp_sum.cu", wrong=("int off = 16;", "int off = 8;", "skips the first shuffle step"),
    kinds=("reduction", "warp"), level=3)


# ------------------------------------------------------------------------------ argmax
def _argmax_inputs():
    rng = np.random.default_rng(205)
    sets = []
    for n, ties in ((1, ()), (100, (17, 70, 99)), (300, (5, 133, 260)), (128, (0, 127))):
        a = _ints(rng, n, -10**4, 10**4)
        for j in ties:
            a[j] = 20000
        sets.append(InputSet(f"n={n}" + (f", maximum at {list(ties)}" if ties else ""),
                             {"a": a, "out": filled("i32", 2), "n": n}, (1, 1, 1), (128, 1, 1)))
    return sets


def _argmax_expected(s):
    out = s.values["out"].copy()
    out[0] = int(np.argmax(s.values["a"][:s.values["n"]]))     # numpy: the first maximum
    return {"out": out}


ARGMAX = Task(
    name="argmax", title="index of the maximum",
    statement="Index of the maximum of an int array (n >= 1): out[0] = the smallest index j with a[j] equal "
              "to the maximum of a[0..n-1]. n can exceed the block size, so each thread first scans a "
              "strided part of the array, then the block combines the partial results.",
    kernel="argmax",
    params=(Param("a", "int", "in"), Param("out", "int", "out"), Param("n", "int", "scalar")),
    launch="one block of 128 threads; 1 <= n <= 1000",
    make_inputs=_argmax_inputs, expected=_argmax_expected,
    reference="argmax.cu", wrong=("oi < si[t]", "oi > si[t]", "breaks ties towards the larger index"),
    kinds=("reduction", "search", "shared"), level=3)


# ------------------------------------------------------------------------------ scan_shared
def _scan_inputs():
    rng = np.random.default_rng(206)
    return [InputSet(f"n={n}", {"a": _ints(rng, n, -100, 100), "out": filled("i32", max(n, 1) + 2), "n": n},
                     (1, 1, 1), (256, 1, 1)) for n in (1, 7, 200, 256)]


def _scan_expected(s):
    n = s.values["n"]
    out = s.values["out"].copy()
    out[:n] = np.cumsum(s.values["a"][:n].astype(np.int64)).astype(np.int32)
    return {"out": out}


SCAN_SHARED = Task(
    name="scan_shared", title="inclusive prefix sum in shared memory",
    statement="Inclusive prefix sum: out[i] = a[0] + a[1] + ... + a[i] for 0 <= i < n. All n elements are "
              "handled by one block: stage them in shared memory and scan there (for example Hillis-Steele "
              "with __syncthreads() between the steps).",
    kernel="scan_shared",
    params=(Param("a", "int", "in"), Param("out", "int", "out"), Param("n", "int", "scalar")),
    launch="one block of 256 threads; 1 <= n <= 256",
    make_inputs=_scan_inputs, expected=_scan_expected,
    reference="scan_shared.cu", wrong=("if (t >= offset)", "if (t > offset)", "drops one term at every step"),
    kinds=("scan", "shared"), level=3)


# ------------------------------------------------------------------------------ warp_scan
def _warp_scan_inputs():
    rng = np.random.default_rng(207)
    return [InputSet(f"n={n}", {"a": _ints(rng, n, -50, 50), "out": filled("i32", max(n, 1) + 1), "n": n},
                     grid_for(n, 64), B64) for n in (32, 64, 90, 3)]


def _warp_scan_expected(s):
    n = s.values["n"]
    a = s.values["a"][:n].astype(np.int64)
    out = s.values["out"].copy()
    for w in range(0, n, 32):
        seg = a[w:w + 32]
        out[w:w + len(seg)] = (np.cumsum(seg) - seg).astype(np.int32)
    return {"out": out}


WARP_SCAN = Task(
    name="warp_scan", title="exclusive scan within each warp",
    statement="Exclusive prefix sum within each warp: the grid's threads form warps of 32 consecutive global "
              "indices; for 0 <= i < n, out[i] = the sum of a[j] over the indices j < i of the same warp "
              "(so out[i] = 0 at the first index of every warp). Use __shfl_up_sync with the full mask "
              "0xffffffff (every thread of the warp takes part; a[j] for j >= n counts as 0).",
    kernel="warp_scan",
    params=(Param("a", "int", "in"), Param("out", "int", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_warp_scan_inputs, expected=_warp_scan_expected,
    reference="warp_scan.cu", wrong=("out[i] = x - v;", "out[i] = x;", "writes the inclusive scan"),
    kinds=("scan", "warp"), level=3)


# ------------------------------------------------------------------------------ histogram
def _histogram_inputs():
    rng = np.random.default_rng(208)
    sets = []
    for n in (1, 64, 250):
        data = rng.integers(0, 256, n).astype(np.uint8)
        sets.append(InputSet(f"n={n}", {"data": data, "bins": np.zeros(16, np.int32), "n": n},
                             grid_for(n, 64), B64))
    edge = text_bytes(bytes([0, 15, 16, 31, 255, 240, 128, 127] * 5))
    sets.append(InputSet("n=40, bin edges", {"data": edge, "bins": np.zeros(16, np.int32), "n": 40},
                         grid_for(40, 64), B64))
    return sets


def _histogram_expected(s):
    n = s.values["n"]
    return {"bins": np.bincount(s.values["data"][:n] // 16, minlength=16).astype(np.int32)}


HISTOGRAM = Task(
    name="histogram", title="16-bin byte histogram with atomics",
    statement="Histogram of bytes into 16 bins of width 16: bins[b] = the number of i < n with "
              "data[i] / 16 == b. bins[0..15] are 0 when the kernel starts. Use atomicAdd (for speed, "
              "a per-block histogram in shared memory merged into bins at the end).",
    kernel="histogram",
    params=(Param("data", "unsigned char", "in"), Param("bins", "int", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_histogram_inputs, expected=_histogram_expected,
    reference="histogram.cu", wrong=("data[i] >> 4", "data[i] / 17", "bins of width 17"),
    kinds=("histogram", "atomics", "shared"), level=3)


# ------------------------------------------------------------------------------ count_equal
def _count_equal_inputs():
    rng = np.random.default_rng(209)
    sets = []
    for n, key in ((10, 3), (150, 7), (1, 5), (64, -2)):
        a = rng.integers(-3, 10, max(n, 1)).astype(np.int32)
        sets.append(InputSet(f"n={n}, key={key}", {"a": a, "key": key, "count": np.zeros(1, np.int32), "n": n},
                             grid_for(n, 64), B64))
    return sets


def _count_equal_expected(s):
    n = s.values["n"]
    return {"count": np.array([int(np.sum(s.values["a"][:n] == s.values["key"]))], np.int32)}


COUNT_EQUAL = Task(
    name="count_equal", title="count the elements equal to a key",
    statement="Count the elements equal to key: count[0] = the number of i < n with a[i] == key. count[0] is "
              "0 when the kernel starts.",
    kernel="count_equal",
    params=(Param("a", "int", "in"), Param("key", "int", "scalar"), Param("count", "int", "out"),
            Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_count_equal_inputs, expected=_count_equal_expected,
    reference="count_equal.cu", wrong=("a[i] == key", "a[i] >= key", "counts larger elements too"),
    kinds=("reduction", "search", "atomics"), level=1)


TASKS = [SUM_ATOMIC, MAX_ATOMIC, BLOCK_SUM, WARP_SUM, ARGMAX, SCAN_SHARED, WARP_SCAN, HISTOGRAM, COUNT_EQUAL]
