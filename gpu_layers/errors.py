"""Every error a user can meet, typed, so the CLI and app print them clearly and tests match them."""


class QwenGPUError(Exception):
    """Base of every error qwenGPU raises on bad input (never on its own bugs)."""


class CompileError(QwenGPUError):
    """nvcc refused the source; `messages` are its diagnostics with temporary paths scrubbed."""

    def __init__(self, summary: str, messages: list[str] | None = None):
        self.summary = summary
        self.messages = list(messages or [])
        super().__init__(summary + ("".join("\n  " + m for m in self.messages)))


class PTXSyntaxError(QwenGPUError):
    """The PTX text could not be parsed."""


class UnsupportedPTX(QwenGPUError):
    """The validator found constructs the machine does not support; `problems` lists each one."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("unsupported PTX:" + "".join("\n  " + p for p in self.problems))


class CaseError(QwenGPUError):
    """A launch case (JSON) is malformed or inconsistent with its kernel."""


class LaunchError(QwenGPUError):
    """The launch itself is invalid: grid/block sizes, argument count or types, resources."""


class ExecutionError(QwenGPUError):
    """The kernel did something undefined while running."""


class UninitializedRead(ExecutionError):
    """A register or memory cell was read before anything wrote it."""


class OutOfBounds(ExecutionError):
    """An address fell outside every buffer / the shared or local window."""


class StepBudgetExceeded(ExecutionError):
    """The launch ran more steps than its budget (a kernel that loops forever)."""
