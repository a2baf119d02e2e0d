"""Arithmetic tasks: element-wise float and integer work, number theory, small matrices."""
from __future__ import annotations

import math

import numpy as np

from agent.tasks.spec import Close, InputSet, Param, Task, filled, grid_for

B64 = (64, 1, 1)
LAUNCH_1D = ("1-D blocks of 64 threads, gridDim.x = ceil(n / 64) (at least 1 block), so the grid can have "
             "more threads than elements")


def _f32(rng, n, lo=-100.0, hi=100.0):
    return rng.uniform(lo, hi, n).astype(np.float32)


# ------------------------------------------------------------------------------ vec_add
def _vec_add_inputs():
    rng = np.random.default_rng(101)
    sets = []
    for n, extra in ((1, 3), (64, 4), (100, 5), (0, 4), (130, 2)):
        a, b = _f32(rng, max(n, 1)), _f32(rng, max(n, 1))
        if n == 100:
            a[:4] = [np.inf, -0.0, 1e-38, 3.0e38]
            b[:4] = [1.0, 0.0, -1e-38, 3.0e38]
        sets.append(InputSet(f"n={n}", {"a": a, "b": b, "c": filled("f32", max(n, 1) + extra), "n": n},
                             grid_for(n, 64), B64))
    return sets


def _vec_add_expected(s):
    n = s.values["n"]
    c = s.values["c"].copy()
    with np.errstate(over="ignore"):
        c[:n] = s.values["a"][:n] + s.values["b"][:n]
    return {"c": c}


