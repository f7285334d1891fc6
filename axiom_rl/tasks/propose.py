"""The proposer's task: write a Countdown puzzle to the given constraints, one that can be solved.

A prompt asks for `count` numbers from 1 to `max_number` (among them two it names) and a target
from 1 to `max_target`, the constraints of a Countdown difficulty; the answer is the puzzle,
`<answer> 7 12 3 -> 45 </answer>`. It is valid when it keeps the constraints and the exact solver
(countdown.solve) reaches the target with every number once. Validity is this task's reward
(binary); what a proposal is worth for training a solver, 4p(1-p) of the solver's success rate p
on it, is the `learnability` reward (selfplay/proposer.py), which needs a solver model.

The two named numbers give the prompts their variety (train and eval splits are by content); the
rest of the puzzle is the proposer's. Nothing of the answer is evaluated: it is read with one
bounded pattern, and at most MAX_NUMBERS numbers of at most four digits reach the solver.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence
from typing import Any

from ..types import FORMAT_ERROR, PASSED, SYNTAX_ERROR, WRONG_ANSWER, Problem, Verdict
from .base import Task
from .countdown import FULL_PROMPT as SOLVER_PROMPT
from .countdown import SearchBudgetExceeded, difficulty_params, extract_answer, random_puzzle, solve
from .registry import register_task

MAX_ANSWER_CHARS = 120
# The exact solver's work on one proposal: about half a second at most on one core (six numbers
# unbounded took 2.3 s for a solvable puzzle). A puzzle it cannot settle within it is not valid.
MAX_SOLVER_STATES = 100_000
_PUZZLE = re.compile(r"(\d{1,4}(?:[ ,]+\d{1,4}){0,11})\s*->\s*(\d{1,5})")

FULL_PROMPT = (
    "Propose a Countdown puzzle: {count} numbers from 1 to {max_number}, among them {a} and {b}, "
    "and a target from 1 to {max_target} that can be reached by combining every number exactly "
    "once with + - * /. Make it neither trivial nor impossible. Return the puzzle in <answer> "
    "</answer> tags as the numbers, an arrow and the target, for example <answer> {example} "
    "</answer>."
)
COMPACT_PROMPT = "propose {count} of 1-{max_number} with {a} {b} to 1-{max_target}\n"
PREFIX = "<answer>"


def read_puzzle(completion: str) -> tuple[list[int], int] | None:
    """(numbers, target) of a proposal's answer, or None where it is not of that form."""
    body = extract_answer(completion)
    if body is None or len(body) > MAX_ANSWER_CHARS:
        return None
    found = _PUZZLE.fullmatch(body.strip())
    if found is None:
        return None
    return [int(n) for n in re.split(r"[ ,]+", found.group(1))], int(found.group(2))


def solution(numbers: Sequence[int], target: int) -> tuple[str | None, str]:
    """(an expression reaching the target, '') or (None, why there is none to be had)."""
    return _solution(tuple(numbers), target)


# A valid proposal is judged twice, by the verifier and by puzzle_of when the learnability reward
# turns it into the solver's puzzle; the exact search (up to MAX_SOLVER_STATES states, seconds
# for six numbers) is the costly part, and its answer depends on the puzzle alone.
@functools.lru_cache(maxsize=4096)
def _solution(numbers: tuple[int, ...], target: int) -> tuple[str | None, str]:
    try:
        found = solve(list(numbers), target, MAX_SOLVER_STATES)
    except SearchBudgetExceeded:
        return None, f"the exact solver could not settle it within {MAX_SOLVER_STATES:,} states"
    return (found, "") if found is not None else (None, "no way to reach the target with these numbers")


def constraint_violation(metadata: dict[str, Any], numbers: list[int], target: int) -> str:
    """Why a puzzle breaks the prompt's constraints ('' when it keeps them)."""
    count, max_number, max_target = metadata["count"], metadata["max_number"], metadata["max_target"]
    if len(numbers) != count:
        return f"{len(numbers)} numbers, asked for {count}"
    if not all(1 <= n <= max_number for n in numbers):
        return f"a number outside 1-{max_number}"
    rest = list(numbers)
    for required in metadata["include"]:
        if required not in rest:
            return f"{required} is not among the numbers"
        rest.remove(required)
    if not 1 <= target <= max_target:
        return f"target {target} outside 1-{max_target}"
    return ""


