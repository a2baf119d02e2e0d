"""Searching and sorting tasks."""
from __future__ import annotations

import numpy as np

from agent.tasks.spec import InputSet, Mismatch, Param, Task, filled, grid_for, text_bytes

B64 = (64, 1, 1)
LAUNCH_1D = ("1-D blocks of 64 threads, gridDim.x = ceil(n / 64) (at least 1 block), so the grid can have "
             "more threads than elements")


# ------------------------------------------------------------------------------ find_first
def _find_first_inputs():
    rng = np.random.default_rng(301)
    sets = []
    a = rng.integers(0, 20, 100).astype(np.int32)
    a[a == 99] = 0
    a[[30, 31, 77]] = 99
    sets.append(InputSet("n=100, key at 30, 31, 77", {"a": a, "key": 99, "first": np.array([100], np.int32), "n": 100},
                         grid_for(100, 64), B64))
    b = rng.integers(0, 20, 70).astype(np.int32)
    b[69] = -5
    sets.append(InputSet("n=70, key only at the last index", {"a": b, "key": -5, "first": np.array([70], np.int32),
                                                             "n": 70}, grid_for(70, 64), B64))
    c = rng.integers(0, 20, 50).astype(np.int32)
    sets.append(InputSet("n=50, key absent", {"a": c, "key": 1234, "first": np.array([50], np.int32), "n": 50},
                         grid_for(50, 64), B64))
    d = np.full(130, 4, np.int32)
    sets.append(InputSet("n=130, every element is the key", {"a": d, "key": 4, "first": np.array([130], np.int32),
                                                            "n": 130}, grid_for(130, 64), B64))
    return sets


def _find_first_expected(s):
    n, key = s.values["n"], s.values["key"]
    hits = np.nonzero(s.values["a"][:n] == key)[0]
    return {"first": np.array([hits[0] if len(hits) else n], np.int32)}


