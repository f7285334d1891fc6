"""Reward functions for TRL's GRPOTrainer, backed by axiom-rl's verifier, rewards and sandbox.

    from axiom_rl.integrations.hf_datasets import to_dataset
    from axiom_rl.integrations.trl import VerifiedReward

    with VerifiedReward() as reward:                       # one sandbox for the trainer's life
        trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=to_dataset(problems))
        trainer.train()

TRL calls a reward function with `prompts`, `completions`, `completion_ids` and each dataset
column as a keyword, one entry per completion; ours reads the `problem` column (the problem's
JSON, which `to_dataset` and `axiom-rl problems export --format hf` write). The reward of each
completion is the one `axiom-rl verify` gives it. Conversational completions (lists of messages)
are scored on their assistant text. Each call also logs, through TRL's `log_metric`, the share
of completions that passed and each reward component's mean.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from ..types import PASSED
from .scoring import Scorer, completion_text, problem_from_json


class VerifiedReward:
    """A TRL reward function (a callable with TRL's signature) that scores completions with
    axiom-rl's verifier and reward (`rewards`: a `--rewards` spec, default each task's own).

    `workers`: sandbox slots (default one per core); `timeout`: CPU seconds per submission.
    Use it as a context manager, or call close(), to end its sandbox (it also ends at exit).
    `as_async()` gives the same reward as a coroutine function, which TRL runs beside other
    async reward functions while this one waits for the sandbox."""

    def __init__(
        self,
        rewards: str | None = None,
        workers: int | None = None,
        timeout: float | None = None,
        name: str = "axiom_rl",
    ) -> None:
        self.scorer = Scorer(rewards, workers, timeout)
        self.__name__ = name  # TRL logs rewards/<name>/mean

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] = (),
        completion_ids: Any = None,
        problem: Sequence[str] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        **columns: Any,
    ) -> list[float]:
        if problem is None:
            raise ValueError(
                "the dataset has no 'problem' column: make it with axiom_rl.integrations.hf_datasets.to_dataset "
                "or `axiom-rl problems export --format hf`"
            )
        if len(problem) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(problem)} problems")
        problems = [problem_from_json(p) for p in problem]
        texts = [completion_text(c) for c in completions]
        scored = self.scorer.score(problems, texts)
        if log_metric is not None and scored:
            n = len(scored)
            log_metric(f"{self.__name__}/pass_rate", sum(s.verdict.status == PASSED for s in scored) / n)
            values: dict[str, list[float]] = {}  # tasks of a batch may have different defaults
            for s in scored:
                for component, value in s.components.items():
                    values.setdefault(component, []).append(value)
            for component, vs in values.items():
                log_metric(f"{self.__name__}/{component}", sum(vs) / len(vs))
        return [s.reward for s in scored]

    def as_async(self) -> Callable[..., Any]:
        """This reward as `async def`, TRL's async reward-function form: the scoring runs in a
        thread, so TRL's event loop runs other async reward functions meanwhile."""

        async def reward(**kwargs: Any) -> list[float]:
            return await asyncio.to_thread(self, **kwargs)

        reward.__name__ = self.__name__
        return reward

    def close(self) -> None:
        self.scorer.close()

    def __enter__(self) -> VerifiedReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
