"""Find the kernel in a model's reply.

The prompt asks for one fenced ```cuda block. Models also write ```cpp / ```c++ / ``` blocks,
several blocks (an explanation, then the code), a block cut off by the token limit, or bare code.
`extract_kernel(text, kernel)` returns an `Extraction` with the code (or None) and a note saying
what was found, used in the record and in the feedback when nothing usable was found.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

MAX_CODE_CHARS = 64 * 1024

_FENCE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([A-Za-z0-9_+.-]*)[^\n]*$", re.M)
_THINK = re.compile(r"<think>.*?</think>", re.S)


@dataclass
class Extraction:
    code: str | None
    note: str              # what was found / why nothing was
    truncated: bool = False


def _blocks(text: str):
    """(language, body, closed) for every fenced block, in order."""
    out = []
    pos = 0
    while True:
        m = _FENCE.search(text, pos)
        if not m:
            break
        fence, lang = m.group(1), m.group(2).lower()
        start = m.end() + 1
        close = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$", re.M)
        c = close.search(text, start)
        if c is None:
            out.append((lang, text[start:], False))
            break
        out.append((lang, text[start:c.start()], True))
        pos = c.end()
    return out


def extract_kernel(text: str, kernel: str | None = None) -> Extraction:
    """The CUDA source in `text`: the fenced block defining `kernel` (or any __global__), else bare code."""
    text = _THINK.sub("", text or "")
    if "<think>" in text:                       # an unfinished thinking block: nothing after it counts
        text = text.split("<think>", 1)[0]
    blocks = _blocks(text)
    cands = [(lang, body, closed) for lang, body, closed in blocks if "__global__" in body]
    if cands:
        named = [c for c in cands if kernel and re.search(r"\b" + re.escape(kernel) + r"\s*\(", c[1])]
        lang, body, closed = (named or cands)[-1]
        note = f"fenced block ({lang or 'no language'})"
        if len(cands) > 1:
            note += f", the {'one defining ' + kernel if named else 'last'} of {len(cands)} blocks with a kernel"
        if not closed:
            note += ", unterminated (the reply was cut off?)"
        return _bounded(body, note, truncated=not closed)
    if blocks:
        langs = ", ".join(sorted({l or "no language" for l, _, _ in blocks}))
        return Extraction(None, f"no __global__ kernel in the reply's {len(blocks)} fenced block(s) ({langs})")
    m = re.search(r'^[^\n]*(?:#include|extern\s+"C"|__global__|__device__)', text, re.M)
    if m and "__global__" in text[m.start():]:
        return _bounded(text[m.start():], "bare code (no fenced block)")
    return Extraction(None, "no CUDA code in the reply (no ```cuda block and no __global__ kernel)")


def _bounded(code: str, note: str, truncated: bool = False) -> Extraction:
    code = code.strip("\n")
    if len(code) > MAX_CODE_CHARS:
        return Extraction(None, f"{note}: the code is {len(code)} characters (limit {MAX_CODE_CHARS})", truncated)
    if not code.strip():
        return Extraction(None, f"{note}: empty", truncated)
    return Extraction(code + "\n", note, truncated)
