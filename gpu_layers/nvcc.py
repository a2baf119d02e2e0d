"""CUDA -> PTX with the pip-installed nvcc (package `nvidia-cuda-nvcc`), sandboxed.

`compile_cuda(source, arch="sm_75")` returns PTX text or raises `CompileError` whose `messages` are
nvcc's diagnostics with temporary paths scrubbed (`kernel.cu(3): error: ...`).

The source may come from an untrusted user (a public web app), so before nvcc runs the source is
checked by a small, conservative lexer (`check_source`). Nothing of the host may reach the PTX or the
diagnostics through the preprocessor:

* `#include` is allowed only in the literal forms `#include <name>` / `#include "name"` with a name
  from `ALLOWED_HEADERS` (CUDA runtime and a few freestanding C/C++ headers, all of which nvcc
  already reaches through its implicit `-include cuda_runtime.h`). Computed includes
  (`#include MACRO`), `#include_next`, `#import`, `#embed` are refused, in every spelling: spaces
  or comments after `#`, line continuations (also backslash-space-newline), `%:` digraphs, CR line
  ends.
* `__has_include`, `__has_include_next`, `__has_embed` (probe host files), `_Pragma` / `__pragma`
  (pragmas made by macros) and token pasting `##` (the only way a macro could spell those
  identifiers) are refused, so every directive and every pragma is visible in the source text.
* `#pragma` only from `ALLOWED_PRAGMAS` (`unroll`, `nounroll`, `once`, nvcc's diagnostic
  pragmas): no `GCC dependency`, `push_macro`, `GCC system_header`, ...
* `#line` and GNU line markers (`# 12 "file"`), `#ident`, `#sccs`, `#assert`, `#unassert` and
  unknown directives are refused (they would falsify diagnostics or are host extensions).
* Trigraphs (`??=`...), raw string literals (`R"(...)"`, which this lexer does not model) and any
  backslash outside a string or character literal except a line continuation are refused, so the
  lexer cannot disagree with the real preprocessor about where comments and directives are.
* Control characters other than tab, newline, CR, form feed and vertical tab are refused.

The check is deliberately stricter than needed: it scans every line, including lines inside
`#if 0`. nvcc itself then runs with a minimal environment (`PATH=/usr/bin:/bin` for the host
preprocessor gcc, `TMPDIR` and `HOME` in the private directory, `LC_ALL=C`), in a private temporary
directory that is removed afterwards; the source sits alone in its own folder (so a quoted include
of an allowed name finds nothing there), with a time limit (the whole process group is killed),
caps on source size, file sizes written (RLIMIT_FSIZE), address space (RLIMIT_AS), PTX size and
captured diagnostics.
"""
from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from gpu_layers.errors import CompileError

MiB = 1 << 20

# Headers a kernel may include. All are reached anyway through nvcc's implicit cuda_runtime.h;
# none of them lets a user name a file of their choice.
ALLOWED_HEADERS = frozenset(
    {
        "cuda_runtime.h",
        "cuda_runtime_api.h",
        "device_launch_parameters.h",
        "device_functions.h",
        "math_constants.h",
        "stdint.h",
        "cstdint",
        "limits.h",
        "climits",
        "float.h",
        "cfloat",
        "stddef.h",
        "cstddef",
        "math.h",
        "cmath",
    }
)

# First word of an allowed `#pragma` (the rest of the line is free).
ALLOWED_PRAGMAS = frozenset(
    {
        "unroll",
        "nounroll",
        "once",
        "nv_diag_suppress",
        "nv_diag_warning",
        "nv_diag_error",
        "nv_diag_default",
        "nv_diag_once",
    }
)

# Directives allowed besides include and pragma (checked separately).
ALLOWED_DIRECTIVES = frozenset(
    {"define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif",
     "error", "warning"}
)

FORBIDDEN_IDENTIFIERS = {
    "__has_include": "__has_include is not allowed (it probes host files)",
    "__has_include_next": "__has_include_next is not allowed (it probes host files)",
    "__has_embed": "__has_embed is not allowed (it probes host files)",
    "_Pragma": "the _Pragma operator is not allowed (write a plain #pragma line)",
    "__pragma": "the __pragma operator is not allowed (write a plain #pragma line)",
}

DEFAULT_MAX_SOURCE_BYTES = 256 * 1024
DEFAULT_MAX_OUTPUT_BYTES = 4 * MiB
DEFAULT_MAX_DIAGNOSTIC_BYTES = 64 * 1024
DEFAULT_MAX_MESSAGES = 200
# nvcc's preprocessed intermediate (cuda_runtime.h and friends expanded) is a few MiB.
DEFAULT_MAX_FILE_BYTES = 256 * MiB
# address space per process (nvcc, gcc -E, cicc each); a normal kernel compiles within 1 GiB.
DEFAULT_MAX_MEMORY_BYTES = 2048 * MiB

