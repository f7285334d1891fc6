"""Countdown: combine the given numbers with + - * / to hit a target.

Every generated puzzle is solvable: the generator first builds a random expression over the
numbers and takes its value as the target, and that expression is the reference solution.
`solve()` is an exhaustive solver (used by tests and tools, fast up to 5 numbers).

Answers are read from <answer>...</answer> (the original experiments' <think>/<answer> format) and parsed
with an AST whitelist -- integer literals, + - * /, parentheses -- then evaluated with exact
fractions. Nothing is ever eval'd. Every given number must be used exactly once.
"""

from __future__ import annotations

import ast
import random
import re
import warnings
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations
from typing import Any

from ..tags import answer_body
from ..types import FORMAT_ERROR, PASSED, RUNTIME_ERROR, SYNTAX_ERROR, WRONG_ANSWER, Problem, Verdict
from .base import Task
from .registry import register_task

_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
MAX_ANSWER_CHARS = 200  # longer answers are not arithmetic over six numbers; refuse to parse them
MAX_LITERAL = 10**6

FULL_PROMPT = (
    "Using the numbers {numbers}, create an equation that equals {target}. You can use basic "
    "arithmetic operations (+, -, *, /) and each number can only be used once. Show your work in "
    "<think> </think> tags. And return the final answer in <answer> </answer> tags, for example "
    "<answer> (1 + 2) / 3 </answer>."
)
FULL_PREFIX = "Let me solve this step by step.\n<think>"
COMPACT_PREFIX = "<answer>"
STEPS_PREFIX = "<think>"


# What a problem read from a file may hold: far beyond any difficulty's, small enough that every
# expression over them stays cheap to evaluate.
MAX_NUMBERS = 12
LARGEST = 10**9


def _small_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= LARGEST


def difficulty_params(difficulty: int) -> tuple[int, int, int]:
    """(how many numbers, largest number, largest target) for a difficulty 1-10."""
    count = 3 + (difficulty - 1) // 3  # 3,3,3,4,4,4,5,5,5,6
    max_number = (20, 20, 30, 25, 40, 60, 50, 75, 100, 100)[difficulty - 1]
    max_target = (100, 100, 200, 200, 300, 500, 500, 750, 1000, 1000)[difficulty - 1]
    return count, max_number, max_target


def _wrap(text: str, prec: int, parent: str, right: bool) -> str:
    p = _PRECEDENCE[parent]
    needs = prec < p or (right and prec == p and parent in "-/")
    return f"({text})" if needs else text


def random_expression(rng: random.Random, numbers: list[int]) -> tuple[Fraction, str]:
    """Combine all `numbers` in a random order and tree shape; returns (value, text)."""
    pool: list[tuple[Fraction, str, int]] = [(Fraction(n), str(n), 3) for n in numbers]
    while len(pool) > 1:
        i, j = rng.sample(range(len(pool)), 2)
        (a, ta, pa), (b, tb, pb) = pool[i], pool[j]
        ops = ["+", "-", "*"] + (["/"] if b != 0 and (a / b).denominator == 1 else [])
        op = rng.choice(ops)
        value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else a}[op]
        text = f"{_wrap(ta, pa, op, False)} {op} {_wrap(tb, pb, op, True)}"
        pool = [p for k, p in enumerate(pool) if k not in (i, j)] + [(value, text, _PRECEDENCE[op])]
    return pool[0][0], pool[0][1]


class SearchBudgetExceeded(Exception):
    """solve() visited more states than it was allowed to."""


def random_puzzle(rng: random.Random, difficulty: int) -> tuple[list[int], int, str]:
    """(numbers, target, an expression reaching it) of a difficulty: numbers drawn until a random
    expression over them has an integer value within the difficulty's targets."""
    count, max_number, max_target = difficulty_params(difficulty)
    while True:
        numbers = [rng.randint(1, max_number) for _ in range(count)]
        value, expression = random_expression(rng, numbers)
        if value.denominator == 1 and 1 <= value <= max_target:
            return numbers, int(value), expression


