"""The main job on the embedded default (`axiom-rl quickstart`, `make quickstart`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from .rewards import compute_reward
from .sandbox import Sandbox
from .tasks import generate_problems, get_task, task_names
from .verifier import verify_many

DIFFICULTIES = (1, 5, 10)


def library_check(
    count: int, console: Console, progress: Callable[[int], Callable[[], None]] | None = None
) -> bool:
    """Generate `count` problems per task at difficulties 1, 5 and 10, verify every reference
    solution in the sandbox, print a table. True when all of them score reward 1.0."""
    problems = [
        p
        for name in task_names(generatable=True)
        for d in DIFFICULTIES
        for p in generate_problems(name, d, count, seed=0)
    ]
    start = time.perf_counter()
    with Sandbox() as sandbox:
        tick = progress(len(problems)) if progress else None
        verdicts = verify_many(problems, [_reference_completion(p) for p in problems], sandbox, progress=tick)
        isolation = sandbox.isolation
    elapsed = time.perf_counter() - start
    table = Table(
        "task", "category", "problems", "tests", "reference reward", "status", box=None, pad_edge=False
    )
    all_ok = True
    for name in task_names(generatable=True):
        rows = [(p, v) for p, v in zip(problems, verdicts) if p.task == name]
        rewards = [compute_reward(p, _reference_completion(p), v)[0] for p, v in rows]
        ok = all(r == 1.0 for r in rewards)
        all_ok &= ok
        tests = sum(len(p.tests or ()) or 1 for p, _ in rows)
        table.add_row(
            name,
            get_task(name).category,
            str(len(rows)),
            str(tests),
            f"{sum(rewards) / len(rewards):.2f}",
            "[green]ok[/green]" if ok else "[red]FAIL[/red]",
        )
    console.print(table)
    console.print(
        f"{len(problems)} problems from {len(task_names(generatable=True))} tasks at difficulties "
        f"{', '.join(map(str, DIFFICULTIES))}: reference solutions verified in {elapsed:.1f}s "
        f"({len(problems) / elapsed:.0f}/s). Sandbox: {isolation}"
    )
    return all_ok


def _reference_completion(problem):  # type: ignore[no-untyped-def]
    """The reference solution as a model would write it."""
    task = get_task(problem.task)
    if hasattr(task, "reference_completion"):
        return task.reference_completion(problem, "full")
    return f"```python\n{problem.reference_solution}```"