FIND_FIRST = Task(
    name="find_first", title="first occurrence of a key",
    statement="Find the first occurrence of key: first[0] = the smallest i < n with a[i] == key, or n when "
              "key does not occur. first[0] holds n when the kernel starts.",
    kernel="find_first",
    params=(Param("a", "int", "in"), Param("key", "int", "scalar"), Param("first", "int", "out"),
            Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_find_first_inputs, expected=_find_first_expected,
    reference="find_first.cu", wrong=("i < n && a[i] == key", "i < n - 1 && a[i] == key",
                                      "never looks at the last element"),
    kinds=("search", "atomics"), level=2)


# ------------------------------------------------------------------------------ binary_search
def _binary_search_inputs():
    rng = np.random.default_rng(302)
    sets = []
    for n, q in ((1, 5), (40, 64), (200, 100)):
        s = np.sort(rng.integers(-100, 100, n)).astype(np.int32)
        queries = np.concatenate([s[rng.integers(0, n, q // 2)], rng.integers(-120, 120, q - q // 2)]).astype(np.int32)
        queries[0] = -1000
        queries[-1] = 1000
        sets.append(InputSet(f"n={n}, q={q}", {"sorted": s, "n": n, "queries": queries,
                                               "pos": filled("i32", q + 1), "q": q}, grid_for(q, 64), B64))
    dup = np.array([1, 2, 2, 2, 2, 3, 3, 9], np.int32)
    sets.append(InputSet("duplicates", {"sorted": dup, "n": 8, "queries": np.array([2, 3, 9, 10, 0, 1], np.int32),
                                        "pos": filled("i32", 6), "q": 6}, grid_for(6, 64), B64))
    return sets


def _binary_search_expected(s):
    n, q = s.values["n"], s.values["q"]
    pos = s.values["pos"].copy()
    pos[:q] = np.searchsorted(s.values["sorted"][:n], s.values["queries"][:q], side="left")
    return {"pos": pos}


BINARY_SEARCH = Task(
    name="binary_search", title="lower bound by binary search",
    statement="Binary search: sorted[0..n-1] is sorted ascending (with duplicates). For each query j < q, "
              "pos[j] = the number of elements of sorted that are < queries[j] (the lower bound: the first "
              "index whose element is >= queries[j], or n). One thread per query.",
    kernel="binary_search",
    params=(Param("sorted", "int", "in"), Param("n", "int", "scalar"), Param("queries", "int", "in"),
            Param("pos", "int", "out"), Param("q", "int", "scalar")),
    launch="1-D blocks of 64 threads, gridDim.x = ceil(q / 64) (at least 1 block)",
    make_inputs=_binary_search_inputs, expected=_binary_search_expected,
    reference="binary_search.cu", wrong=("sorted[mid] < key", "sorted[mid] <= key", "finds the upper bound"),
    kinds=("search",), level=2)


# ------------------------------------------------------------------------------ substring_count
def _substring_inputs():
    sets = []
    for text, pat in ((b"abababab", b"aba"), (b"the cat sat on the mat with the hat", b"the"),
                      (b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", b"aaaa"),
                      (b"no match in here", b"xyz"), (b"short", b"longer pattern"), (b"abc", b"c")):
        n = len(text)
        sets.append(InputSet(f"text={text[:24]!r}{'...' if n > 24 else ''}, pattern={pat!r}",
                             {"text": text_bytes(text), "n": n, "pat": text_bytes(pat), "m": len(pat),
                              "count": np.zeros(1, np.int32)}, grid_for(n, 64), B64))
    return sets


def _substring_expected(s):
    text = bytes(s.values["text"][:s.values["n"]].tolist())
    pat = bytes(s.values["pat"][:s.values["m"]].tolist())
    c = sum(1 for i in range(len(text) - len(pat) + 1) if text[i:i + len(pat)] == pat)
    return {"count": np.array([c], np.int32)}


SUBSTRING_COUNT = Task(
    name="substring_count", title="count occurrences of a pattern",
    statement="Count the occurrences of a pattern in a text (overlapping ones count): count[0] = the number "
              "of positions i with 0 <= i <= n - m and text[i + j] == pat[j] for every j < m. m >= 1; m can be "
              "larger than n (then the count is 0). count[0] is 0 when the kernel starts.",
    kernel="substring_count",
    params=(Param("text", "unsigned char", "in"), Param("n", "int", "scalar"), Param("pat", "unsigned char", "in"),
            Param("m", "int", "scalar"), Param("count", "int", "out")),
    launch=LAUNCH_1D, make_inputs=_substring_inputs, expected=_substring_expected,
    reference="substring_count.cu", wrong=("if (i > n - m) return;", "if (i >= n - m) return;",
                                           "misses a match at the very end"),
    kinds=("search", "string", "atomics"), level=2)


# ------------------------------------------------------------------------------ sort_ints
def _sort_ints_inputs():
    rng = np.random.default_rng(303)
    return [
        InputSet("n=1", {"a": np.array([42], np.int32), "n": 1}, (1, 1, 1), (128, 1, 1)),
        InputSet("n=10", {"a": rng.integers(-50, 50, 10).astype(np.int32), "n": 10}, (1, 1, 1), (128, 1, 1)),
        InputSet("n=128, reversed", {"a": np.arange(128, 0, -1).astype(np.int32) * 3 - 200, "n": 128},
                 (1, 1, 1), (128, 1, 1)),
        InputSet("n=97, duplicates", {"a": rng.integers(-5, 5, 97).astype(np.int32), "n": 97}, (1, 1, 1), (128, 1, 1)),
        InputSet("n=64, extremes", {"a": np.concatenate([np.array([2**31 - 1, -2**31, 0, -1]),
                                                         rng.integers(-2**31, 2**31 - 1, 60)]).astype(np.int32),
                                    "n": 64}, (1, 1, 1), (128, 1, 1)),
    ]


def _sort_ints_expected(s):
    n = s.values["n"]
    a = s.values["a"].copy()
    a[:n] = np.sort(a[:n])
    return {"a": a}


SORT_INTS = Task(
    name="sort_ints", title="sort ints in one block",
    statement="Sort an int array ascending, in place: afterwards a[0] <= a[1] <= ... <= a[n-1], holding the "
              "same values (duplicates kept). All n elements are handled by one block (for example an "
              "odd-even transposition sort or a bitonic sort in shared memory, with __syncthreads()).",
    kernel="sort_ints",
    params=(Param("a", "int", "inout"), Param("n", "int", "scalar")),
    launch="one block of 128 threads; 1 <= n <= 128",
    make_inputs=_sort_ints_inputs, expected=_sort_ints_expected,
    reference="sort_ints.cu", wrong=("phase < n;", "phase < n / 2;", "too few sorting phases"),
    kinds=("sort", "shared"), level=3)


# ------------------------------------------------------------------------------ sort_pairs
def _sort_pairs_inputs():
    rng = np.random.default_rng(304)
    sets = []
    for n, lo, hi in ((1, 0, 1), (50, -5, 5), (150, -1000, 1000), (64, 7, 8)):
        keys = rng.integers(lo, hi, n).astype(np.int32)
        vals = np.arange(n, dtype=np.int32) * 10 + 1
        sets.append(InputSet(f"n={n}", {"keys": keys, "vals": vals, "out_keys": filled("i32", n + 1),
                                        "out_vals": filled("i32", n + 1), "n": n}, grid_for(n, 64), B64))
    return sets


def _sort_pairs_expected(s):
    n = s.values["n"]
    order = np.argsort(s.values["keys"][:n], kind="stable")
    ok, ov = s.values["out_keys"].copy(), s.values["out_vals"].copy()
    ok[:n] = s.values["keys"][:n][order]
    ov[:n] = s.values["vals"][:n][order]
    return {"out_keys": ok, "out_vals": ov}


SORT_PAIRS = Task(
    name="sort_pairs", title="stable sort of key-value pairs",
    statement="Stable sort of (key, value) pairs by key: write the pairs (keys[i], vals[i]), i < n, to "
              "out_keys and out_vals in ascending key order; pairs with equal keys keep their original "
              "order. Hint: the rank of pair i is the number of j with keys[j] < keys[i], plus the number "
              "of j < i with keys[j] == keys[i].",
    kernel="sort_pairs",
    params=(Param("keys", "int", "in"), Param("vals", "int", "in"), Param("out_keys", "int", "out"),
            Param("out_vals", "int", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D + "; n <= 256",
    make_inputs=_sort_pairs_inputs, expected=_sort_pairs_expected,
    reference="sort_pairs.cu", wrong=("(kj == k && j < i)", "(kj == k && j > i)",
                                      "reverses the order of equal keys (not stable)"),
    kinds=("sort",), level=2)


# ------------------------------------------------------------------------------ is_sorted (property style)
def _is_sorted_inputs():
    rng = np.random.default_rng(305)
    sets = []
    asc = np.sort(rng.integers(-100, 100, 120)).astype(np.int32)
    sets.append(InputSet("n=120, sorted", {"a": asc, "bad": np.zeros(1, np.int32), "n": 120}, grid_for(120, 64), B64))
    un = asc.copy()
    un[40] = un[41] + 1                                 # one descent, at index 41
    sets.append(InputSet("n=120, one pair out of order", {"a": un, "bad": np.zeros(1, np.int32), "n": 120},
                         grid_for(120, 64), B64))
    last = np.arange(70, dtype=np.int32)
    last[69] = 3
    sets.append(InputSet("n=70, last element out of order", {"a": last, "bad": np.zeros(1, np.int32), "n": 70},
                         grid_for(70, 64), B64))
    sets.append(InputSet("n=1", {"a": np.array([5], np.int32), "bad": np.zeros(1, np.int32), "n": 1},
                         grid_for(1, 64), B64))
    eq = np.full(64, 9, np.int32)
    sets.append(InputSet("n=64, all equal", {"a": eq, "bad": np.zeros(1, np.int32), "n": 64}, grid_for(64, 64), B64))
    return sets


def _is_sorted_check(s, outputs):
    n = s.values["n"]
    a = s.values["a"][:n]
    descents = int(np.sum(a[1:] < a[:-1]))
    got = int(outputs["bad"][0])
    # the statement asks for the number of descents; accept nothing else
    if got != descents:
        return [Mismatch(s.name, "bad", 0, descents, got, 1, 1)]
    return []


IS_SORTED = Task(
    name="count_descents", title="count the out-of-order neighbours",
    statement="Check sortedness: bad[0] = the number of indices i with 0 < i < n and a[i - 1] > a[i] (so 0 "
              "means a[0..n-1] is sorted ascending). bad[0] is 0 when the kernel starts.",
    kernel="count_descents",
    params=(Param("a", "int", "in"), Param("bad", "int", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_is_sorted_inputs, check=_is_sorted_check,
    reference="count_descents.cu", wrong=("a[i - 1] > a[i]", "a[i - 1] >= a[i]", "counts equal neighbours too"),
    kinds=("search", "sort", "atomics"), level=1)


TASKS = [FIND_FIRST, BINARY_SEARCH, SUBSTRING_COUNT, SORT_INTS, SORT_PAIRS, IS_SORTED]