@register_task
class ProposeCountdown(Task):
    name = "propose_countdown"
    category = "arithmetic"
    description = "Propose a solvable Countdown puzzle to given constraints (the self-play proposer's role)."
    stop_strings = ("</answer>",)
    default_reward = "binary"

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        count, max_number, max_target = difficulty_params(difficulty)
        while True:  # a puzzle of this difficulty that the bounded solver settles (score's check)
            numbers, target, expression = random_puzzle(rng, difficulty)
            if solution(numbers, target)[0]:
                break
        include = sorted(rng.sample(numbers, 2))
        puzzle = f"{' '.join(map(str, numbers))} -> {target}"
        return Problem(
            id=f"propose_countdown-d{difficulty}",
            task=self.name,
            difficulty=difficulty,
            prompt=FULL_PROMPT.format(
                count=count,
                max_number=max_number,
                a=include[0],
                b=include[1],
                max_target=max_target,
                example=puzzle,
            ),
            reference_solution=puzzle,
            metadata={
                "count": count,
                "max_number": max_number,
                "max_target": max_target,
                "include": include,
                "solution": expression,
            },
        )

    def check_problem(self, problem: Problem) -> None:
        m = problem.metadata
        ints = all(isinstance(m.get(k), int) and not isinstance(m.get(k), bool)
                   for k in ("count", "max_number", "max_target"))  # fmt: skip
        include = m.get("include")
        if not ints or not isinstance(include, list) or not all(type(n) is int for n in include):
            raise ValueError(
                "a propose_countdown problem needs metadata count, max_number, max_target and include"
            )
        if not 2 <= m["count"] <= 5 or not 1 <= m["max_number"] <= 1000 or not 1 <= m["max_target"] <= 10_000:
            raise ValueError(
                "a propose_countdown problem asks for 2-5 numbers of at most 1000, a target of at most 10000"
            )
        if len(include) > m["count"]:
            raise ValueError("a propose_countdown problem names more numbers than it asks for")

    def render(self, problem: Problem, style: str = "full") -> str:
        if style == "full":
            return problem.prompt
        m = problem.metadata
        a, b = m["include"]
        return COMPACT_PROMPT.format(count=m["count"], max_number=m["max_number"], a=a, b=b,
                                     max_target=m["max_target"])  # fmt: skip

    def response_prefix(self, problem: Problem, style: str = "full") -> str:
        return PREFIX

    def content_key(self, problem: Problem) -> str:
        m = problem.metadata
        return f"{m['count']}of{m['max_number']}with{m['include']}to{m['max_target']}"

    def reference_completion(self, problem: Problem, style: str = "full") -> str:
        if style == "full":
            return f" {problem.reference_solution} </answer>"
        return f"{problem.reference_solution}</answer>"

    def follows_format(self, problem: Problem, completion: str) -> bool:
        return extract_answer(completion) is not None

    def score(self, problem: Problem, completion: str, sandbox: Any = None, limits: Any = None) -> Verdict:
        if extract_answer(completion) is None:
            return Verdict(FORMAT_ERROR, 0, 1, detail="no <answer>...</answer> found")
        puzzle = read_puzzle(completion)
        if puzzle is None:
            return Verdict(SYNTAX_ERROR, 0, 1, detail="not a puzzle of the form '7 12 3 -> 45'")
        numbers, target = puzzle
        why = constraint_violation(problem.metadata, numbers, target)
        if why:
            return Verdict(WRONG_ANSWER, 0, 1, detail=why)
        found, why = solution(numbers, target)
        if found is None:
            return Verdict(WRONG_ANSWER, 0, 1, detail=why)
        return Verdict(PASSED, 1, 1)


def puzzle_of(problem: Problem, completion: str) -> Problem | None:
    """The Countdown problem a valid proposal makes (None for an invalid one): the solver's prompt,
    at the proposal's difficulty, with the exact solver's solution as its reference."""
    puzzle = read_puzzle(completion)
    if puzzle is None or constraint_violation(problem.metadata, *puzzle):
        return None
    numbers, target = puzzle
    found, _ = solution(numbers, target)
    if found is None:
        return None
    return Problem(
        id=f"{problem.id}-puzzle",
        task="countdown",
        difficulty=problem.difficulty,
        prompt=SOLVER_PROMPT.format(numbers=numbers, target=target),
        reference_solution=found,
        metadata={"numbers": numbers, "target": target},
    )
