"""The reward stage: a batch of verified completions in, rewards out, from named components.

    stage = RewardStage.from_specs(parse_reward_specs("code_execution:1.0,format:0.1"))
    result = stage.score(problems, completions, verdicts)   # rows i = problems[i]'s completion
    result.rewards        # [B*G] weighted sums
    result.components     # [B*G] {component: its unweighted value}, logged separately
    result.steps          # [B*G] weighted step rewards (StepRewards) or None, for process supervision

A component scores the whole batch at once (`RewardComponent.score`), so one that holds a model
(a process reward model, loaded once, on a device of its choosing) runs it batched. Each pure
per-completion reward of rewards.py (REWARDS) is a component as it is (`RowReward`); with no
specs, each problem's task default. A component that gives credit per reasoning step returns,
for the rows that have steps, where each step ends in the completion's text and its value
(`StepRewards`); the stage weighs them like the rest and hands them on, the trainer turns them
into per-token advantages (algorithms.step_advantages). Outcome rewards are what rewards.py's
functions give, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import UserError
from .rewards import REWARDS, RewardSpec
from .types import Problem, Verdict


@dataclass(frozen=True)
class StepRewards:
    """A completion's steps: where each ends (a character offset in its text, increasing) and
    the reward each earned."""

    ends: tuple[int, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.ends) != len(self.values):
            raise ValueError(f"{len(self.ends)} step ends for {len(self.values)} step rewards")
        if any(b <= a for a, b in zip(self.ends, self.ends[1:])) or any(e < 0 for e in self.ends):
            raise ValueError(f"step ends must be increasing offsets, got {self.ends}")

    def scaled(self, weight: float) -> StepRewards:
        return StepRewards(self.ends, tuple(weight * v for v in self.values))


@dataclass
class ComponentScores:
    """What one component says of a batch: a value per row, and for rows it splits into steps,
    their step rewards (None elsewhere; `steps` None when it gives no step credit at all)."""

    rows: list[float]  # [B*G]
    steps: list[StepRewards | None] | None = None  # [B*G]
    # False: `rows` are only logged (a process reward's mean step reward), not added to the reward.
    adds_to_reward: bool = True


class RewardComponent:
    """A named part of the reward, scoring a whole batch. Subclasses implement `score`."""

    name: str = ""

    def score(
        self, problems: Sequence[Problem], completions: Sequence[str], verdicts: Sequence[Verdict]
    ) -> ComponentScores:
        raise NotImplementedError


class RowReward(RewardComponent):
    """A pure reward of rewards.py (REWARDS), row by row."""

    def __init__(self, name: str, params: dict[str, Any] | None = None) -> None:
        self.name, self.fn, self.params = name, REWARDS[name], dict(params or {})

    def score(
        self, problems: Sequence[Problem], completions: Sequence[str], verdicts: Sequence[Verdict]
    ) -> ComponentScores:
        return ComponentScores([self._one(p, c, v) for p, c, v in zip(problems, completions, verdicts)])

    def _one(self, problem: Problem, completion: str, verdict: Verdict) -> float:
        # A user's reward (`module:function`) that raises or returns no number stops the run
        # with one line naming it, not a traceback from inside the trainer.
        try:
            value = float(self.fn(problem, completion, verdict, **self.params))
        except UserError:
            raise
        except Exception as e:
            raise UserError(
                f"reward {self.name!r} failed on problem {problem.id}: {type(e).__name__}: {e}"
            ) from None
        if not math.isfinite(value):
            raise UserError(
                f"reward {self.name!r} returned {value} on problem {problem.id}: rewards must be finite"
            )
        return value


# Components made by name (besides REWARDS' pure functions): name -> factory(**params).
COMPONENTS: dict[str, Callable[..., RewardComponent]] = {}


def register_component(
    name: str,
) -> Callable[[Callable[..., RewardComponent]], Callable[..., RewardComponent]]:
    def deco(factory: Callable[..., RewardComponent]) -> Callable[..., RewardComponent]:
        COMPONENTS[name] = factory
        return factory

    return deco


def make_component(spec: RewardSpec) -> RewardComponent:
    if spec.name in COMPONENTS:
        component = COMPONENTS[spec.name](**dict(spec.params))
        component.name = spec.name
        return component
    if spec.name in REWARDS:
        return RowReward(spec.name, dict(spec.params))
    raise UserError(
        f"unknown reward {spec.name!r}; choose from: {', '.join(sorted({*REWARDS, *COMPONENTS}))}"
    )


@dataclass
class StageResult:
    rewards: list[float]  # [B*G]
    components: list[dict[str, float]]  # [B*G]
    steps: list[StepRewards | None] = field(default_factory=list)  # [B*G], weighted
    # The weights of the components that gave steps, summed: the trainer scales the process term of
    # the advantages by it (normalising the step rewards in their group would cancel any weight).
    step_weight: float = 0.0

    @property
    def has_steps(self) -> bool:
        return any(s is not None for s in self.steps)


class RewardStage:
    """Components with their weights; `score` gives every row's weighted reward, each
    component's value, and the rows' weighted step rewards (merged over the components that give
    them, steps ending at the same offset added)."""

    def __init__(self, weighted: Sequence[tuple[RewardComponent, float]] | None) -> None:
        self.weighted = list(weighted) if weighted is not None else None  # None: each task's default

    @classmethod
    def from_specs(cls, specs: Sequence[RewardSpec] | None) -> RewardStage:
        if specs is None:
            return cls(None)
        return cls([(make_component(s), s.weight) for s in specs])

    def score(
        self, problems: Sequence[Problem], completions: Sequence[str], verdicts: Sequence[Verdict]
    ) -> StageResult:
        if not len(problems) == len(completions) == len(verdicts):
            raise ValueError("problems, completions and verdicts differ in length")
        if self.weighted is None:
            return self._task_defaults(problems, completions, verdicts)
        n = len(problems)
        rewards, components = [0.0] * n, [{} for _ in range(n)]
        merged: list[dict[int, float] | None] = [None] * n
        step_weight = 0.0
        for component, weight in self.weighted:
            scores = component.score(problems, completions, verdicts)
            if len(scores.rows) != n or (scores.steps is not None and len(scores.steps) != n):
                raise ValueError(f"reward component {component.name!r} scored {len(scores.rows)} rows of {n}")
            for i, value in enumerate(scores.rows):
                components[i][component.name] = float(value)
                if scores.adds_to_reward:
                    rewards[i] += weight * float(value)
            if scores.steps is not None:
                step_weight += weight
            for i, steps in enumerate(scores.steps or ()):
                if steps is None:
                    continue
                row = merged[i] if merged[i] is not None else {}
                for end, value in zip(steps.ends, steps.values):
                    row[end] = row.get(end, 0.0) + weight * value
                merged[i] = row
        steps_out = [
            None if m is None else StepRewards(tuple(sorted(m)), tuple(m[e] for e in sorted(m)))
            for m in merged
        ]
        return StageResult(rewards, components, steps_out, step_weight)

    @staticmethod
    def _task_defaults(
        problems: Sequence[Problem], completions: Sequence[str], verdicts: Sequence[Verdict]
    ) -> StageResult:
        from .tasks import get_task

        rewards, components = [], []
        for p, c, v in zip(problems, completions, verdicts):
            name = get_task(p.task).default_reward
            value = float(REWARDS[name](p, c, v))
            rewards.append(value)
            components.append({name: value})
        return StageResult(rewards, components, [None] * len(problems))


# The process rewards (oracle_steps, prm) and the proposer's (learnability) register themselves
# as components.
from .prm import components as _process_rewards  # noqa: E402,F401
from .selfplay import proposer as _proposer_reward  # noqa: E402,F401