_ARCH_RE = re.compile(r"^(sm|compute)_[0-9]{2,3}[af]?$")
SOURCE_NAME = "kernel.cu"


# --------------------------------------------------------------------------------------------
# locating nvcc
# --------------------------------------------------------------------------------------------
def find_nvcc() -> Path:
    """Path of the nvcc driver shipped by the pip package `nvidia-cuda-nvcc` (never from PATH)."""
    hint = "install it with: pip install nvidia-cuda-nvcc (see requirements.txt)"
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    if not roots:
        raise CompileError(f"nvcc not found: the Python package 'nvidia' is not installed; {hint}")
    for root in roots:
        for sub in ("cu13", "cuda_nvcc", "cu12"):
            cand = Path(root) / sub / "bin" / "nvcc"
            if cand.is_file() and os.access(cand, os.X_OK):
                return cand
    raise CompileError(f"nvcc not found in the 'nvidia' package ({', '.join(roots)}); {hint}")


# --------------------------------------------------------------------------------------------
# source checking
# --------------------------------------------------------------------------------------------
def _normalize(source: str) -> tuple[str, list[int]]:
    """CR/CRLF -> LF, then splice line continuations (backslash, optional blanks, newline).

    Returns the spliced text and, for each of its lines, the physical line it starts on.
    """
    physical = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    logical, starts, cur, start = [], [], [], 1
    for no, line in enumerate(physical, 1):
        m = re.search(r"\\[ \t\f\v]*$", line)
        if m and no < len(physical):
            cur.append(line[: m.start()])
            continue
        cur.append(line)
        logical.append("".join(cur))
        starts.append(start)
        cur, start = [], no + 1
    return "\n".join(logical), starts