def solve(numbers: list[int], target: int, max_states: int | None = None) -> str | None:
    """An expression using every number exactly once that equals `target`, or None.

    Exhaustive search over pairwise combinations with memoisation on the multiset of values.
    `max_states`: raise SearchBudgetExceeded after visiting that many (a puzzle from outside,
    such as a proposal, must not cost unbounded time: six numbers can take seconds).
    """
    target_f = Fraction(target)
    dead: set[tuple[Fraction, ...]] = set()
    visited = 0

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        nonlocal visited
        visited += 1
        if max_states is not None and visited > max_states:
            raise SearchBudgetExceeded(f"more than {max_states:,} states")
        if len(items) == 1:
            return items[0][1] if items[0][0] == target_f else None
        key = tuple(sorted(v for v, _ in items))
        if key in dead:
            return None
        for i, j in combinations(range(len(items)), 2):
            rest = [items[k] for k in range(len(items)) if k not in (i, j)]
            (a, ta), (b, tb) = items[i], items[j]
            candidates = [(a + b, f"({ta} + {tb})"), (a * b, f"({ta} * {tb})"), (a - b, f"({ta} - {tb})")]
            candidates.append((b - a, f"({tb} - {ta})"))
            if b != 0:
                candidates.append((a / b, f"({ta} / {tb})"))
            if a != 0:
                candidates.append((b / a, f"({tb} / {ta})"))
            for value, text in candidates:
                found = search([*rest, (value, text)])
                if found is not None:
                    return found
        dead.add(key)
        return None

    found = search([(Fraction(n), str(n)) for n in numbers])
    if found is not None and found.startswith("(") and found.endswith(")"):
        found = found[1:-1]
    return found


def worked_steps(expression: str) -> list[str]:
    """The operations of an arithmetic expression as equations, innermost first, without spaces:
    "(5 + 2) * 3" -> ["5+2=7", "7*3=21"]. For the reference solutions the generator writes, whose
    every operation has an integer value."""
    steps: list[str] = []
    try:
        _evaluate(ast.parse(expression, mode="eval").body, [], steps)
    except (SyntaxError, _Parse) as e:
        raise ValueError(f"not an arithmetic expression over integers: {expression!r} ({e})") from None
    return steps


