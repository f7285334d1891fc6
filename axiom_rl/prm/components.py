"""Process rewards as reward-stage components.

    --rewards countdown:1.0,oracle_steps:0.5              the exact step labels (Countdown)
    --rewards countdown:1.0,prm:0.5 --prm runs/prm        a trained process reward model

Each has a mode (`--prm-mode`):
- process (default): per-step rewards into token-level advantages (process supervision as
  DeepSeekMath defines it, algorithms.step_advantages), added to the outcome advantage and scaled
  by the component's weight; the row's logged value is its mean step reward, which is not added
  to the outcome reward.
- min, mean, last: the outcome reward gets weight x that aggregate of the step rewards (0 for a
  completion without steps), as in PRM reranking.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from ..errors import UserError
from ..reward_stage import ComponentScores, RewardComponent, StepRewards, register_component
from ..types import Problem, Verdict
from .steps import has_steps, split_steps

MODES = ("process", "min", "mean", "last")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise UserError(f"process reward mode must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def aggregate(values: Sequence[float], mode: str) -> float:
    if not values:
        return 0.0
    if mode == "min":
        return min(values)
    if mode == "last":
        return values[-1]
    return statistics.fmean(values)


def step_scores(
    ends: Sequence[Sequence[int]], values: Sequence[Sequence[float]], mode: str
) -> ComponentScores:
    """A component's scores from each row's step ends and rewards, in `mode`."""
    if mode == "process":
        return ComponentScores(
            [aggregate(v, "mean") for v in values],
            [StepRewards(tuple(e), tuple(v)) if e else None for e, v in zip(ends, values)],
            adds_to_reward=False,
        )
    return ComponentScores([aggregate(v, mode) for v in values])


@register_component("oracle_steps")
class OracleSteps(RewardComponent):
    """The verifier's exact step labels (labels.exact_labels: Countdown's 1 good / 0 bad, or_debug's
    solver labels) as step rewards: what a perfect process reward model would give, where it is
    cheap to know. Other tasks' completions get no steps and 0."""

    def __init__(self, mode: str = "process") -> None:
        self.mode = check_mode(mode)

    def score(
        self, problems: Sequence[Problem], completions: Sequence[str], verdicts: Sequence[Verdict]
    ) -> ComponentScores:
        from .labels import EXACTLY_LABELLED, exact_labels

        ends, values = [], []
        for problem, completion in zip(problems, completions):
            if problem.task not in EXACTLY_LABELLED:
                ends.append(())
                values.append(())
                continue
            steps = split_steps(problem, completion)
            ends.append(tuple(s.end for s in steps))
            values.append(tuple(exact_labels(problem, completion, steps) or ()))
        return step_scores(ends, values, self.mode)


@register_component("prm")
class LearnedSteps(RewardComponent):
    """A trained process reward model's step scores (axiom-rl prm train), loaded once, on the CPU."""

    def __init__(self, path: str | None = None, mode: str = "process", batch_size: int = 64) -> None:
        from .model import check_prm_dir

        if not path:
            raise UserError(
                "the prm reward needs a process reward model: --prm DIR (made by `axiom-rl prm train`)"
            )
        check_prm_dir(path)
        self.path, self.mode, self.batch_size = path, check_mode(mode), batch_size
        self._model: Any = None

    def score(
        self, problems: Sequence[Problem], completions: Sequence[str], verdicts: Sequence[Verdict]
    ) -> ComponentScores:
        from .model import ProcessRewardModel

        if self._model is None:
            self._model = ProcessRewardModel.load(self.path)
        ends = [
            tuple(s.end for s in split_steps(p, c)) if has_steps(p.task) else ()
            for p, c in zip(problems, completions)
        ]
        values = self._model.score(problems, completions, ends, self.batch_size)
        return step_scores(ends, values, self.mode)
