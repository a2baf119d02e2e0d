"""Prompt templates (prompts/<version>/), rendered for a task, and the feedback after a failure.

    ps = load_prompts()            # the default version, or load_prompts("v1")
    ps.version, ps.sha256          # recorded with every attempt
    messages = ps.start(task)      # [system, user]
    text = ps.feedback(evaluation, task)

The system prompt states what the machine supports, from the PTX validator's own table
(agent/capabilities.py); sha256 covers the template files and that rendered table.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from agent.capabilities import capabilities_text

PROMPTS_DIR = Path(os.environ.get("QWENGPU_PROMPTS_DIR") or Path(__file__).resolve().parents[1] / "prompts")
DEFAULT_VERSION = "v1"
MAX_DETAILS_CHARS = 3000
FEEDBACK_VERDICTS = ("no_code", "compile_error", "unsupported", "signature_mismatch", "runtime_error", "wrong",
                     "internal_error")


class PromptError(Exception):
    pass


def versions() -> list:
    if not PROMPTS_DIR.is_dir():
        return []
    return sorted((p.name for p in PROMPTS_DIR.iterdir() if p.is_dir() and re.fullmatch(r"v\d+", p.name)),
                  key=lambda v: int(v[1:]))


@dataclass
class PromptSet:
    version: str
    files: dict                  # relative path -> text
    capabilities: str
    sha256: str

    def _t(self, rel: str, **kw) -> str:
        try:
            return Template(self.files[rel]).substitute(**kw).strip() + "\n"
        except KeyError as e:
            raise PromptError(f"prompts/{self.version}/{rel}: unknown placeholder {e}") from None

    def system(self) -> str:
        return self._t("system.md", capabilities=self.capabilities)

    def task(self, task) -> str:
        return self._t("task.md", title=task.title, statement=task.statement, signature=task.signature() + ";",
                       launch=task.launch, kernel=task.kernel)

    def adhoc(self, statement: str) -> str:
        return self._t("adhoc.md", statement=statement.strip())

    def start(self, task=None, statement: str | None = None) -> list:
        user = self.task(task) if task is not None else self.adhoc(statement or "")
        return [{"role": "system", "content": self.system()}, {"role": "user", "content": user}]

    def feedback(self, ev, task=None) -> str:
        verdict = ev.verdict if ev.verdict in FEEDBACK_VERDICTS else "internal_error"
        details = "\n".join(ev.details) if ev.details else ev.reason
        if len(details) > MAX_DETAILS_CHARS:
            details = details[:MAX_DETAILS_CHARS] + "\n... (truncated)"
        sig = (task.signature() + ";") if task is not None else 'extern "C" __global__ void NAME(...);'
        return self._t(f"feedback/{verdict}.md", summary=ev.reason, details=details, signature=sig,
                       kernel=task.kernel if task is not None else "NAME")


def load_prompts(version: str | None = None) -> PromptSet:
    version = version or DEFAULT_VERSION
    root = PROMPTS_DIR / version
    if not root.is_dir():
        raise PromptError(f"no prompt version {version!r} under {PROMPTS_DIR} (have: {', '.join(versions()) or 'none'})")
    files = {str(p.relative_to(root)): p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.md"))}
    need = ["system.md", "task.md", "adhoc.md"] + [f"feedback/{v}.md" for v in FEEDBACK_VERDICTS]
    missing = [n for n in need if n not in files]
    if missing:
        raise PromptError(f"prompts/{version} lacks {', '.join(missing)}")
    caps = capabilities_text()
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + files[rel].encode() + b"\0")
    h.update(caps.encode())
    return PromptSet(version=version, files=files, capabilities=caps, sha256=h.hexdigest())