def _integer(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


@dataclass(frozen=True)
class Answer:
    """What an answer amounts to. Every reward for Countdown is computed from this."""

    has_answer: bool  # an <answer> section was found
    parsed: bool = False  # it is an arithmetic expression of the allowed form
    numbers_exact: bool = False  # it uses each given number exactly once, and no other
    numbers_subset: bool = False  # it uses only given numbers, each at most once
    value: Fraction | None = None  # None when it does not evaluate (division by zero)
    correct: bool = False
    error: str = ""


def extract_answer(completion: str) -> str | None:
    """The last <answer>...</answer> body, stripped (tags.answer_body), or None."""
    body = answer_body(completion)
    return None if body is None else body.strip()


class _Parse(Exception):
    pass


def combine(a: Fraction, op: str, b: Fraction) -> Fraction | None:
    """a op b, exactly; None for a division by zero."""
    if op == "/":
        return None if b == 0 else a / b
    return {"+": a + b, "-": a - b, "*": a * b}[op]


def _evaluate(node: ast.AST, literals: list[int], steps: list[str] | None = None) -> Fraction | None:
    """Exact value of a whitelisted expression, None on division by zero anywhere in it. `steps`,
    if given, gets each operation as an equation, innermost first (worked_steps)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        if node.value > MAX_LITERAL:
            raise _Parse("number too large")
        literals.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left = _evaluate(node.left, literals, steps)
        right = _evaluate(node.right, literals, steps)
        if left is None or right is None:
            return None
        op = _OPS[type(node.op)]
        value = combine(left, op, right)
        if steps is not None and value is not None:
            steps.append(f"{_integer(left)}{op}{_integer(right)}={_integer(value)}")
        return value
    raise _Parse(f"{type(node).__name__} is not allowed (only integers, + - * / and parentheses)")


def analyse(numbers: list[int], target: int, completion: str) -> Answer:
    text = extract_answer(completion)
    if text is None:
        return Answer(has_answer=False, error="no <answer>...</answer> found")
    if len(text) > 2 * MAX_ANSWER_CHARS:  # before any pattern runs over it
        return Answer(has_answer=True, error="empty or overlong answer")
    # "expr = target" is common; the part after '=' is ignored if it is just a number.
    text = re.sub(r"=\s*-?\d+\s*$", "", text).strip()
    if not text or len(text) > MAX_ANSWER_CHARS:
        return Answer(has_answer=True, error="empty or overlong answer")
    try:
        with warnings.catch_warnings():  # "1if" and the like: a SyntaxWarning on stderr per answer
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(text, mode="eval")
        literals: list[int] = []
        value = _evaluate(tree.body, literals)
    except (SyntaxError, ValueError, _Parse, RecursionError, MemoryError) as e:
        return Answer(has_answer=True, error=f"not an arithmetic expression: {e}")
    exact = sorted(literals) == sorted(numbers)
    pool = list(numbers)
    subset = True
    for n in literals:
        if n in pool:
            pool.remove(n)
        else:
            subset = False
    correct = exact and value is not None and value == target
    error = "" if correct else ("division by zero" if value is None else "")
    return Answer(True, True, exact, subset, value, correct, error)


@register_task
class Countdown(Task):
    name = "countdown"
    category = "arithmetic"
    description = "Reach a target with + - * / using each given number once (3 numbers, up to 6)."
    stop_strings = ("</answer>",)
    default_reward = "countdown"

    def follows_format(self, problem: Problem, completion: str) -> bool:
        return extract_answer(completion) is not None

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        numbers, target, expression = random_puzzle(rng, difficulty)
        return Problem(
            id=f"countdown-d{difficulty}",
            task=self.name,
            difficulty=difficulty,
            prompt=FULL_PROMPT.format(numbers=numbers, target=target),
            reference_solution=expression,
            metadata={"numbers": numbers, "target": target},
        )

    def check_problem(self, problem: Problem) -> None:
        numbers, target = problem.metadata.get("numbers"), problem.metadata.get("target")
        if not isinstance(numbers, list) or not 1 <= len(numbers) <= MAX_NUMBERS:
            raise ValueError(
                f"a countdown problem needs metadata.numbers: a list of 1-{MAX_NUMBERS} integers"
            )
        if not all(_small_int(n) for n in numbers) or not _small_int(target):
            raise ValueError(
                f"a countdown problem's numbers and target must be integers of at most {LARGEST:,}"
            )

    def render(self, problem: Problem, style: str = "full") -> str:
        if style != "full":  # compact and steps: the numbers and the target
            m = problem.metadata
            return f"{' '.join(str(n) for n in m['numbers'])} -> {m['target']}\n"
        return problem.prompt

    def response_prefix(self, problem: Problem, style: str = "full") -> str:
        return {"compact": COMPACT_PREFIX, "steps": STEPS_PREFIX}.get(style, FULL_PREFIX)

    def content_key(self, problem: Problem) -> str:
        # The same numbers in another order are the same puzzle.
        m = problem.metadata
        return f"{sorted(m['numbers'])}->{m['target']}"

    def reference_completion(self, problem: Problem, style: str = "full") -> str:
        """A completion that scores 1.0, continuing `response_prefix` (used for SFT)."""
        if style == "compact":  # no spaces: every character is a token for a character-level model
            return f"{(problem.reference_solution or '').replace(' ', '')}</answer>"
        if style == "steps":  # each operation of the reference as an equation, a line each
            expression = problem.reference_solution or ""
            steps = "".join(f"{line}\n" for line in worked_steps(expression))
            return f"{steps}</think><answer>{expression.replace(' ', '')}</answer>"
        m = problem.metadata
        return (
            f" I need to combine {m['numbers']} to make {m['target']}.</think>\n"
            f"<answer> {problem.reference_solution} </answer>"
        )

    def analyse(self, problem: Problem, completion: str) -> Answer:
        m: dict[str, Any] = dict(problem.metadata)
        return analyse(list(m["numbers"]), int(m["target"]), completion)

    def score(self, problem: Problem, completion: str, sandbox: Any = None, limits: Any = None) -> Verdict:
        a = self.analyse(problem, completion)
        if a.correct:
            return Verdict(PASSED, 1, 1)
        if not a.has_answer:
            status = FORMAT_ERROR
        elif not a.parsed:
            status = SYNTAX_ERROR
        elif a.value is None:
            status = RUNTIME_ERROR
        else:
            status = WRONG_ANSWER
        detail = a.error
        if a.parsed and a.value is not None:
            uses = (
                "uses each number once" if a.numbers_exact else "does not use each given number exactly once"
            )
            detail = f"evaluates to {a.value}, {uses}"
        return Verdict(status, 0, 1, detail=detail)
