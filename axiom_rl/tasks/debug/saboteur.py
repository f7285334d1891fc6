"""The saboteur: inject bugs into a problem's reference solution and keep the subtle ones.

A mutant (mutations.py) is kept only when the sandbox shows that it fails at least one of the
problem's hidden tests and passes at least one: a bug, not a broken program (one that fails
every test) and not an equivalent rewrite (one that passes them all). Mutants are deduplicated
by behaviour: two whose per-test results (pass or fail, and what they returned or raised) agree
are one bug, whatever their text. Everything is deterministic under the rng given.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...sandbox.pool import Limits
from ...types import Problem, Verdict
from .mutations import OPERATORS, Mutant, mutants

# A reference runs its tests in milliseconds: a mutant needing more has looped, and screening
# it for longer only costs time (it counts as failing that test, as a candidate's would).
SCREEN_LIMITS = Limits(call_timeout=0.5, cpu_s=3.0)
REJECTED_BROKEN = "fails every test"
REJECTED_EQUIVALENT = "passes every test"
REJECTED_DUPLICATE = "behaves as one kept"


@dataclass(frozen=True)
class Bug:
    """A kept mutant: the buggy source, the edits that made it, and its verdict on the tests."""

    source: str
    edits: tuple[Mutant, ...]
    verdict: Verdict

    def first_failure(self) -> int:
        """The index of the first hidden test it fails."""
        return next(i for i, t in enumerate(self.verdict.tests) if not t.passed)


@dataclass
class SabotageYield:
    """How many mutants each operator made and how many were kept, per task: the saboteur's
    report (kept / tried), and why the rest were rejected."""

    tried: Counter[tuple[str, str]] = field(default_factory=Counter)  # (task, operator)
    kept: Counter[tuple[str, str]] = field(default_factory=Counter)
    rejected: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (task, operator, why)

    def add(self, task: str, operator: str, why: str | None) -> None:
        self.tried[task, operator] += 1
        if why is None:
            self.kept[task, operator] += 1
        else:
            self.rejected[task, operator, why] += 1

    def rows(self) -> list[dict[str, Any]]:
        return [
            {"task": task, "operator": op, "tried": n, "kept": self.kept[task, op],
             "rejected": {why: c for (t, o, why), c in sorted(self.rejected.items()) if (t, o) == (task, op)}}
            for (task, op), n in sorted(self.tried.items())
        ]  # fmt: skip


def behaviour(verdict: Verdict) -> tuple[tuple[bool, str], ...]:
    """What a program did on each test: passed or not, and the verifier's account of it."""
    return tuple((t.passed, t.detail) for t in verdict.tests)


def screen(problem: Problem, source: str, sandbox: Any) -> Verdict:
    """The verdict of `source` on the problem's hidden tests, run in the sandbox."""
    from ...verifier import score_code

    return score_code(problem, f"```python\n{source.rstrip()}\n```", sandbox=sandbox, limits=SCREEN_LIMITS)


def rejection(verdict: Verdict) -> str | None:
    """Why a mutant with this verdict is not a subtle bug (None: it is)."""
    if verdict.total == 0 or verdict.passed == verdict.total:
        return REJECTED_EQUIVALENT
    if verdict.passed == 0 or len(verdict.tests) != verdict.total:
        return REJECTED_BROKEN  # every test failed, or it died before reporting them all
    return None


def all_bugs(
    problem: Problem,
    sandbox: Any,
    operators: Sequence[str] = OPERATORS,
    tally: SabotageYield | None = None,
) -> list[Bug]:
    """Every subtle single-edit bug of the problem's reference solution, one per behaviour, in
    mutation order; `tally` counts what each operator made and what was kept."""
    if problem.reference_solution is None:
        raise ValueError(f"problem {problem.id} has no reference solution to inject bugs into")
    kept: list[Bug] = []
    behaviours: set[tuple[tuple[bool, str], ...]] = set()
    for mutant in mutants(problem.reference_solution, operators):
        verdict = screen(problem, mutant.source, sandbox)
        why = rejection(verdict)
        if why is None and behaviour(verdict) in behaviours:
            why = REJECTED_DUPLICATE
        if tally is not None:
            tally.add(problem.task, mutant.operator, why)
        if why is None:
            behaviours.add(behaviour(verdict))
            kept.append(Bug(mutant.source, (mutant,), verdict))
    return kept


def _by_operator(candidates: Iterable[Mutant], rng: random.Random) -> list[Mutant]:
    """The mutants in a seeded order that takes an operator first, then one of its mutants: an
    operator with many sites (wrong_variable has one per variable pair) is tried no more often
    than one with few."""
    groups: dict[str, list[Mutant]] = {}
    for m in candidates:
        groups.setdefault(m.operator, []).append(m)
    for group in groups.values():
        rng.shuffle(group)
    order: list[Mutant] = []
    names = sorted(groups)
    while names:
        name = rng.choice(names)
        order.append(groups[name].pop())
        if not groups[name]:
            names.remove(name)
    return order


def inject(
    problem: Problem,
    rng: random.Random,
    bugs: int,
    sandbox: Any,
    operators: Sequence[str] = OPERATORS,
    tally: SabotageYield | None = None,
    max_tries: int = 60,
) -> Bug | None:
    """`bugs` edits of the reference solution, one after the other, each leaving a subtle bug
    (the program still passes a test and fails one), chosen in a seeded order; None when no such
    chain is found within `max_tries` mutants screened."""
    if problem.reference_solution is None:
        raise ValueError(f"problem {problem.id} has no reference solution to inject bugs into")
    if bugs < 1:
        raise ValueError(f"bugs must be >= 1, got {bugs}")
    source, edits, verdict = problem.reference_solution, (), None
    tries = 0
    for _ in range(bugs):
        for mutant in _by_operator(mutants(source, operators), rng):
            if tries >= max_tries:
                return None
            tries += 1
            candidate = screen(problem, mutant.source, sandbox)
            why = rejection(candidate)
            if tally is not None:
                tally.add(problem.task, mutant.operator, why)
            if why is None:
                source, edits, verdict = mutant.source, (*edits, mutant), candidate
                break
        else:
            return None
    assert verdict is not None
    return Bug(source, edits, verdict)


def failing_test(problem: Problem, bug: Bug) -> dict[str, Any]:
    """The first hidden test the bug fails, as the debug prompt shows it."""
    i = bug.first_failure()
    test = (problem.tests or ())[i]
    return {"args": list(test.args), "expected": test.expected, "detail": bug.verdict.tests[i].detail}
