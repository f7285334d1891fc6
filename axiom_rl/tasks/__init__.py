"""The problem library: a registry of tasks, each a small plugin (see tasks/base.py).

Importing this package registers every built-in task.
"""

from __future__ import annotations

from . import countdown, importers, propose  # noqa: F401  (registers)
from .base import PROMPT_STYLES, CodeTask, Task
from .code import backtracking, basics, dp, graphs, strings  # noqa: F401  (registers)
from .debug.task import register_debug_tasks
from .generate import SPLITS, generate_mixed, generate_problems, iter_problems, split_of
from .or_debug import ORDebug  # noqa: F401  (registers)
from .registry import TASKS, all_tasks, get_task, parse_task_list, register_task, task_names

register_debug_tasks()  # debug_<task> for every code task above

__all__ = [
    "PROMPT_STYLES",
    "SPLITS",
    "TASKS",
    "CodeTask",
    "Task",
    "all_tasks",
    "generate_mixed",
    "generate_problems",
    "get_task",
    "iter_problems",
    "parse_task_list",
    "register_task",
    "split_of",
    "task_names",
]
