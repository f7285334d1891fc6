"""What a task is: a small plugin that makes verifiable problems and scores answers to them.

A task has a name, a category, a one-line description and a difficulty range, and three
methods (DESIGN.md):

    generate(rng, difficulty) -> Problem     deterministic given the rng's state
    render(problem, style)    -> str         the user-facing prompt text
    score(problem, completion) -> Verdict    the verifier; rewards are computed from it

`CodeTask` does the common work for "write a function" tasks: a subclass gives a statement,
a signature, a reference solution (an ordinary function whose source text becomes the
problem's `reference_solution`, so the shipped source and the expected values cannot drift
apart), and a sampler of inputs. Expected outputs are computed in this (trusted) process.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import random
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ..sandbox.pool import Limits
from ..types import Problem, TestCase, Verdict, to_json_data

# Prompt styles: "full" is the natural-language prompt for real models; "compact" is a short
# form for the built-in character-level tiny model (tasks without one fall back to "full");
# "steps" is the compact form with worked steps before the answer, one equation a line, where a
# task has them (Countdown; others render it as "compact"), for process rewards (axiom_rl/prm).
PROMPT_STYLES = ("full", "compact", "steps")


class Task:
    """Base class of every task. Subclasses set the class attributes and override methods."""

    name: ClassVar[str]
    category: ClassVar[str]
    description: ClassVar[str]
    min_difficulty: ClassVar[int] = 1
    max_difficulty: ClassVar[int] = 10
    # False for tasks whose problems come from an importer (HumanEval, MBPP), not a generator.
    generatable: ClassVar[bool] = True
    # Generation may stop at these strings (besides EOS); the completion is cut there.
    stop_strings: ClassVar[tuple[str, ...]] = ()
    # The reward used when the user does not name one (rewards.py).
    default_reward: ClassVar[str] = "code_execution"
    # Whether scoring runs the completion as code (then training and evaluation start a sandbox).
    runs_code: ClassVar[bool] = False
    # The task whose problems this one's are made from (debug_lcs: lcs), or None. Such a task is
    # left out of "all", and shares its base task's train/eval split.
    derived_from: ClassVar[str | None] = None

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        raise NotImplementedError(f"task {self.name!r} has no generator (its problems are imported)")

    def split_name(self) -> str:
        """The name whose hash space splits this task's problems into train and eval: its own,
        or its base task's for a derived task, so that a problem made from an eval-split problem
        is in eval too."""
        return self.derived_from or self.name

    def render(self, problem: Problem, style: str = "full") -> str:
        """The prompt shown to the model (the user turn when a chat template is used)."""
        return problem.prompt

    def response_prefix(self, problem: Problem, style: str = "full") -> str:
        """Text the assistant turn starts with, before the model writes (e.g. "<think>")."""
        return ""

    def content_key(self, problem: Problem) -> str:
        """What identifies a problem's content, for train/eval splits and de-duplication.

        Two problems with the same key count as the same problem. Default: the prompt text,
        so no prompt the model sees in evaluation ever appears in training.
        """
        return problem.prompt

    def draft_key(self, stream: str, difficulty: int) -> str | None:
        """The content key of the problem `generate` would make from `random.Random(stream)`,
        where it is known before the costly part of generating (None: it is not). Only a filter:
        the generator skips draws whose draft lands in the other split, then checks the problem
        made. (The seed, not an rng: a task without a draft costs no second rng per draw.)"""
        return None

    def reference_completion(self, problem: Problem, style: str = "full") -> str:
        """A completion scoring 1.0 that continues `response_prefix` (the target for SFT)."""
        if problem.reference_solution is None:
            raise ValueError(f"problem {problem.id} has no reference solution")
        return f"```python\n{problem.reference_solution.rstrip()}\n```"

    def follows_format(self, problem: Problem, completion: str) -> bool:
        """Does the completion have the answer format the prompt asks for? (the `format` reward)"""
        from ..verifier import has_fenced_function

        return has_fenced_function(completion, problem.entry_point)

    def score(self, problem: Problem, completion: str, sandbox: Any = None, limits: Any = None) -> Verdict:
        """Judge one completion. `sandbox`/`limits` matter only to tasks that run code."""
        raise NotImplementedError

    def check_problem(self, problem: Problem) -> None:
        """Raise ValueError, saying why, when a problem read from a file lacks what this task's
        prompts and scoring read (a file is anyone's to write). Default: nothing beyond the fields
        every problem has."""


@functools.cache
def _source_of(fn: Callable[..., Any]) -> str:
    # Cached: getsource re-tokenises the module each call, half of generating a problem.
    return textwrap.dedent(inspect.getsource(fn)).strip() + "\n"


def _literal(value: Any) -> str:
    """A Python literal for a JSON-like value (True/None rather than true/null)."""
    return repr(value)


class CodeTask(Task):
    """A "write this function" task checked by hidden input/output tests.

    Subclasses provide: `statement` (what to compute), `signature` (the exact `def` line),
    `solution` (the reference, a plain function named like the entry point, self-contained:
    imports inside it), `random_args(rng, difficulty)` (one test input as a list of positional
    arguments) and optionally `edge_args(difficulty)` (hand-picked edge cases) and `checker`
    (the name of a checker in `tasks.checkers` when several answers are right).
    """

    statement: ClassVar[str]
    signature: ClassVar[str]
    solution: ClassVar[Callable[..., Any]]
    checker: ClassVar[str | None] = None
    runs_code = True
    # References run in milliseconds; a correct answer never needs more than this.
    default_limits: ClassVar[Limits] = Limits(call_timeout=2.0, cpu_s=6.0)
    num_examples: ClassVar[int] = 2
    default_num_tests: ClassVar[int] = 8

    def __init__(self, num_tests: int | None = None) -> None:
        self.num_tests = num_tests or self.default_num_tests

    @property
    def entry_point(self) -> str:
        return self.solution.__name__

    def random_args(self, rng: random.Random, difficulty: int) -> list[Any]:
        raise NotImplementedError

    def edge_args(self, difficulty: int) -> Sequence[list[Any]]:
        return ()

    def expected(self, args: Sequence[Any]) -> Any:
        # Deep copy: a reference that mutated its input must not change the stored test.
        return to_json_data(type(self).solution(*copy.deepcopy(list(args))))

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        seen: set[str] = set()

        def fresh(args: list[Any]) -> bool:
            key = json.dumps(args, sort_keys=True)
            if key in seen:
                return False
            seen.add(key)
            return True

        # Visible examples are small (difficulty <= 2) and never reused as hidden tests.
        examples: list[list[Any]] = []
        for _ in range(50):
            if len(examples) == self.num_examples:
                break
            args = to_json_data(self.random_args(rng, min(difficulty, 2)))
            if fresh(args):
                examples.append(args)
        edges = [to_json_data(list(a)) for a in self.edge_args(difficulty)]
        rng.shuffle(edges)
        test_args: list[list[Any]] = [a for a in edges[: self.num_tests // 2] if fresh(a)]
        for _ in range(self.num_tests * 20):
            if len(test_args) >= self.num_tests:
                break
            args = to_json_data(self.random_args(rng, difficulty))
            if fresh(args):
                test_args.append(args)
        tests = tuple(TestCase(tuple(a), self.expected(a)) for a in test_args)
        example_cases = [TestCase(tuple(a), self.expected(a)) for a in examples]
        return Problem(
            id=f"{self.name}-d{difficulty}",
            task=self.name,
            difficulty=difficulty,
            prompt=self.code_prompt(example_cases),
            entry_point=self.entry_point,
            signature=self.signature,
            tests=tests,
            checker=self.checker,
            reference_solution=_source_of(type(self).solution),
            metadata={"examples": [t.to_dict() for t in example_cases], "category": self.category},
        )

    def content_key(self, problem: Problem) -> str:
        # The prompt and the hidden tests' inputs: for fixed-spec tasks (fizzbuzz, n_queens) the
        # prompt space is small, and a problem is distinguished by what it is tested on.
        tests = [list(t.args) for t in problem.tests or ()]
        return problem.prompt + "\0" + json.dumps(tests, sort_keys=True)

    def code_prompt(self, examples: Sequence[TestCase]) -> str:
        fn = self.entry_point
        lines = [
            f"Write a Python function `{self.signature.removeprefix('def ')}`.",
            "",
            self.statement.strip(),
        ]
        if examples:
            lines += [
                "",
                "Examples:" if self.checker is None else "Examples (any correct answer is accepted):",
            ]
            for ex in examples:
                call = f"{fn}({', '.join(_literal(a) for a in ex.args)})"
                lines.append(f"    {call} -> {_literal(ex.expected)}")
        lines += [
            "",
            "Reply with the complete function in a single ```python code block, using exactly this signature:",
            self.signature,
        ]
        return "\n".join(lines)

    def score(self, problem: Problem, completion: str, sandbox: Any = None, limits: Any = None) -> Verdict:
        from ..verifier import score_code

        return score_code(problem, completion, sandbox=sandbox, limits=limits or self.default_limits)


def rand_str(rng: random.Random, length: int, alphabet: str = "abcdefghijklmnopqrstuvwxyz") -> str:
    return "".join(rng.choice(alphabet) for _ in range(length))


def alphabet_for(difficulty: int) -> str:
    """Small alphabets make matches likely at low difficulty; larger ones later."""
    return "abcdefghijklmnopqrstuvwxyz"[: min(26, 2 + difficulty)]
