"""The task registry: `@register_task` on a Task subclass makes it available by name."""

from __future__ import annotations

from typing import Any, TypeVar

from ..errors import UserError
from .base import Task

TASKS: dict[str, type[Task]] = {}

T = TypeVar("T", bound=type[Task])


def register_task(cls: T) -> T:
    name = cls.name
    if name in TASKS and TASKS[name] is not cls:
        raise ValueError(f"task name {name!r} is registered twice")
    TASKS[name] = cls
    return cls


def task_names(generatable: bool | None = None, derived: bool = True) -> list[str]:
    """Sorted task names; `generatable=True` keeps only tasks with a problem generator, and
    `derived=False` leaves out tasks made from another's problems (debug_<task>)."""
    return sorted(
        n for n, c in TASKS.items()
        if (generatable is None or c.generatable == generatable) and (derived or c.derived_from is None)
    )  # fmt: skip


def all_tasks() -> list[str]:
    """What "all" means (--all, `tasks: all`): every generated task that is not derived from another."""
    return task_names(generatable=True, derived=False)


def get_task(name: str, **options: Any) -> Task:
    try:
        cls = TASKS[name]
    except KeyError:
        raise UserError(unknown_task(name)) from None
    return cls(**options) if options else cls()


def unknown_task(name: str, choices: list[str] | None = None) -> str:
    """Why `name` is no task: a debug task of a task without a reference function, or a name
    not among `choices` (default: every task)."""
    base = name.removeprefix("debug_")
    if base != name and base in TASKS:  # a debug task asked of a task with no reference function
        debug = [n for n in task_names() if TASKS[n].derived_from]
        return (f"task {base!r} has no reference function to inject bugs into, so there is no {name}; "
                f"debug tasks exist for the code tasks: {', '.join(debug)}")  # fmt: skip
    return f"unknown task {name!r}; choose from: {', '.join(task_names() if choices is None else choices)}"


def parse_task_list(spec: str | list[str] | tuple[str, ...], *, generatable: bool = True) -> list[str]:
    """'a,b' or ['a', 'b'] -> ['a', 'b'], each checked against the registry; 'all' (a YAML
    file's `tasks: all`, the command line's --all) -> every generated task."""
    parts = spec.split(",") if isinstance(spec, str) else [p for s in spec for p in s.split(",")]
    names = [p.strip() for p in parts if p.strip()]
    if not names:
        raise UserError("no task given")
    if names == ["all"]:
        return all_tasks()
    allowed = task_names(generatable=True if generatable else None)
    for n in names:
        if n in TASKS and n not in allowed:  # an imported benchmark, asked for where problems are generated
            raise UserError(
                f"{n} has no generator: import its problems (axiom-rl problems import --format {n} FILE "
                f"--out {n}.jsonl), then pass that file (eval --problems-file {n}.jsonl, or verify)"
            )
        if n not in allowed:
            raise UserError(unknown_task(n, allowed))
    return list(dict.fromkeys(names))
