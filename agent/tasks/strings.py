"""String tasks: bytes in, bytes or counts out."""
from __future__ import annotations

import numpy as np

from agent.tasks.spec import InputSet, Param, Task, filled, grid_for, text_bytes

B64 = (64, 1, 1)
LAUNCH_1D = ("1-D blocks of 64 threads, gridDim.x = ceil(n / 64) (at least 1 block), so the grid can have "
             "more threads than characters")

TEXTS = [
    b"hello, world",
    b"The Quick Brown Fox Jumps Over The Lazy Dog! zZ aA 0123456789 {|}~ `@[\\]^_",
    b"z",
    bytes(range(32, 127)) + bytes([0xE9, 0xFF, 0x80, 0x00, ord("q")]),
]


def _text_sets(extra_out=3, with_k=None):
    sets = []
    for t in TEXTS:
        n = len(t)
        vals = {"text": text_bytes(t), "out": filled("u8", n + extra_out), "n": n}
        if with_k is not None:
            vals["k"] = with_k[len(sets) % len(with_k)]
        label = f"text={t[:20]!r}{'...' if n > 20 else ''} (n={n})"
        if with_k is not None:
            label += f", k={vals['k']}"
        sets.append(InputSet(label, vals, grid_for(n, 64), B64))
    return sets


# ------------------------------------------------------------------------------ to_upper
def _to_upper_expected(s):
    n = s.values["n"]
    t = s.values["text"][:n]
    out = s.values["out"].copy()
    out[:n] = np.where((t >= ord("a")) & (t <= ord("z")), t - 32, t)
    return {"out": out}


