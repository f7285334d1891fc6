"""debug_<task>: a code task's problem with bugs injected into its reference solution, to repair.

The prompt shows what the function should do, the buggy function and one hidden test it fails
(what it returned or raised); the answer is the corrected function, verified by every hidden
test of the problem it was made from. The buggy source is kept in the problem's metadata
(`buggy_code`), with the edits that made it (`bugs`).

Difficulty d is the base problem's difficulty d, with one injected bug up to difficulty 5 and
two from 6 on (each screened: the program still passes a test and fails one). A debug problem
shares its base problem's content key and split: one made from an eval-split problem is an
eval-split problem, so training on debug problems never shows the model another task's
held-out tests.

Making a problem runs mutants in the sandbox (the process-wide pool): a few to a few dozen
runs of milliseconds each.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from ...sandbox.pool import Limits
from ...types import Problem, Verdict
from ..base import CodeTask, Task, _literal
from ..registry import TASKS, register_task
from .saboteur import failing_test, inject

BASE_DRAWS = 5  # base problems tried for one debug problem before giving up


def bugs_at(difficulty: int) -> int:
    return 1 if difficulty <= 5 else 2


class DebugTask(Task):
    """Repair a buggy version of `base`'s reference solution (subclasses set `base`)."""

    base: ClassVar[type[CodeTask]]
    category = "debug"
    runs_code = True

    def __init__(self, num_tests: int | None = None) -> None:
        self.base_task = self.base(num_tests)

    @property
    def default_limits(self) -> Limits:
        return self.base_task.default_limits

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        from ...sandbox.pool import default_sandbox

        for _ in range(BASE_DRAWS):
            base = self.base_task.generate(rng, difficulty)
            bug = inject(base, rng, bugs_at(difficulty), default_sandbox())
            if bug is not None:
                break
        else:
            raise ValueError(f"no subtle bug found for {self.base.name} at difficulty {difficulty}")
        failure = failing_test(base, bug)
        metadata: dict[str, Any] = {
            "buggy_code": bug.source,
            "bugs": [{"operator": m.operator, "edit": m.description} for m in bug.edits],
            "failing_test": failure,
            "base_task": self.base.name,
            "base_prompt": base.prompt,
            "category": self.category,
        }
        return Problem(
            id=f"{self.name}-d{difficulty}",
            task=self.name,
            difficulty=difficulty,
            prompt=self.debug_prompt(bug.source, failure),
            entry_point=base.entry_point,
            signature=base.signature,
            tests=base.tests,
            checker=base.checker,
            reference_solution=base.reference_solution,
            metadata=metadata,
        )

    def debug_prompt(self, buggy: str, failure: dict[str, Any]) -> str:
        task = self.base_task
        call = f"{task.entry_point}({', '.join(_literal(a) for a in failure['args'])})"
        return "\n".join([
            "This function should do what the text below says, but it has a bug.",
            "",
            task.statement.strip(),
            "",
            "```python",
            buggy.rstrip(),
            "```",
            "",
            f"It fails this test: {call} should return {_literal(failure['expected'])} "
            f"({failure['detail']}).",
            "",
            "Reply with the corrected function in a single ```python code block, using exactly this signature:",
            task.signature,
        ])  # fmt: skip

    def content_key(self, problem: Problem) -> str:
        # The base problem's key: a debug problem is in its base problem's split (split_name).
        base = Problem(id="", task=self.base.name, difficulty=problem.difficulty,
                       prompt=str(problem.metadata.get("base_prompt", "")), tests=problem.tests)  # fmt: skip
        return self.base_task.content_key(base)

    def check_problem(self, problem: Problem) -> None:
        if not problem.tests or not problem.entry_point:
            raise ValueError(f"debug problem {problem.id} has no hidden tests or no entry point")

    def score(self, problem: Problem, completion: str, sandbox: Any = None, limits: Any = None) -> Verdict:
        return self.base_task.score(problem, completion, sandbox, limits)  # the base problem's tests


def register_debug_tasks() -> None:
    """A debug_<name> task for every registered code task (those with a reference solution)."""
    for name, cls in sorted(TASKS.items()):
        if issubclass(cls, CodeTask) and f"debug_{name}" not in TASKS:
            register_task(type(f"Debug{cls.__name__}", (DebugTask,), {
                "name": f"debug_{name}",
                "base": cls,
                "derived_from": name,
                "description": f"Repair {name}'s function, with bugs injected into its reference solution.",
                "min_difficulty": cls.min_difficulty,
                "max_difficulty": cls.max_difficulty,
            }))  # fmt: skip
