"""The kernel arguments as a few lines of text (the app's input form), to and from the case format.

One argument per line, in the kernel's parameter order:

    NAME  TYPE  VALUE  [out]

TYPE is a scalar type (i32 u32 i64 u64 f32 f64) or a buffer of one (i32* ... f64*). A scalar's
VALUE is a number: decimal, 0x hex (integers), a float literal, or nan / inf / -inf (floats). A
buffer's VALUE is its whole initial contents:

    [1, 2, 0xff, -3]       the elements
    zeros(N)               N zeros
    fill(N, V)             N copies of V
    range(N)               0, 1, ..., N-1 (also range(A, B) and range(A, B, STEP))

`out` marks an output buffer (shown after the run; every buffer is shown if none is marked). `#`
starts a comment. Nothing here evaluates code: the text is parsed by the small grammar above, and
the resulting case object is validated again by gpu_layers.cases.parse_case.
"""
from __future__ import annotations

import math
import re

import numpy as np

from gpu_layers.errors import CaseError

SCALARS = ("i32", "u32", "i64", "u64", "f32", "f64")
_NUM = r"[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|infinity)"
_NUM_RE = re.compile(_NUM + r"$", re.I)
_CALL_RE = re.compile(r"(zeros|fill|range)\s*\((.*)\)$", re.I | re.S)


class ArgSpecError(CaseError):
    """The argument text does not follow the format (names the line)."""


def _number(tok: str, elem: str, where: str):
    t = tok.strip()
    if not _NUM_RE.match(t):
        raise ArgSpecError(f"{where}: {t!r} is not a number")
    low = t.lower().lstrip("+")
    if elem in ("f32", "f64"):
        if low in ("nan", "-nan"):
            return "nan"
        if low in ("inf", "infinity"):
            return "inf"
        if low in ("-inf", "-infinity"):
            return "-inf"
        if "0x" in low:
            return int(t, 16)
        v = float(t)
        return int(v) if v.is_integer() and "e" not in low and "." not in low else v
    if "nan" in low or "inf" in low:
        raise ArgSpecError(f"{where}: {t!r} is not an integer ({elem})")
    if "0x" in low:
        return int(t, 16)
    if "." in t or "e" in low:
        raise ArgSpecError(f"{where}: {t!r} is not an integer ({elem})")
    return int(t)


def _int_arg(tok, where, what):
    t = tok.strip()
    if not re.fullmatch(r"[-+]?(\d+|0[xX][0-9a-fA-F]+)", t):
        raise ArgSpecError(f"{where}: {what} must be an integer, got {t!r}")
    return int(t, 0) if not re.fullmatch(r"[-+]?0\d+", t) else int(t)


def _buffer(text: str, elem: str, where: str, budget: int) -> list:
    t = text.strip()
    if t.startswith("["):
        if not t.endswith("]"):
            raise ArgSpecError(f"{where}: a list must end with ']'")
        body = t[1:-1].strip()
        if not body:
            raise ArgSpecError(f"{where}: a buffer needs at least one element")
        parts = body.split(",")
        if len(parts) > budget:
            raise ArgSpecError(f"{where}: more than {budget} elements (the limit for one launch)")
        return [_number(p, elem, f"{where}, element {i}") for i, p in enumerate(parts)]
    m = _CALL_RE.match(t)
    if not m:
        raise ArgSpecError(f"{where}: a buffer is [a, b, ...], zeros(N), fill(N, V) or range(...), got {t[:40]!r}")
    fn, inner = m.group(1).lower(), [p for p in m.group(2).split(",")]
    if fn == "zeros":
        if len(inner) != 1:
            raise ArgSpecError(f"{where}: zeros(N) takes one number")
        n, vals = _int_arg(inner[0], where, "N"), None
        fillv = 0
    elif fn == "fill":
        if len(inner) != 2:
            raise ArgSpecError(f"{where}: fill(N, V) takes two numbers")
        n = _int_arg(inner[0], where, "N")
        fillv = _number(inner[1], elem, where)
        vals = None
    else:
        if not 1 <= len(inner) <= 3:
            raise ArgSpecError(f"{where}: range takes 1 to 3 integers")
        nums = [_int_arg(p, where, "a range bound") for p in inner]
        r = range(*nums)
        if len(r) > budget:
            raise ArgSpecError(f"{where}: more than {budget} elements (the limit for one launch)")
        vals = list(r)
        n = len(vals)
    if n < 1:
        raise ArgSpecError(f"{where}: a buffer needs at least one element")
    if n > budget:
        raise ArgSpecError(f"{where}: {n} elements is more than {budget} (the limit for one launch)")
    return vals if vals is not None else [fillv] * n