def _strip_comments_and_literals(s: str, keep_literals: bool = False) -> str:
    """Replace comments by a space (keeping newlines) and literal contents by nothing.

    Tokenizes the way the C++ preprocessor does where it matters for finding comments:
    identifiers, pp-numbers (with C++14 digit separators such as 1'000, and exponent signs),
    string and character literals (which end at a newline at the latest), comments.
    """
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "/" and s.startswith("/*", i):
            j = s.find("*/", i + 2)
            body = s[i:] if j < 0 else s[i : j + 2]
            out.append(" " + "\n" * body.count("\n"))
            i = n if j < 0 else j + 2
            continue
        if c == "/" and s.startswith("//", i):
            j = s.find("\n", i)
            i = n if j < 0 else j
            out.append(" ")
            continue
        if ("a" <= c <= "z") or ("A" <= c <= "Z") or c in "_$":
            m = _IDENT_RE.match(s, i)
            out.append(m.group(0))
            i = m.end()
            continue
        if c.isdigit() or (c == "." and i + 1 < n and s[i + 1].isdigit()):
            m = _PPNUM_RE.match(s, i)
            out.append(m.group(0) if keep_literals else m.group(0).replace("'", ""))
            i = m.end()
            continue
        if c in "\"'":
            j = i + 1
            while j < n and s[j] != c and s[j] != "\n":
                j += 2 if s[j] == "\\" else 1
            if j >= n or s[j] != c:
                # unterminated: keep scanning the rest of the line as code (conservative)
                out.append(c)
                i += 1
                continue
            out.append(s[i : j + 1] if keep_literals else c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


_DIRECTIVE_RE = re.compile(r"^[ \t\f\v]*(?:#|%:)[ \t\f\v]*(.*)$")
_IDENT_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_PPNUM_RE = re.compile(r"\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*")


def check_source(source: str) -> list[str]:
    """Problems that make the source unsafe to hand to the preprocessor (empty list: fine)."""
    problems: list[str] = []
    bad = sorted({c for c in source if (ord(c) < 32 and c not in "\t\n\r\f\v") or ord(c) == 127})
    if bad:
        problems.append("control characters are not allowed in the source: "
                        + ", ".join(f"U+{ord(c):04X}" for c in bad))
    if re.search(r"\?\?[=/'()!<>\-]", source):
        problems.append("trigraphs (??= ??/ ...) are not allowed")
    s, starts = _normalize(source)
    # raw string literals: the lexer below does not model them, so refuse them outright
    m = re.search(r"(?<![A-Za-z0-9_$])(?:u8|[uUL])?R\"", s)
    if m:
        problems.append(f"line {starts[s.count(chr(10), 0, m.start())]}: raw string literals are not allowed")
    code = _strip_comments_and_literals(s)
    lines = code.split("\n")
    lit_lines = _strip_comments_and_literals(s, keep_literals=True).split("\n")
    for lineno, text in enumerate(lines, 1):
        where = f"line {starts[lineno - 1]}"
        if "\\" in text:
            problems.append(f"{where}: a backslash outside a string or character literal is not allowed")
        if "##" in text or "%:%:" in text:
            problems.append(f"{where}: token pasting (##) is not allowed")
        for ident in _IDENT_RE.findall(text):
            if ident in FORBIDDEN_IDENTIFIERS:
                problems.append(f"{where}: {FORBIDDEN_IDENTIFIERS[ident]}")
        m = _DIRECTIVE_RE.match(text)
        if not m:
            continue
        rest = m.group(1)
        wm = re.match(r"[A-Za-z_][A-Za-z0-9_]*", rest)
        if not wm:
            if rest.strip() == "":
                continue  # the null directive
            problems.append(f"{where}: line markers ('# <number> \"file\"') are not allowed")
            continue
        word, arg = wm.group(0), rest[wm.end():].strip()
        if word == "include":
            problems.extend(_check_include(lit_lines[lineno - 1], starts[lineno - 1]))
        elif word in ("include_next", "import", "embed"):
            problems.append(f"{where}: #{word} is not allowed")
        elif word == "pragma":
            pw = re.match(r"[A-Za-z_][A-Za-z0-9_]*", arg)
            if not pw or pw.group(0) not in ALLOWED_PRAGMAS:
                problems.append(f"{where}: #pragma {arg.split()[0] if arg.split() else ''} is not allowed"
                                f" (allowed: {', '.join(sorted(ALLOWED_PRAGMAS))})")
        elif word == "line":
            problems.append(f"{where}: #line is not allowed")
        elif word not in ALLOWED_DIRECTIVES:
            problems.append(f"{where}: #{word} is not allowed")
    return problems


def _check_include(line: str, lineno: int) -> list[str]:
    """One `#include` line, comments already replaced by blanks, literals intact."""
    where = f"line {lineno}"
    m = re.match(r"^[ \t\f\v]*(?:#|%:)[ \t\f\v]*include(.*)$", line)
    arg = m.group(1).strip() if m else line.strip()
    hm = re.match(r'^(?:<([^<>"\n]*)>|"([^"\n]*)")$', arg)
    if not hm:
        shown = arg if len(arg) < 80 else arg[:77] + "..."
        return [f"{where}: #include {shown} is not allowed: only #include <name> or \"name\" with a "
                f"name from the allow-list ({', '.join(sorted(ALLOWED_HEADERS))})"]
    name = hm.group(1) if hm.group(1) is not None else hm.group(2)
    if name not in ALLOWED_HEADERS:
        return [f"{where}: #include of {name!r} is not allowed (allowed headers: "
                f"{', '.join(sorted(ALLOWED_HEADERS))})"]
    return []


# --------------------------------------------------------------------------------------------
# running nvcc
# --------------------------------------------------------------------------------------------
def _minimal_env(tmp: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "TMP": tmp,
            "TEMP": tmp, "LC_ALL": "C", "LANG": "C"}


# Sets the resource limits in the child, then becomes nvcc (a preexec_fn is not safe in a
# threaded server, so the limits are applied by this tiny launcher instead).
_LAUNCHER = (
    "import os, resource, signal, sys\n"
    "signal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
    "signal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n"
    "f, m = int(sys.argv[1]), int(sys.argv[2])\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (f, f))\n"
    "if m:\n"
    "    resource.setrlimit(resource.RLIMIT_AS, (m, m))\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n"
)


def _launch_cmd(nvcc_args: list[str], max_file_bytes: int, max_memory_bytes: int | None) -> list[str]:
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(int(max_file_bytes)), str(int(max_memory_bytes or 0)),
            *nvcc_args]


def _scrub(text: str, tmp: str, nvcc: Path) -> str:
    cuda_root = str(nvcc.parent.parent.resolve())
    for p in sorted({tmp, os.path.realpath(tmp)}, key=len, reverse=True):
        text = text.replace(p + "/src/", "").replace(p + "/out/", "").replace(p + "/", "").replace(p, "<tmp>")
    text = text.replace(str(nvcc.parent) + "/../", "<cuda>/").replace(cuda_root, "<cuda>")
    text = text.replace("../out/", "")
    return text


def _messages(diag: str, truncated: bool, max_messages: int) -> list[str]:
    lines = [l.rstrip() for l in diag.splitlines()]
    msgs = [l for l in lines if l.strip() and not l.startswith("Remark: The warnings can be suppressed")]
    if len(msgs) > max_messages:
        msgs = msgs[:max_messages] + [f"... ({len(msgs) - max_messages} more lines of diagnostics)"]
    if truncated:
        msgs.append("... (diagnostics truncated)")
    return msgs