VEC_ADD = Task(
    name="vec_add", title="add two float arrays",
    statement="Add two float arrays element by element: c[i] = a[i] + b[i] for 0 <= i < n.",
    kernel="vec_add",
    params=(Param("a", "float", "in"), Param("b", "float", "in"), Param("c", "float", "out"),
            Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_vec_add_inputs, expected=_vec_add_expected,
    reference="vec_add.cu", wrong=("if (i < n)", "if (i < n - 1)", "skips the last element"),
    kinds=("arithmetic",), level=1)


# ------------------------------------------------------------------------------ saxpy
def _saxpy_inputs():
    rng = np.random.default_rng(102)
    sets = []
    for n, a in ((5, 2.5), (64, -0.75), (97, 3.0), (0, 1.5)):
        m = max(n, 1)
        sets.append(InputSet(f"n={n}, a={a}", {"a": a, "x": _f32(rng, m), "y": np.concatenate(
            [_f32(rng, m), filled("f32", 3)]), "n": n}, grid_for(n, 64), B64))
    return sets


def _saxpy_expected(s):
    n, a = s.values["n"], np.float64(s.values["a"])
    y = s.values["y"].copy()
    y[:n] = (a * s.values["x"][:n].astype(np.float64) + y[:n].astype(np.float64)).astype(np.float32)
    return {"y": y}


SAXPY = Task(
    name="saxpy", title="single-precision a*x plus y",
    statement="Single-precision a*x plus y, in place: y[i] = a * x[i] + y[i] for 0 <= i < n. "
              "Elements of y at index n and beyond must stay unchanged.",
    kernel="saxpy",
    params=(Param("a", "float", "scalar"), Param("x", "float", "in"), Param("y", "float", "inout"),
            Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_saxpy_inputs, expected=_saxpy_expected, compare={"y": Close(1e-6, 1e-5)},
    reference="saxpy.cu", wrong=("a * x[i] + y[i]", "x[i] + a * y[i]", "scales y instead of x"),
    kinds=("arithmetic",), level=1)


# ------------------------------------------------------------------------------ clamp
def _clamp_inputs():
    rng = np.random.default_rng(103)
    sets = []
    for n, lo, hi in ((10, -1.0, 1.0), (64, 0.5, 20.0), (77, -30.0, -10.0), (3, 2.0, 2.0)):
        x = _f32(rng, n)
        x[0] = np.inf
        if n > 1:
            x[1] = -np.inf
        sets.append(InputSet(f"n={n}, lo={lo}, hi={hi}", {"x": x, "out": filled("f32", n + 2), "lo": lo,
                                                         "hi": hi, "n": n}, grid_for(n, 64), B64))
    return sets


def _clamp_expected(s):
    n = s.values["n"]
    out = s.values["out"].copy()
    out[:n] = np.minimum(np.maximum(s.values["x"][:n], np.float32(s.values["lo"])), np.float32(s.values["hi"]))
    return {"out": out}


CLAMP = Task(
    name="clamp", title="clamp floats to a range",
    statement="Clamp every element to the range [lo, hi] (lo <= hi): out[i] = lo if x[i] < lo, hi if "
              "x[i] > hi, else x[i], for 0 <= i < n. x holds no NaN but may hold +inf and -inf.",
    kernel="clamp",
    params=(Param("x", "float", "in"), Param("out", "float", "out"), Param("lo", "float", "scalar"),
            Param("hi", "float", "scalar"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_clamp_inputs, expected=_clamp_expected,
    reference="clamp.cu", wrong=("fminf(fmaxf(x[i], lo), hi)", "fmaxf(fminf(x[i], hi), -hi)",
                                 "uses -hi as the lower bound"),
    kinds=("arithmetic",), level=1)


# ------------------------------------------------------------------------------ mulmod
def _mulmod_inputs():
    rng = np.random.default_rng(104)
    sets = []
    for n, m in ((8, 1_000_000_007), (64, 4_294_967_291), (50, 97), (1, 1)):
        a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        a[0], b[0] = 0xFFFFFFFF, 0xFFFFFFFF
        sets.append(InputSet(f"n={n}, m={m}", {"a": a, "b": b, "out": filled("u32", n + 1), "m": m, "n": n},
                             grid_for(n, 64), B64))
    return sets


def _mulmod_expected(s):
    n, m = s.values["n"], s.values["m"]
    out = s.values["out"].copy()
    out[:n] = [(int(x) * int(y)) % m for x, y in zip(s.values["a"][:n], s.values["b"][:n])]
    return {"out": out}


MULMOD = Task(
    name="mulmod", title="modular product of 32-bit unsigned ints",
    statement="Modular multiplication of unsigned 32-bit integers: out[i] = (a[i] * b[i]) mod m, computed "
              "exactly (the product needs 64 bits), for 0 <= i < n. m >= 1.",
    kernel="mulmod",
    params=(Param("a", "unsigned int", "in"), Param("b", "unsigned int", "in"), Param("out", "unsigned int", "out"),
            Param("m", "unsigned int", "scalar"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_mulmod_inputs, expected=_mulmod_expected,
    reference="mulmod.cu", wrong=("((unsigned long long)a[i] * b[i]) % m", "(a[i] * b[i]) % m",
                                  "the product overflows 32 bits"),
    kinds=("arithmetic",), level=2)


# ------------------------------------------------------------------------------ gcd_pairs
def _gcd_inputs():
    rng = np.random.default_rng(105)
    sets = []
    fixed_a = np.array([0, 0, 7, 12, 1, 4294967295, 1071, 17, 1 << 31, 6], dtype=np.uint32)
    fixed_b = np.array([0, 9, 0, 18, 1, 4294967294, 462, 34, 1 << 20, 35], dtype=np.uint32)
    sets.append(InputSet("edge cases", {"a": fixed_a, "b": fixed_b, "out": filled("u32", 12), "n": 10},
                         grid_for(10, 64), B64))
    for n in (64, 90):
        g = rng.integers(1, 1000, n).astype(np.uint64)
        a = (g * rng.integers(1, 100000, n)).astype(np.uint32)
        b = (g * rng.integers(1, 100000, n)).astype(np.uint32)
        sets.append(InputSet(f"n={n}", {"a": a, "b": b, "out": filled("u32", n), "n": n}, grid_for(n, 64), B64))
    return sets


def _gcd_expected(s):
    n = s.values["n"]
    out = s.values["out"].copy()
    out[:n] = [math.gcd(int(x), int(y)) for x, y in zip(s.values["a"][:n], s.values["b"][:n])]
    return {"out": out}


GCD_PAIRS = Task(
    name="gcd_pairs", title="greatest common divisors",
    statement="Greatest common divisor of each pair: out[i] = gcd(a[i], b[i]) for 0 <= i < n, with "
              "gcd(x, 0) = gcd(0, x) = x (so gcd(0, 0) = 0).",
    kernel="gcd_pairs",
    params=(Param("a", "unsigned int", "in"), Param("b", "unsigned int", "in"), Param("out", "unsigned int", "out"),
            Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_gcd_inputs, expected=_gcd_expected,
    reference="gcd_pairs.cu", wrong=("while (y != 0)", "while (y > 1)", "stops one step early when y reaches 1"),
    kinds=("arithmetic",), level=1)


# ------------------------------------------------------------------------------ collatz_steps
def _collatz_inputs():
    rng = np.random.default_rng(106)
    fixed = np.array([1, 2, 3, 6, 7, 27, 97, 871, 77671, 9780657], dtype=np.uint32)
    return [InputSet("edge cases", {"start": fixed, "steps": filled("i32", 11), "n": 10}, grid_for(10, 64), B64),
            InputSet("n=70", {"start": rng.integers(1, 5000, 70).astype(np.uint32), "steps": filled("i32", 70),
                              "n": 70}, grid_for(70, 64), B64)]


def _collatz_ref(v: int) -> int:
    c = 0
    while v != 1:
        v = 3 * v + 1 if v & 1 else v // 2
        c += 1
    return c


def _collatz_expected(s):
    n = s.values["n"]
    out = s.values["steps"].copy()
    out[:n] = [_collatz_ref(int(v)) for v in s.values["start"][:n]]
    return {"steps": out}


COLLATZ = Task(
    name="collatz_steps", title="Collatz trajectory lengths",
    statement="Collatz steps: starting from v = start[i] (>= 1), repeat v = 3v + 1 if v is odd, v = v / 2 "
              "if v is even, until v == 1; steps[i] is the number of repetitions (0 for start 1), for "
              "0 <= i < n. Intermediate values can exceed 32 bits (they fit in 64).",
    kernel="collatz_steps",
    params=(Param("start", "unsigned int", "in"), Param("steps", "int", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_collatz_inputs, expected=_collatz_expected,
    reference="collatz_steps.cu", wrong=("int count = 0;", "int count = 1;", "counts one step too many"),
    kinds=("arithmetic",), level=2)


# ------------------------------------------------------------------------------ prime_flags
def _is_prime(v: int) -> bool:
    if v < 2:
        return False
    if v % 2 == 0:
        return v == 2
    d = 3
    while d * d <= v:
        if v % d == 0:
            return False
        d += 2
    return True


def _prime_flags_inputs():
    rng = np.random.default_rng(107)
    fixed = np.array([0, 1, 2, 3, 4, 9, 25, 49, 961, 997, 999983, 1000000, 121, 7919], dtype=np.uint32)
    return [InputSet("edge cases", {"x": fixed, "flag": filled("i32", 16), "n": 14}, grid_for(14, 64), B64),
            InputSet("n=100", {"x": rng.integers(0, 20000, 100).astype(np.uint32), "flag": filled("i32", 100),
                               "n": 100}, grid_for(100, 64), B64)]


def _prime_flags_expected(s):
    n = s.values["n"]
    out = s.values["flag"].copy()
    out[:n] = [int(_is_prime(int(v))) for v in s.values["x"][:n]]
    return {"flag": out}


PRIME_FLAGS = Task(
    name="prime_flags", title="primality of each element",
    statement="Primality test: flag[i] = 1 if x[i] is a prime number, else 0, for 0 <= i < n "
              "(0 and 1 are not prime). Every x[i] is below 2,000,000.",
    kernel="prime_flags",
    params=(Param("x", "unsigned int", "in"), Param("flag", "int", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_prime_flags_inputs, expected=_prime_flags_expected,
    reference="prime_flags.cu", wrong=("d * d <= v", "d * d < v", "squares of primes count as prime"),
    kinds=("arithmetic",), level=1)


# ------------------------------------------------------------------------------ count_primes
def _count_primes_inputs():
    return [InputSet(f"n={n}", {"n": n, "count": np.zeros(1, dtype=np.int32)}, (2, 1, 1), B64)
            for n in (0, 2, 3, 97, 1000, 2048)]


def _count_primes_expected(s):
    n = s.values["n"]
    return {"count": np.array([sum(_is_prime(v) for v in range(n))], dtype=np.int32)}


COUNT_PRIMES = Task(
    name="count_primes", title="count the primes below n in parallel",
    statement="Count the primes below n in parallel: count[0] = the number of primes p with p < n. "
              "count[0] is 0 when the kernel starts. n can be larger than the number of threads, so "
              "each thread must handle several numbers (for example a grid-stride loop).",
    kernel="count_primes",
    params=(Param("n", "int", "scalar"), Param("count", "int", "out")),
    launch="2 blocks of 64 threads (128 threads in all), whatever n is (n <= 5000)",
    make_inputs=_count_primes_inputs, expected=_count_primes_expected,
    reference="count_primes.cu", wrong=("p < n;", "p <= n;", "also counts n itself when n is prime"),
    kinds=("arithmetic", "reduction", "atomics"), level=2)


# ------------------------------------------------------------------------------ matmul
def _matmul_inputs():
    rng = np.random.default_rng(108)
    sets = []
    for m, k, n in ((3, 5, 4), (8, 8, 8), (12, 7, 10), (1, 1, 1)):
        A = rng.integers(-50, 50, m * k).astype(np.int32)
        B = rng.integers(-50, 50, k * n).astype(np.int32)
        sets.append(InputSet(f"m={m}, k={k}, n={n}", {"A": A, "B": B, "C": filled("i32", m * n + 2), "m": m,
                                                     "k": k, "n": n},
                             (-(-n // 8), -(-m // 8), 1), (8, 8, 1)))
    return sets


def _matmul_expected(s):
    m, k, n = s.values["m"], s.values["k"], s.values["n"]
    A = s.values["A"].astype(np.int64).reshape(m, k)
    B = s.values["B"].astype(np.int64).reshape(k, n)
    C = s.values["C"].copy()
    C[:m * n] = (A @ B).reshape(-1).astype(np.int32)
    return {"C": C}


MATMUL = Task(
    name="matmul", title="integer matrix product",
    statement="Integer matrix product C = A * B, all row-major: A is m x k, B is k x n, C is m x n, "
              "C[r * n + c] = sum over t of A[r * k + t] * B[t * n + c]. One thread per element of C.",
    kernel="matmul",
    params=(Param("A", "int", "in"), Param("B", "int", "in"), Param("C", "int", "out"), Param("m", "int", "scalar"),
            Param("k", "int", "scalar"), Param("n", "int", "scalar")),
    launch="2-D blocks of 8 x 8 threads, grid (ceil(n / 8), ceil(m / 8)): x runs over columns of C, y over rows",
    make_inputs=_matmul_inputs, expected=_matmul_expected,
    reference="matmul.cu", wrong=("int t = 0;", "int t = 1;", "skips the first term of every dot product"),
    kinds=("arithmetic",), level=2)


# ------------------------------------------------------------------------------ transpose
def _transpose_inputs():
    rng = np.random.default_rng(109)
    sets = []
    for rows, cols in ((5, 3), (16, 16), (20, 33)):
        a = _f32(rng, rows * cols)
        sets.append(InputSet(f"rows={rows}, cols={cols}", {"in": a, "out": filled("f32", rows * cols + 1),
                                                          "rows": rows, "cols": cols},
                             (-(-cols // 16), -(-rows // 16), 1), (16, 16, 1)))
    return sets


def _transpose_expected(s):
    r, c = s.values["rows"], s.values["cols"]
    out = s.values["out"].copy()
    out[:r * c] = s.values["in"].reshape(r, c).T.reshape(-1)
    return {"out": out}


TRANSPOSE = Task(
    name="transpose", title="matrix transpose through shared memory",
    statement="Transpose a rows x cols float matrix (row-major): out[c * rows + r] = in[r * cols + c]. "
              "The natural fast solution stages a 16 x 16 tile in shared memory.",
    kernel="transpose",
    params=(Param("in", "float", "in"), Param("out", "float", "out"), Param("rows", "int", "scalar"),
            Param("cols", "int", "scalar")),
    launch="2-D blocks of 16 x 16 threads, grid (ceil(cols / 16), ceil(rows / 16)): block (bx, by) covers "
           "columns 16*bx.. and rows 16*by.. of `in`",
    make_inputs=_transpose_inputs, expected=_transpose_expected,
    reference="transpose.cu", wrong=("out[oy * rows + ox]", "out[ox * cols + oy]",
                                     "writes the tile back untransposed"),
    kinds=("arithmetic", "shared"), level=2)


TASKS = [VEC_ADD, SAXPY, CLAMP, MULMOD, GCD_PAIRS, COLLATZ, PRIME_FLAGS, COUNT_PRIMES, MATMUL, TRANSPOSE]
