"""What a model gets wrong, from an evaluation database: the problems it failed, and its weakness
profile (pass rate per task x difficulty with Wilson intervals, and the mix of failure classes).

A failures file is a problems file (docs/problems.md) whose lines also carry `failures`: the
problem's pass rate over the run's samples and the statuses of its failed ones. So
`axiom-rl train --problems-file failures.jsonl` trains on what the run failed, as the original experiments did
("GRPO only on what SFT fails").
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError
from ..types import PASSED, Problem
from .store import ResultsDB

Z_95 = 1.959963984540054  # the standard normal's 97.5% quantile: two-sided 95% intervals
NEAR_MISS = 10  # Countdown's own scoring gives points within 10 of the target


def countdown_class(problem: Problem, completion: str) -> str:
    """A failed Countdown answer's finer class: 'no answer' (none, or not an arithmetic
    expression), 'numbers misused' (not each given number exactly once), 'near miss' (each number
    once, within 10 of the target, as the game scores), else 'wrong value'."""
    from ..tasks.countdown import analyse

    metadata = dict(problem.metadata)
    answer = analyse(list(metadata["numbers"]), int(metadata["target"]), completion)
    if not answer.has_answer or not answer.parsed or answer.value is None:
        return "no answer"
    if not answer.numbers_exact:
        return "numbers misused"
    if abs(answer.value - int(metadata["target"])) <= NEAR_MISS:
        return "near miss"
    return "wrong value"


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (Wilson 1927): unlike the normal
    approximation it stays inside [0, 1] and is not empty at 0 or n successes."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Cell:
    """One task at one difficulty of a run: its attempts and what became of them."""

    task: str
    difficulty: int
    attempts: int = 0
    passed: int = 0
    problems: set[str] = field(default_factory=set)
    classes: Counter[str] = field(default_factory=Counter)  # failed attempts by status
    finer: Counter[str] = field(default_factory=Counter)  # Countdown's: by countdown_class

    @property
    def pass_rate(self) -> float:
        return self.passed / self.attempts if self.attempts else 0.0

    def to_dict(self) -> dict[str, Any]:
        low, high = wilson_interval(self.passed, self.attempts)
        return {
            "task": self.task,
            "difficulty": self.difficulty,
            "problems": len(self.problems),
            "attempts": self.attempts,
            "passed": self.passed,
            "pass_rate": self.pass_rate,
            "interval_95": [low, high],
            "failure_classes": dict(sorted(self.classes.items())),
            **({"countdown_classes": dict(sorted(self.finer.items()))} if self.finer else {}),
        }


def weakness_profile(attempts: Iterable[dict[str, Any]], problem: Any = None) -> list[Cell]:
    """Cells of (task, difficulty) in order, from a run's attempts (ResultsDB.attempts); with
    `problem` (an id -> Problem lookup, ResultsDB.problem) Countdown's failures get their finer
    classes too. Each
    attempt counts once: the interval is over samples, which for one problem are not independent,
    so with several samples a problem it reads narrower than the problems alone would give."""
    cells: dict[tuple[str, int], Cell] = {}
    for a in attempts:
        key = (a["task"], a["difficulty"])
        cell = cells.setdefault(key, Cell(*key))
        cell.attempts += 1
        cell.problems.add(a["problem_id"])
        if a["status"] == PASSED:
            cell.passed += 1
        else:
            cell.classes[a["status"]] += 1
            if problem is not None and a["task"] == "countdown":
                cell.finer[countdown_class(problem(a["problem_id"]), a["completion"])] += 1
    return [cells[k] for k in sorted(cells)]


def failed_problems(db: ResultsDB, run_name: str, below: float | None = None) -> list[dict[str, Any]]:
    """The problems the run `run_name` failed, as failures-file lines: every sample failed, or
    with `below`, a pass rate under it. Raises UserError for a missing run or an empty set."""
    if below is not None and not 0.0 < below <= 1.0:
        raise UserError(f"--below must be in (0, 1], got {below}")
    run = db.require_run(run_name)
    by_problem: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in db.attempts(run):
        by_problem[a["problem_id"]].append(a)
    if not by_problem:
        raise UserError(f"run {run_name!r} has no attempts")
    lines = []
    for problem_id, samples in by_problem.items():
        passed = sum(a["status"] == PASSED for a in samples)
        rate = passed / len(samples)
        if (rate >= below) if below is not None else passed > 0:
            continue
        failed = [a for a in samples if a["status"] != PASSED]
        problem = db.problem(problem_id)
        record: dict[str, Any] = {"run": run_name, "pass_rate": rate, "samples": len(samples),
                                  "classes": dict(sorted(Counter(a["status"] for a in failed).items()))}  # fmt: skip
        if problem.task == "countdown":
            finer = Counter(countdown_class(problem, a["completion"]) for a in failed)
            record["countdown_classes"] = dict(sorted(finer.items()))
        lines.append({**problem.to_dict(), "failures": record})
    if not lines:
        what = "every sample of any problem" if below is None else f"any problem below a pass rate of {below}"
        raise UserError(f"run {run_name!r} failed no problem ({what}): nothing to collect")
    return lines


def save_heat_map(cells: list[Cell], path: str, title: str) -> None:
    """Pass rate per task (rows) x difficulty (columns) as a PNG, each cell labelled with its rate
    and attempts; cells without attempts left blank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    tasks = sorted({c.task for c in cells})
    levels = sorted({c.difficulty for c in cells})
    grid = np.full((len(tasks), len(levels)), np.nan)
    for c in cells:
        grid[tasks.index(c.task), levels.index(c.difficulty)] = c.pass_rate
    figure, axes = plt.subplots(figsize=(1.2 * len(levels) + 3, 0.5 * len(tasks) + 1.8))
    image = axes.imshow(grid, vmin=0.0, vmax=1.0, cmap="RdYlGn", aspect="auto")
    axes.set_xticks(range(len(levels)), [str(d) for d in levels])
    axes.set_yticks(range(len(tasks)), tasks)
    axes.set_xlabel("difficulty")
    for c in cells:
        dark = c.pass_rate < 0.25 or c.pass_rate > 0.85  # the colour map's dark ends: white text
        axes.text(levels.index(c.difficulty), tasks.index(c.task), f"{c.pass_rate:.0%}\nn={c.attempts}",
                  ha="center", va="center", fontsize=7, color="white" if dark else "black")  # fmt: skip
    figure.colorbar(image, ax=axes, label="pass rate")
    axes.set_title(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