def compile_cuda(
    source: str,
    arch: str = "sm_75",
    *,
    timeout_s: float = 60,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES,
    max_diagnostic_bytes: int = DEFAULT_MAX_DIAGNOSTIC_BYTES,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_memory_bytes: int | None = DEFAULT_MAX_MEMORY_BYTES,
) -> str:
    """Compile CUDA C++ source to PTX text with the pip nvcc (`nvcc --ptx -arch=<arch>`).

    Raises CompileError on unsafe source (before nvcc runs), on nvcc errors (messages are its
    diagnostics, paths scrubbed), on timeout and on oversized output.
    """
    if not isinstance(source, str):
        raise CompileError("source must be text (str)")
    if not _ARCH_RE.match(arch or ""):
        raise CompileError(f"invalid arch {arch!r}: expected e.g. sm_75")
    size = len(source.encode("utf-8", errors="replace"))
    if size > max_source_bytes:
        raise CompileError(f"source too large: {size} bytes (limit {max_source_bytes})")
    problems = check_source(source)
    if problems:
        raise CompileError("source refused before compiling (host files are off limits)", problems)

    nvcc = find_nvcc()
    with tempfile.TemporaryDirectory(prefix="qwengpu-nvcc-") as tmp:
        src_dir = Path(tmp, "src")
        out_dir = Path(tmp, "out")
        src_dir.mkdir(mode=0o700)
        out_dir.mkdir(mode=0o700)
        Path(src_dir, SOURCE_NAME).write_text(source, encoding="utf-8")
        diag_path = Path(tmp, "diagnostics.txt")
        cmd = _launch_cmd([str(nvcc), "--ptx", f"-arch={arch}", "-o", "../out/kernel.ptx", SOURCE_NAME],
                          max_file_bytes, max_memory_bytes)
        env = _minimal_env(str(out_dir))
        with open(diag_path, "wb") as diag_f:
            try:
                proc = subprocess.Popen(cmd, cwd=src_dir, env=env, stdin=subprocess.DEVNULL, stdout=diag_f,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as e:
                raise CompileError(f"could not start nvcc: {e}") from None
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
                raise CompileError(f"nvcc timed out after {timeout_s:g} s") from None
            finally:
                # any grandchild left behind in the group
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        with open(diag_path, "rb") as f:
            raw = f.read(max_diagnostic_bytes + 1)
        truncated = len(raw) > max_diagnostic_bytes
        diag = _scrub(raw[:max_diagnostic_bytes].decode("utf-8", errors="replace"), tmp, nvcc)
        ptx_path = Path(out_dir, "kernel.ptx")
        if rc != 0:
            msgs = _messages(diag, truncated, max_messages)
            if rc < 0:
                try:
                    name = signal.Signals(-rc).name
                except ValueError:
                    name = str(-rc)
                summary = f"nvcc was killed by signal {name}"
                if -rc == signal.SIGXFSZ:
                    summary += f" (a file it wrote exceeded the {max_file_bytes} byte limit)"
                elif max_memory_bytes and -rc in (signal.SIGSEGV, signal.SIGABRT, signal.SIGKILL, signal.SIGBUS):
                    summary += f" (perhaps the {max_memory_bytes >> 20} MiB memory limit)"
            else:
                det = re.search(r"(\d+) errors? detected", diag)
                n_err = int(det.group(1)) if det else len([m for m in msgs if re.search(r":\s*(fatal )?error\b", m)])
                summary = f"nvcc failed ({n_err} error{'s' if n_err != 1 else ''})" if n_err else \
                    f"nvcc failed (exit status {rc})"
            raise CompileError(summary, msgs)
        if not ptx_path.is_file():
            raise CompileError("nvcc produced no PTX", _messages(diag, truncated, max_messages))
        ptx_size = ptx_path.stat().st_size
        if ptx_size > max_output_bytes:
            raise CompileError(f"PTX output too large: {ptx_size} bytes (limit {max_output_bytes})")
        ptx = ptx_path.read_text(encoding="utf-8", errors="replace")
        return _scrub(ptx, tmp, nvcc)


def ptx_version_for_driver(ptx: str, version: str = "9.0") -> str:
    """The PTX with its `.version` line set to `version` (a CUDA 13.0 driver refuses 9.5)."""
    if not re.match(r"^\d+\.\d+$", version):
        raise ValueError(f"bad PTX version {version!r}")
    new, n = re.subn(r"(?m)^(\s*\.version\s+)\d+\.\d+", lambda m: m.group(1) + version, ptx, count=1)
    if n != 1:
        raise ValueError("no .version line in the PTX")
    return new
