"""Step labels from the verifier, not from people.

Countdown, exact: walking the equations in order, with the given numbers as the pool, a step is
good when it parses, uses two numbers still in the pool (each result goes back into it, its
operands leave it), its arithmetic is right, and the target can still be reached with every
number left (the exhaustive solver decides). After the first bad step every later equation is
bad too: the reasoning is no longer sound. The answer step is good when the answer is right.

Code, Monte-Carlo (Math-Shepherd, Wang et al. 2024): from each step's prefix, k continuations are
sampled from a policy and verified; the label is the fraction that pass ("soft") or whether any
does ("hard").

A labels file has one line per completion: the problem, the completion, its steps' end offsets
and labels, and whether the whole completion passed. It is read back as hostile input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..errors import UserError
from ..io import read_jsonl
from ..tasks.countdown import analyse, combine, solve
from ..types import Problem
from ..verify_files import checked_problem
from .steps import EQUATION, MAX_STEPS, Step, countdown_steps, split_steps

# The solver decides reachability from what is left after each step; past this many numbers an
# exhaustive search is no longer cheap (the generated puzzles have 3-6).
MAX_EXACT_NUMBERS = 7
MAX_COMPLETION_CHARS = 20_000


@dataclass(frozen=True)
class Labelled:
    """A completion with its steps' ends and labels (1 good, 0 bad, or a fraction)."""

    problem: Problem
    completion: str
    ends: tuple[int, ...]
    labels: tuple[float, ...]
    passed: bool
    sample: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.problem.to_dict(), "completion": self.completion, "sample": self.sample,
                "ends": list(self.ends), "labels": list(self.labels), "passed": self.passed}  # fmt: skip


def _reachable(pool: Counter[Fraction], target: int, memo: dict[tuple[Fraction, ...], bool]) -> bool:
    key = tuple(sorted(pool.elements()))
    if key not in memo:
        memo[key] = solve(list(key), target) is not None  # type: ignore[arg-type]  # solve takes any rationals
    return memo[key]


def _take(pool: Counter[Fraction], value: Fraction) -> bool:
    if pool[value] <= 0:
        return False
    pool[value] -= 1
    return True


def countdown_labels(problem: Problem, completion: str, steps: Sequence[Step] | None = None) -> list[float]:
    """One exact label per step of countdown_steps(completion)."""
    numbers = [int(n) for n in problem.metadata["numbers"]]
    target = int(problem.metadata["target"])
    if len(numbers) > MAX_EXACT_NUMBERS:
        raise UserError(
            f"problem {problem.id}: {len(numbers)} numbers; exact step labels take at most {MAX_EXACT_NUMBERS}"
        )
    pool: Counter[Fraction] = Counter(Fraction(n) for n in numbers)
    memo: dict[tuple[Fraction, ...], bool] = {}
    sound, labels = True, []
    for step in steps if steps is not None else countdown_steps(completion):
        if step.kind == "answer":
            labels.append(1.0 if analyse(numbers, target, completion).correct else 0.0)
            continue
        m = EQUATION.fullmatch(step.text)
        good = sound and m is not None
        if good:
            assert m is not None
            a, op, b, c = Fraction(int(m[1])), m[2], Fraction(int(m[3])), Fraction(int(m[4]))
            good = _take(pool, a) and _take(pool, b) and combine(a, op, b) == c
            if good:
                pool[c] += 1
                good = _reachable(+pool, target, memo)
        sound = good
        labels.append(1.0 if good else 0.0)
    return labels


def or_debug_labels(problem: Problem, completion: str, steps: Sequence[Step] | None = None) -> list[float]:
    """One label per step of or_debug_steps(completion), by the solver (tasks/or_debug/trace.py:
    the diagnosis 0.5 when it names part of the conflict, a repair 1.0 when it shrinks the IIS or
    reaches the intended optimum, else 0)."""
    from ..tasks.or_debug.trace import repair_trace
    from .steps import or_debug_steps

    steps = or_debug_steps(completion) if steps is None else steps
    trace = repair_trace(problem, completion) if steps else None
    if trace is None:
        return []
    # the trace has the diagnosis first, then the repairs in order; the steps are in text order
    repairs = iter(step.label for step in trace[1:])
    return [trace[0].label if step.kind == "diagnosis" else next(repairs) for step in steps]


