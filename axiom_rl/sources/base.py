"""The problem source protocol, its registry, and what a source observes."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from ..types import Problem, Verdict


@dataclass(frozen=True)
class Outcome:
    """One problem of a batch after scoring: its G completions, their verdicts and rewards."""

    problem: Problem
    completions: tuple[str, ...]  # [G]
    verdicts: tuple[Verdict, ...]  # [G]
    rewards: tuple[float, ...]  # [G]

    @property
    def pass_rate(self) -> float:
        """The share of the completions that passed every test."""
        return sum(v.ok for v in self.verdicts) / max(1, len(self.verdicts))


def outcomes(
    problems: Sequence[Problem],
    completions: Sequence[str],
    verdicts: Sequence[Verdict],
    rewards: Sequence[float],
) -> list[Outcome]:
    """Outcomes of B problems from their B*G rows, prompt-major (row i*G + j is problem i's j-th)."""
    g = len(completions) // max(1, len(problems))
    if g * len(problems) != len(completions) or not (len(completions) == len(verdicts) == len(rewards)):
        raise ValueError(
            f"{len(problems)} problems do not split {len(completions)} completions, "
            f"{len(verdicts)} verdicts and {len(rewards)} rewards into groups"
        )
    return [
        Outcome(p, tuple(completions[i * g : (i + 1) * g]), tuple(verdicts[i * g : (i + 1) * g]),
                tuple(rewards[i * g : (i + 1) * g]))
        for i, p in enumerate(problems)
    ]  # fmt: skip


@dataclass(frozen=True)
class SourceContext:
    """What the trainer knows when it makes a source: the run's tasks and difficulties (or a
    file's problems), its seed, and this process's rank among `world` data-parallel ranks (each
    must draw its own, disjoint share)."""

    tasks: tuple[str, ...]
    difficulties: tuple[int, ...]
    seed: int = 0
    rank: int = 0
    world: int = 1
    problems: tuple[Problem, ...] | None = None  # a --problems-file's


class Source:
    """Base class of problem sources. Subclasses implement `next_batch`, and keep whatever state
    decides their draws in `state_dict` (JSON data: it goes into the checkpoint's
    trainer_state.json). A source must be deterministic under its context's seed: a resumed run
    draws exactly what an uninterrupted one would."""

    name: str = ""

    def __init__(self, context: SourceContext) -> None:
        self.context = context

    def next_batch(self, n: int) -> list[Problem]:
        """The next `n` problems to train on."""
        raise NotImplementedError

    def observe(self, results: Sequence[Outcome]) -> None:
        """Every problem it gave, scored: called once per rollout (a refill of flat groups too),
        in the order the problems were drawn. The base class ignores them."""

    def state_dict(self) -> dict[str, Any]:
        """What decides the next draws, as JSON data."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""

    def metrics(self) -> dict[str, float]:
        """Figures for this step's row of metrics.jsonl (each written as `source/<name>`)."""
        return {}


SOURCES: dict[str, type[Source]] = {}


def register_source(name: str) -> Callable[[type[Source]], type[Source]]:
    def deco(cls: type[Source]) -> type[Source]:
        cls.name = name
        SOURCES[name] = cls
        return cls

    return deco


def make_source(spec: dict[str, Any], context: SourceContext) -> Source:
    """The source a config's `source:` section names ({name: ..., and its parameters}); an empty
    section means 'file' for a run on a problems file, else 'uniform'. Unknown names and
    parameters are one-line errors that list the choices."""
    params = dict(spec)
    name = params.pop("name", None) or ("file" if context.problems is not None else "uniform")
    if name not in SOURCES:
        raise UserError(f"unknown problem source {name!r}; choose from: {', '.join(sorted(SOURCES))}")
    cls = SOURCES[name]
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "context")]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise UserError(
            f"problem source {name!r} does not take {', '.join(unknown)}; it takes: {', '.join(accepted) or 'nothing'}"
        )
    return cls(context, **params)
