"""The agent's task suite: plain-words kernel tasks with fixed signatures, inputs and numpy checkers.

    from agent.tasks import all_tasks, get_task, select_tasks
    for t in all_tasks(): t.name, t.statement, t.signature(), t.inputs(), t.check_outputs(...)

Every task has a reference CUDA solution (agent/tasks/cuda/) that passes its checker on every input
set, and a subtly wrong variant of it (`Task.wrong`) that the checker must catch; both are tested
(tests/test_agent_tasks.py). See spec.py for the format.
"""
from __future__ import annotations

from agent.tasks import arith, parallel, reduce, search_sort, strings
from agent.tasks.spec import Close, Exact, InputSet, Mismatch, Param, Task  # noqa: F401

_ALL = [*arith.TASKS, *reduce.TASKS, *search_sort.TASKS, *strings.TASKS, *parallel.TASKS]
_BY_NAME = {t.name: t for t in _ALL}
if len(_BY_NAME) != len(_ALL):
    raise RuntimeError("duplicate task names in agent.tasks")

# The five kinds of task the original project's demo shows, and the features asked for.
DEMO_KINDS = ("arithmetic", "reduction", "search", "sort", "string")


def all_tasks() -> list:
    return list(_ALL)


def task_names() -> list:
    return [t.name for t in _ALL]


def get_task(name: str) -> Task:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no task named {name!r}; tasks: {', '.join(task_names())}") from None


def select_tasks(spec: str) -> list:
    """'all', a comma-separated list of names, or kind:NAME / level:N filters (comma-separated)."""
    spec = (spec or "all").strip()
    if spec == "all":
        return all_tasks()
    out = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        if part.startswith("kind:"):
            k = part[5:]
            found = [t for t in _ALL if k in t.kinds]
            if not found:
                raise KeyError(f"no task of kind {k!r}")
        elif part.startswith("level:"):
            found = [t for t in _ALL if str(t.level) == part[6:]]
        else:
            found = [get_task(part)]
        out.extend(t for t in found if t not in out)
    return out