# the tasks whose verifier labels each step itself; the others' labels come from sampling (code)
EXACT_LABELLERS = {"countdown": countdown_labels, "or_debug": or_debug_labels}
EXACTLY_LABELLED = tuple(EXACT_LABELLERS)


def exact_labels(
    problem: Problem, completion: str, steps: Sequence[Step] | None = None
) -> list[float] | None:
    """The verifier's own labels for the completion's steps where its task has them; None for a
    task whose labels come from sampling (code)."""
    labeller = EXACT_LABELLERS.get(problem.task)
    return None if labeller is None else labeller(problem, completion, steps)


# (prompts, k) -> k continuations of each prompt; (problems, completions) -> passed, per row.
Sampler = Callable[[Sequence[str], int], list[list[str]]]
Verify = Callable[[Sequence[Problem], Sequence[str]], list[bool]]


def monte_carlo_labels(
    problems: Sequence[Problem],
    completions: Sequence[str],
    prompts: Sequence[str],
    sample: Sampler,
    verify: Verify,
    k: int,
    hard: bool = False,
) -> list[list[float]]:
    """Per completion, one label per step (split_steps): the share of k continuations of the step's
    prefix that pass (hard: 1.0 when any does). `prompts[i]` is the exact text the policy continued
    to write completions[i]; the prefixes continue from it. One batch of samples and one of
    verifications for all steps of all completions."""
    if k < 1:
        raise UserError(f"--continuations must be at least 1, got {k}")
    prefixes: list[tuple[int, str]] = []  # (row, completion up to the step's end)
    for i, (problem, completion) in enumerate(zip(problems, completions)):
        for step in split_steps(problem, completion):
            prefixes.append((i, completion[: step.end]))
    if not prefixes:
        return [[] for _ in completions]
    continued = sample([prompts[i] + prefix for i, prefix in prefixes], k)
    rows = [problems[i] for i, _ in prefixes for _ in range(k)]
    texts = [prefix + tail for (_, prefix), tails in zip(prefixes, continued) for tail in tails]
    passed = verify(rows, texts)
    out: list[list[float]] = [[] for _ in completions]
    for n, (i, _) in enumerate(prefixes):
        won = passed[n * k : (n + 1) * k]
        out[i].append(float(any(won)) if hard else sum(won) / k)
    return out


def read_labels(path: str) -> list[Labelled]:
    """A labels file's lines, checked; UserError naming the first bad line."""
    out = []
    for line in read_jsonl(path):
        where = f"{path}:{line.lineno}"
        if line.error:
            raise UserError(f"{where}: {line.error}")
        value = line.value
        if not isinstance(value, dict) or not {"problem", "completion", "ends", "labels", "passed"} <= set(
            value
        ):
            raise UserError(f"{where}: not a step-labels line (problem, completion, ends, labels, passed)")
        try:
            problem = checked_problem(value["problem"])
        except ValueError as e:
            raise UserError(f"{where}: {e}") from None
        completion, ends, labels = value["completion"], value["ends"], value["labels"]
        if not isinstance(completion, str) or len(completion) > MAX_COMPLETION_CHARS:
            raise UserError(
                f"{where}: completion must be text of at most {MAX_COMPLETION_CHARS:,} characters"
            )
        if not (
            isinstance(ends, list) and isinstance(labels, list) and len(ends) == len(labels) <= MAX_STEPS
        ):
            raise UserError(f"{where}: ends and labels must be lists of one length, at most {MAX_STEPS}")
        if not all(type(e) is int for e in ends) or any(b <= a for a, b in zip(ends, ends[1:])):
            raise UserError(f"{where}: ends must be increasing character offsets")
        if ends and (ends[0] <= 0 or ends[-1] > len(completion)):
            raise UserError(f"{where}: ends must lie within the completion")
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1 for x in labels):
            raise UserError(f"{where}: labels must be numbers in [0, 1]")
        if not isinstance(value["passed"], bool):
            raise UserError(f"{where}: passed must be true or false")
        sample = value.get("sample", 0)
        values = tuple(float(x) for x in labels)
        out.append(
            Labelled(
                problem,
                completion,
                tuple(ends),
                values,
                value["passed"],
                sample if type(sample) is int else 0,
            )
        )
    if not out:
        raise UserError(f"{path}: no labelled completions")
    return out
