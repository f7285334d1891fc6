"""Verdicts and rewards for completions that arrive without our trainer: from TRL, verl, the
`verifiers` library or an HTTP request. The problem travels with each completion as its JSON
(a dataset column); it is parsed here as any file a user is handed is: bounded, validated, never
evaluated. One sandbox serves a scorer for its whole life, started when a problem first needs it
(Countdown and or_debug need none) and closed with the scorer."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from ..reward_stage import RewardStage
from ..rewards import parse_reward_specs
from ..sandbox import Sandbox
from ..tasks import get_task
from ..types import Problem, Verdict
from ..verifier import verify_many
from ..verify_files import checked_problem

# A problem's JSON, as a dataset column holds it: HumanEval's longest is ~6 KB, a code task's
# with 8 tests a few KB; 4 MiB leaves room for imported benchmarks with large tests.
MAX_PROBLEM_CHARS = 4 * 2**20


@lru_cache(maxsize=8192)  # a dataset's problems come back G times a step, and again each epoch
def problem_from_json(text: str) -> Problem:
    """The problem a dataset's `problem` column holds; ValueError naming what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"the problem column must hold a problem's JSON text, got {type(text).__name__}")
    if len(text) > MAX_PROBLEM_CHARS:
        raise ValueError(f"a problem's JSON is {len(text)} characters, over the {MAX_PROBLEM_CHARS} allowed")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"the problem column is not JSON ({e})") from None
    return checked_problem(value)


def completion_text(completion: Any) -> str:
    """The text of a completion as trainers pass it: a string, or (conversational) a list of
    messages whose assistant turns are the completion."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, list) and all(isinstance(m, dict) for m in completion):
        return "".join(
            str(m.get("content") or "") for m in completion if m.get("role", "assistant") == "assistant"
        )
    raise ValueError(f"a completion must be text or a list of messages, got {type(completion).__name__}")


@dataclass(frozen=True)
class Scored:
    """One completion's verdict and reward (with each reward component's unweighted value)."""

    verdict: Verdict
    reward: float
    components: dict[str, float]


class Scorer:
    """Scores completions against problems with axiom-rl's verifier and rewards.

    `rewards`: a reward spec as `--rewards` takes ("code_execution:1,format:0.1"; None: each
    task's default); `workers`: sandbox slots (default one per core); `timeout`: CPU seconds per
    submission (default the task's); `sandbox`: a started pool to use instead of one of its own
    (the caller's to close). Thread-safe; close() ends its own sandbox (which also ends at exit)."""

    def __init__(
        self,
        rewards: str | None = None,
        workers: int | None = None,
        timeout: float | None = None,
        sandbox: Sandbox | None = None,
    ):
        self.stage = RewardStage.from_specs(parse_reward_specs(rewards))
        self.workers, self.timeout = workers, timeout
        self._sandbox, self._own_sandbox = sandbox, sandbox is None
        self._lock = threading.Lock()
        self._closed = False

    def sandbox_for(self, problems: Sequence[Problem]) -> Sandbox | None:
        """The scorer's sandbox, started now if these problems are the first to run code."""
        if not any(get_task(p.task).runs_code for p in problems):
            return None
        with self._lock:
            if self._closed:
                raise RuntimeError("this scorer is closed")
            if self._sandbox is None:
                self._sandbox = Sandbox(workers=self.workers).start()
            return self._sandbox

    def score(
        self, problems: Sequence[Problem], completions: Sequence[str], timeout: float | None = None
    ) -> list[Scored]:
        """completions[i] scored against problems[i] (`timeout`: this call's, else the scorer's)."""
        timeout = self.timeout if timeout is None else timeout
        verdicts = verify_many(problems, completions, self.sandbox_for(problems), timeout=timeout)
        stage = self.stage.score(problems, completions, verdicts)
        return [Scored(v, r, c) for v, r, c in zip(verdicts, stage.rewards, stage.components)]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._sandbox is not None and self._own_sandbox:
                self._sandbox.close()
                self._sandbox = None

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@cache
def process_scorer() -> Scorer:
    """This process's scorer, for callers that get no object to hold one (verl's reward function,
    a verifiers task): made on first use, its sandbox started when a code problem first needs it
    and closed at exit. (Two threads racing here may make two; neither holds a sandbox yet.)"""
    return Scorer()