def parse_args(text: str, max_elements: int = 1 << 20, max_chars: int = 256 * 1024) -> list:
    """The argument text -> a list of case-format argument objects (see gpu_layers.cases)."""
    if len(text) > max_chars:
        raise ArgSpecError(f"the argument text has {len(text)} characters; at most {max_chars}")
    args = []
    budget = max_elements
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"arguments, line {lineno}"
        parts = line.split(None, 2)
        if len(parts) < 3:
            raise ArgSpecError(f"{where}: expected NAME TYPE VALUE [out], got {line[:60]!r}")
        name, typ, rest = parts
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ArgSpecError(f"{where}: {name!r} is not a name")
        out = False
        m = re.search(r"\s+(out|output)$", rest, re.I)
        if m:
            out, rest = True, rest[:m.start()]
        elem = typ.rstrip("*")
        if elem not in SCALARS or typ.count("*") > 1:
            raise ArgSpecError(f"{where}: unknown type {typ!r} (scalars {', '.join(SCALARS)}; buffers add '*')")
        if typ.endswith("*"):
            data = _buffer(rest, elem, where, budget)
            budget -= len(data)
            args.append({"name": name, "type": typ, "data": data, **({"output": True} if out else {})})
        else:
            if out:
                raise ArgSpecError(f"{where}: only buffers can be outputs")
            args.append({"name": name, "type": typ, "value": _number(rest, elem, where)})
    if not args:
        raise ArgSpecError("no arguments: write one line per kernel parameter (NAME TYPE VALUE)")
    return args


# ------------------------------------------------------------------------------------ formatting


def format_value(v, elem: str, hex_ok: bool = True) -> str:
    if isinstance(v, str):
        return v
    if elem in ("f32", "f64"):
        if isinstance(v, float) and not math.isfinite(v):
            return "nan" if v != v else ("inf" if v > 0 else "-inf")
        return repr(v) if isinstance(v, float) else str(v)
    if hex_ok and elem in ("u32", "u64") and v >= 0x10000:
        return hex(v)
    return str(v)


def _format_buffer(data: list, elem: str) -> str:
    n = len(data)
    if all(isinstance(x, int) for x in data) and not isinstance(data[0], bool):
        if data == list(range(n)):
            return f"range({n})"
        if n > 2:
            step = data[1] - data[0]
            if step and data == list(range(data[0], data[0] + step * n, step)):
                return f"range({data[0]}, {data[0] + step * n}, {step})" if step != 1 else \
                    f"range({data[0]}, {data[0] + n})"
    if all(x == data[0] and type(x) is type(data[0]) for x in data) and n > 1:
        return "zeros(%d)" % n if data[0] == 0 and not (isinstance(data[0], float) and math.copysign(1, data[0]) < 0) \
            else f"fill({n}, {format_value(data[0], elem)})"
    return "[" + ", ".join(format_value(x, elem, hex_ok=False) for x in data) + "]"


def format_args(case_args: list) -> str:
    """Case-format argument objects -> the argument text (inverse of parse_args)."""
    width = max(len(a["name"]) for a in case_args)
    tw = max(len(a["type"]) for a in case_args)
    lines = []
    for a in case_args:
        elem = a["type"].rstrip("*")
        if a["type"].endswith("*"):
            val = _format_buffer(list(a["data"]), elem)
        else:
            val = format_value(a["value"], elem)
        lines.append(f"{a['name']:<{width}}  {a['type']:<{tw}}  {val}" + ("  out" if a.get("output") else ""))
    return "\n".join(lines)


def same_values(a, b) -> bool:
    """Two numpy arrays equal bit for bit."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
