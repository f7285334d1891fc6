"""The plain data that flows between stages: problems, verdicts.

Every type here is a frozen dataclass with a JSON round trip, so each stage of the pipeline
(generate -> prompt -> rollout -> verify -> reward -> advantage -> loss) can be run, stored and
tested on its own. The JSON forms are contracts (docs/problems.md); change them only with a
reason written there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Verdict statuses. `internal_error` is not the model's fault (a crashed worker, a broken pool):
# the trainer masks such completions out of the loss instead of learning from a zero reward.
PASSED = "passed"
WRONG_ANSWER = "wrong_answer"
SYNTAX_ERROR = "syntax_error"
RUNTIME_ERROR = "runtime_error"
TIMEOUT = "timeout"
MEMORY_LIMIT = "memory_limit"
NO_CODE = "no_code"
FORMAT_ERROR = "format_error"
INTERNAL_ERROR = "internal_error"
# The or_debug task's failure classes (the original experiments' names): a repair that does not
# make the model feasible at its intended optimum, told apart by how much of the conflict it named.
WRONG_FIX = "wrong_fix"  # every conflicting constraint named, the repair wrong
PARTIAL_DIAGNOSIS = "partial_diagnosis"  # some of them named
WRONG_DIAGNOSIS = "wrong_diagnosis"  # none of them named
STATUSES = (
    PASSED,
    WRONG_ANSWER,
    SYNTAX_ERROR,
    RUNTIME_ERROR,
    TIMEOUT,
    MEMORY_LIMIT,
    NO_CODE,
    FORMAT_ERROR,
    INTERNAL_ERROR,
    WRONG_FIX,
    PARTIAL_DIAGNOSIS,
    WRONG_DIAGNOSIS,
)


def to_json_data(value: Any) -> Any:
    """`value` as JSON would give it back: tuples become lists, mapping keys strings.

    Problems are normalised this way when they are built, so a problem generated in memory and
    the same problem read back from a .jsonl file are equal, field for field.
    """
    return json.loads(json.dumps(value))


@dataclass(frozen=True)
class TestCase:
    """One hidden test: call the entry point with `args` (positional) and expect `expected`.

    For problems with a checker, `expected` is one right answer (shown in examples and used by
    checkers that need a reference, such as "same length as the longest palindrome").
    """

    __test__ = False  # not a pytest class

    args: tuple[Any, ...]
    expected: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"args": list(self.args), "expected": self.expected}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TestCase:
        if "args" not in data or not isinstance(data["args"], list):
            raise ValueError("a test needs 'args' as a list")
        return cls(args=tuple(data["args"]), expected=data.get("expected"))


@dataclass(frozen=True)
class Problem:
    """A verifiable problem. JSON form and field meanings: docs/problems.md.

    Exactly one way of checking applies: `tests` (input/output pairs compared in the trusted
    parent, optionally through a named `checker`), `test_code` (assert-style `check(candidate)`,
    the HumanEval convention) or the task's own scorer (Countdown reads `metadata`).
    """

    id: str
    task: str
    difficulty: int
    prompt: str
    entry_point: str | None = None
    signature: str | None = None
    tests: tuple[TestCase, ...] | None = None
    checker: str | None = None
    test_code: str | None = None
    reference_solution: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task": self.task,
            "difficulty": self.difficulty,
            "prompt": self.prompt,
            "entry_point": self.entry_point,
            "signature": self.signature,
            "tests": None if self.tests is None else [t.to_dict() for t in self.tests],
            "checker": self.checker,
            "test_code": self.test_code,
            "reference_solution": self.reference_solution,
            "metadata": dict(self.metadata),
        }

    def to_json(self) -> str:
        # sort_keys off: field order is the documented order; ensure_ascii keeps files byte-stable.
        return json.dumps(self.to_dict(), ensure_ascii=True, separators=(", ", ": "))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Problem:
        missing = [k for k in ("id", "task", "difficulty", "prompt") if k not in data]
        if missing:
            raise ValueError(f"problem is missing field(s): {', '.join(missing)}")
        tests = data.get("tests")
        if tests is not None and not isinstance(tests, list):
            raise ValueError("'tests' must be a list or null")
        difficulty = data["difficulty"]
        if not isinstance(difficulty, int) or isinstance(difficulty, bool):
            raise ValueError("'difficulty' must be an integer")
        return cls(
            id=str(data["id"]),
            task=str(data["task"]),
            difficulty=difficulty,
            prompt=str(data["prompt"]),
            entry_point=data.get("entry_point"),
            signature=data.get("signature"),
            tests=None if tests is None else tuple(TestCase.from_dict(t) for t in tests),
            checker=data.get("checker"),
            test_code=data.get("test_code"),
            reference_solution=data.get("reference_solution"),
            metadata=dict(data.get("metadata") or {}),
        )

    @classmethod
    def from_json(cls, line: str) -> Problem:
        return cls.from_dict(json.loads(line))


@dataclass(frozen=True)
class TestResult:
    """What happened on one test: for the per-test detail of a verdict (truncated text)."""

    __test__ = False

    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class Verdict:
    """The verifier's judgement of one completion.

    `passed`/`total` carry partial credit; `status` says what kind of outcome it was
    (`passed` only when every test passed). `tests` is per-test detail, possibly truncated.
    """

    status: str
    passed: int = 0
    total: int = 0
    time_s: float = 0.0
    detail: str = ""
    tests: tuple[TestResult, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown verdict status {self.status!r}")

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def ok(self) -> bool:
        return self.status == PASSED

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "passed": self.passed,
            "total": self.total,
            "time_s": round(self.time_s, 6),
            "detail": self.detail,
        }