TO_UPPER = Task(
    name="to_upper", title="ASCII upper case",
    statement="Upper-case ASCII letters: out[i] = text[i] converted to upper case if it is one of 'a'..'z', "
              "else text[i] unchanged (every other byte, also bytes >= 128, is copied), for 0 <= i < n.",
    kernel="to_upper",
    params=(Param("text", "unsigned char", "in"), Param("out", "unsigned char", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_text_sets, expected=_to_upper_expected,
    reference="to_upper.cu", wrong=("c <= 'z'", "c < 'z'", "forgets 'z'"),
    kinds=("string",), level=1)


# ------------------------------------------------------------------------------ reverse_string
def _reverse_expected(s):
    n = s.values["n"]
    out = s.values["out"].copy()
    out[:n] = s.values["text"][:n][::-1]
    return {"out": out}


REVERSE_STRING = Task(
    name="reverse_string", title="reverse a string",
    statement="Reverse a string: out[i] = text[n - 1 - i] for 0 <= i < n.",
    kernel="reverse_string",
    params=(Param("text", "unsigned char", "in"), Param("out", "unsigned char", "out"), Param("n", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_text_sets, expected=_reverse_expected,
    reference="reverse_string.cu", wrong=("out[i] = text[n - 1 - i];", "out[n - 1 - i] = text[n - 1 - i];",
                                          "copies instead of reversing"),
    kinds=("string",), level=1)


# ------------------------------------------------------------------------------ caesar
def _caesar_inputs():
    return _text_sets(with_k=[3, 13, 25, 0])


def _caesar_expected(s):
    n, k = s.values["n"], s.values["k"]
    t = s.values["text"][:n].astype(np.int64)
    out = s.values["out"].copy()
    low = (t >= 97) & (t <= 122)
    up = (t >= 65) & (t <= 90)
    r = t.copy()
    r[low] = 97 + (t[low] - 97 + k) % 26
    r[up] = 65 + (t[up] - 65 + k) % 26
    out[:n] = r.astype(np.uint8)
    return {"out": out}


CAESAR = Task(
    name="caesar", title="Caesar cipher",
    statement="Caesar cipher: shift every ASCII letter k places forward in the alphabet, wrapping around "
              "('z' + 1 is 'a', 'Z' + 1 is 'A'), keeping its case; every other byte is copied. "
              "out[i] for 0 <= i < n; 0 <= k < 26.",
    kernel="caesar",
    params=(Param("text", "unsigned char", "in"), Param("out", "unsigned char", "out"), Param("n", "int", "scalar"),
            Param("k", "int", "scalar")),
    launch=LAUNCH_1D, make_inputs=_caesar_inputs, expected=_caesar_expected,
    reference="caesar.cu", wrong=("'A' + (c - 'A' + k) % 26", "'A' + (c - 'A' + k) % 25",
                                  "upper case wraps after 25 letters"),
    kinds=("string",), level=1)


# ------------------------------------------------------------------------------ word_count
def _word_count_inputs():
    sets = []
    for t in (b"one two  three", b"   leading and trailing   ", b"x", b" ", b"tab\tseparated\nlines\n and  more",
              b"a b c d e f g h i j k l m n o p q r s t u v w x y z 0 1 2 3 4 5 6 7 8 9 ! ? . , ; : ( ) [ ] { }"):
        n = len(t)
        sets.append(InputSet(f"text={t[:24]!r}{'...' if n > 24 else ''} (n={n})",
                             {"text": text_bytes(t), "n": n, "count": np.zeros(1, np.int32)}, grid_for(n, 64), B64))
    return sets


def _word_count_expected(s):
    t = bytes(s.values["text"][:s.values["n"]].tolist())
    return {"count": np.array([len(t.replace(b"\t", b" ").replace(b"\n", b" ").split())], np.int32)}


WORD_COUNT = Task(
    name="word_count", title="count the words",
    statement="Count the words of a text: a word is a maximal run of bytes that are not spaces, where a space "
              "is ' ', '\\t' or '\\n'. count[0] = the number of words in text[0..n-1]; count[0] is 0 when "
              "the kernel starts. (A word starts at i when text[i] is not a space and i == 0 or text[i-1] is "
              "a space.)",
    kernel="word_count",
    params=(Param("text", "unsigned char", "in"), Param("n", "int", "scalar"), Param("count", "int", "out")),
    launch=LAUNCH_1D, make_inputs=_word_count_inputs, expected=_word_count_expected,
    reference="word_count.cu", wrong=("(i == 0 || is_space(text[i - 1]))", "(i > 0 && is_space(text[i - 1]))",
                                      "misses a word at the very start"),
    kinds=("string", "atomics"), level=2)


# ------------------------------------------------------------------------------ palindromes
def _palindrome_inputs():
    groups = [
        [b"level", b"abba", b"abc", b"", b"x", b"ab", b"racecar", b"abca", b"noon", b"aa"],
        [b"Aa", b"madam", b"step on no pets", b"12321", b"123321", b"1231", b"zz" * 20, b"q"],
    ]
    sets = []
    for words in groups:
        text = b"".join(words)
        offs = np.cumsum([0] + [len(w) for w in words]).astype(np.int32)
        sets.append(InputSet(f"words={[w.decode() for w in words][:6]}...",
                             {"text": text_bytes(text), "offsets": offs, "words": len(words),
                              "flag": filled("i32", len(words) + 1)}, grid_for(len(words), 64), B64))
    return sets


def _palindrome_expected(s):
    t = bytes(s.values["text"].tolist())
    o = s.values["offsets"]
    k = s.values["words"]
    flag = s.values["flag"].copy()
    for w in range(k):
        word = t[o[w]:o[w + 1]]
        flag[w] = int(word == word[::-1])
    return {"flag": flag}


PALINDROMES = Task(
    name="palindromes", title="which words are palindromes",
    statement="Palindromes: word w (0 <= w < words) is text[offsets[w] .. offsets[w+1] - 1] (offsets has "
              "words + 1 entries; a word can be empty). flag[w] = 1 if the word reads the same backwards "
              "(byte for byte, case-sensitive; the empty word counts), else 0. One thread per word.",
    kernel="palindromes",
    params=(Param("text", "unsigned char", "in"), Param("offsets", "int", "in"), Param("words", "int", "scalar"),
            Param("flag", "int", "out")),
    launch="1-D blocks of 64 threads, gridDim.x = ceil(words / 64) (at least 1 block)",
    make_inputs=_palindrome_inputs, expected=_palindrome_expected,
    reference="palindromes.cu", wrong=("hi = offsets[w + 1] - 1;", "hi = offsets[w + 1] - 2;",
                                       "compares against the wrong last character"),
    kinds=("string", "search"), level=2)


TASKS = [TO_UPPER, REVERSE_STRING, CAESAR, WORD_COUNT, PALINDROMES]
