"""Sources that follow the model's success: train where the signal is.

GRPO learns nothing from a group whose completions all score alike, and a problem the model always
solves (or never does) gives such groups. These sources watch each (task, difficulty) pair's pass
rate through `observe` and draw where it is neither 0 nor 1:

    learnability  samples a pair in proportion to p(1 - p), p its rolling pass rate, with a floor
                  so that no pair starves (the learnability of Foster & Foerster 2025, "Learning
                  to Reason at the Frontier of Learnability", arXiv 2502.12272: p(1 - p) is the
                  variance of a pass/fail reward, the signal a group can carry)
    schedule      the run's difficulties in turn, easiest first, `every` problems each (a ramp
                  fixed in advance, the baseline the adaptive ones are measured against)
    failures      replays the problems of a failures file (`axiom-rl failures collect`: what an
                  evaluated model failed), mixed with fresh problems of the run's tasks so that
                  the rest is not forgotten (the original experiments' "GRPO only on what SFT fails")
    adaptive      per task, one difficulty at a time, moved up when the pass rate over a window
                  of problems is above a band and down when below it (AdaRFT, Shi et al. 2025,
                  arXiv 2504.05520, keeps a target success rate the same way)

Both draw each pair's problems from the same seeded sequences as `uniform` (ProblemStream), so a
pair's k-th problem is the same whichever source asked for it; their choices come from a seeded
RNG of their own, and their estimates are part of their checkpointed state.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from ..errors import UserError
from ..train.problems import FileProblemStream, ProblemStream
from ..types import Problem
from .base import Outcome, Source, SourceContext, register_source


def _pair_key(task: str, difficulty: int) -> str:
    return f"{task}/{difficulty}"


class PairSource(Source):
    """A source that picks (task, difficulty) pairs itself, with the seeded RNG of the stream it
    takes each pair's next generated problem from; the stream's state (that RNG, and what it has
    taken) is its state, besides whatever its subclass keeps."""

    def __init__(self, context: SourceContext) -> None:
        super().__init__(context)
        if context.problems is not None:
            raise UserError(
                f"problem source {self.name!r} draws generated problems: not with --problems-file"
            )
        self.pairs = [(t, d) for t in context.tasks for d in context.difficulties]
        self.stream = ProblemStream(
            context.tasks, context.difficulties, context.seed, rank=context.rank, world=context.world
        )
        self.rng = self.stream.rng  # one seeded RNG for the picks, saved with the stream

    def pick(self) -> tuple[str, int]:
        raise NotImplementedError

    def next_batch(self, n: int) -> list[Problem]:
        return [self.stream.take_from(*self.pick()) for _ in range(n)]

    def state_dict(self) -> dict[str, Any]:
        return {"stream": self.stream.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.load_state_dict(state["stream"])


def reward_variance(outcome: Outcome) -> float:
    """The population variance of a group's rewards: what a group-relative update learns from (0
    when they are all equal; p(1 - p) for pass/fail rewards passed with probability p)."""
    return statistics.pvariance(outcome.rewards) if outcome.rewards else 0.0


class InformativeReplay:
    """Problems whose last group's rewards differed, kept to be drawn again in proportion to that
    variance: a problem the model sometimes solves is one its next group will likely still split
    on, where a fresh problem may be one it always or never solves. Each is drawn at most `uses`
    times; one whose group comes back all alike leaves; past `size` problems the least
    informative goes (the oldest of equals). Sampling for learnability from a buffer of
    high-learnability problems mixed with fresh ones, as Rutherford et al. 2024 (SFL) and Foster &
    Foerster 2025 (arXiv 2502.12272) do."""

    def __init__(self, size: int, uses: int) -> None:
        self.size, self.uses = size, uses
        self.entries: list[dict[str, Any]] = []  # {"problem", "variance", "drawn"}, oldest first

    def draw(self, rng: Any, n: int) -> list[Problem]:
        """Up to n distinct problems, in proportion to their variance (fewer when it holds fewer)."""
        pool = list(range(len(self.entries)))
        chosen: list[int] = []
        while pool and len(chosen) < n:
            pick = rng.choices(pool, weights=[self.entries[i]["variance"] for i in pool])[0]
            pool.remove(pick)
            chosen.append(pick)
        for i in chosen:
            self.entries[i]["drawn"] += 1
        return [self.entries[i]["problem"] for i in chosen]

    def observe(self, outcome: Outcome) -> None:
        variance = reward_variance(outcome)
        index = next((i for i, e in enumerate(self.entries) if e["problem"].id == outcome.problem.id), None)
        if index is not None:
            entry = self.entries[index]
            if variance == 0.0 or entry["drawn"] >= self.uses:
                del self.entries[index]
            else:
                entry["variance"] = variance
            return
        if variance > 0.0 and self.uses > 0:
            self.entries.append({"problem": outcome.problem, "variance": variance, "drawn": 0})
            if len(self.entries) > self.size:
                weakest = min(range(len(self.entries)), key=lambda i: self.entries[i]["variance"])
                del self.entries[weakest]

    def state_dict(self) -> list[dict[str, Any]]:
        return [{**e, "problem": e["problem"].to_dict()} for e in self.entries]

    def load_state_dict(self, state: list[dict[str, Any]]) -> None:
        self.entries = [
            {
                "problem": Problem.from_dict(e["problem"]),
                "variance": float(e["variance"]),
                "drawn": int(e["drawn"]),
            }
            for e in state
        ]


@register_source("learnability")
class LearnabilitySource(PairSource):
    """Pairs drawn in proportion to max(p(1 - p), floor), p each pair's pass rate: an exponential
    moving average of its problems' pass rates (`decay` the weight of the past; `prior` before the
    first). With p = 0.5 everywhere at the start every pair is equally likely; a pair the model
    always solves or always fails keeps `floor` (relative to the 0.25 of p = 0.5), so it is still
    seen and its estimate can recover.

    With `replay` > 0, that share of each batch is drawn again from the problems already seen
    whose rewards differed (InformativeReplay: up to `buffer` of them, each at most `uses` times),
    the rest fresh as above."""

    def __init__(
        self,
        context: SourceContext,
        decay: float = 0.8,
        floor: float = 0.02,
        prior: float = 0.5,
        replay: float = 0.0,
        buffer: int = 256,
        uses: int = 4,
    ) -> None:
        super().__init__(context)
        if not 0.0 <= decay < 1.0:
            raise UserError(f"learnability's decay must be in [0, 1), got {decay}")
        if not 0.0 < floor <= 0.25:
            raise UserError(f"learnability's floor must be in (0, 0.25], got {floor}")
        if not 0.0 <= prior <= 1.0:
            raise UserError(f"learnability's prior must be in [0, 1], got {prior}")
        if not 0.0 <= replay < 1.0:
            raise UserError(f"learnability's replay must be in [0, 1), got {replay}")
        if buffer < 1 or uses < 1:
            raise UserError(f"learnability's buffer and uses must be >= 1, got {buffer} and {uses}")
        self.decay, self.floor, self.replay = decay, floor, replay
        self.estimates = {_pair_key(t, d): prior for t, d in self.pairs}
        self.replayed = InformativeReplay(buffer, uses)
        self.drawn_again = 0  # problems of the last batch drawn from the replay buffer
        # Drawn again and not observed yet: their outcomes do not move the pairs' estimates,
        # which describe fresh problems (a replayed problem was chosen for splitting its group).
        self.awaited: set[str] = set()

    def weights(self) -> list[float]:
        """Each pair's weight, in the order of `pairs`."""
        return [
            max(p * (1.0 - p), self.floor) for p in (self.estimates[_pair_key(*pair)] for pair in self.pairs)
        ]

    def pick(self) -> tuple[str, int]:
        return self.rng.choices(self.pairs, weights=self.weights())[0]

    def next_batch(self, n: int) -> list[Problem]:
        again = sum(self.rng.random() < self.replay for _ in range(n)) if self.replay else 0
        batch = self.replayed.draw(self.rng, again)
        self.drawn_again = len(batch)
        self.awaited.update(p.id for p in batch)
        return batch + [self.stream.take_from(*self.pick()) for _ in range(n - len(batch))]

    def observe(self, results: Sequence[Outcome]) -> None:
        for outcome in results:
            key = _pair_key(outcome.problem.task, outcome.problem.difficulty)
            if outcome.problem.id in self.awaited:
                self.awaited.discard(outcome.problem.id)
            elif key in self.estimates:
                self.estimates[key] = (
                    self.decay * self.estimates[key] + (1.0 - self.decay) * outcome.pass_rate
                )
            if self.replay:
                self.replayed.observe(outcome)

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "estimates": dict(self.estimates),
            "replayed": self.replayed.state_dict(),
            "awaited": sorted(self.awaited),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.estimates.update({k: float(v) for k, v in state["estimates"].items() if k in self.estimates})
        self.replayed.load_state_dict(state.get("replayed", []))
        self.awaited = {str(i) for i in state.get("awaited", [])}

    def metrics(self) -> dict[str, float]:
        total = sum(self.weights())
        figures: dict[str, float] = {}
        for pair, weight in zip(self.pairs, self.weights()):
            key = _pair_key(*pair)
            figures[f"pass_rate/{key}"] = self.estimates[key]
            figures[f"share/{key}"] = weight / total
        if self.replay:
            figures["replay/buffer"] = float(len(self.replayed.entries))
            figures["replay/drawn"] = float(self.drawn_again)
        return figures


@register_source("schedule")
class ScheduleSource(PairSource):
    """The run's difficulties in turn, easiest first: the first `every` problems drawn at the
    lowest, the next `every` at the next, and the hardest from then on; tasks drawn uniformly.
    Problems, not steps, are counted (a step draws prompts_per_step of them, a refill more), so
    `every` = 16 x prompts_per_step moves up every 16 rollouts."""

    def __init__(self, context: SourceContext, every: int = 64) -> None:
        super().__init__(context)
        if every < 1:
            raise UserError(f"schedule's every must be >= 1, got {every}")
        self.every = every
        self.levels = sorted(set(context.difficulties))
        self.drawn = 0

    def difficulty(self) -> int:
        return self.levels[min(self.drawn // self.every, len(self.levels) - 1)]

    def pick(self) -> tuple[str, int]:
        pair = (self.rng.choice(self.context.tasks), self.difficulty())
        self.drawn += 1
        return pair

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "drawn": self.drawn}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.drawn = int(state["drawn"])

    def metrics(self) -> dict[str, float]:
        return {"difficulty": float(self.difficulty())}


@register_source("adaptive")
class AdaptiveSource(PairSource):
    """Each task at one difficulty at a time (`start`, or the run's lowest), its tasks drawn
    uniformly. After `window` problems of a task at its difficulty, their mean pass rate decides:
    above `high`, the task moves to the next harder of the run's difficulties; below `low`, to the
    next easier; inside the band it stays. The window then starts again."""

    def __init__(
        self,
        context: SourceContext,
        low: float = 0.3,
        high: float = 0.7,
        window: int = 8,
        start: int | None = None,
    ) -> None:
        super().__init__(context)
        if not 0.0 <= low < high <= 1.0:
            raise UserError(f"adaptive's band must satisfy 0 <= low < high <= 1, got low={low}, high={high}")
        if window < 1:
            raise UserError(f"adaptive's window must be >= 1, got {window}")
        self.levels = sorted(set(context.difficulties))
        if start is not None and start not in self.levels:
            raise UserError(f"adaptive's start {start} is not one of the run's difficulties {self.levels}")
        self.low, self.high, self.window = low, high, window
        first = self.levels.index(start) if start is not None else 0
        self.level = {t: first for t in context.tasks}  # index into levels, per task
        self.seen: dict[str, list[float]] = {t: [] for t in context.tasks}  # pass rates this window

    def pick(self) -> tuple[str, int]:
        task = self.rng.choice(self.context.tasks)
        return task, self.levels[self.level[task]]

    def observe(self, results: Sequence[Outcome]) -> None:
        for outcome in results:
            task = outcome.problem.task
            if task not in self.level or outcome.problem.difficulty != self.levels[self.level[task]]:
                continue  # drawn before the task last moved: not this level's evidence
            window = self.seen[task]
            window.append(outcome.pass_rate)
            if len(window) < self.window:
                continue
            rate = sum(window) / len(window)
            if rate > self.high:
                self.level[task] = min(self.level[task] + 1, len(self.levels) - 1)
            elif rate < self.low:
                self.level[task] = max(self.level[task] - 1, 0)
            window.clear()

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "level": dict(self.level),
            "seen": {t: list(v) for t, v in self.seen.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.level.update({t: int(v) for t, v in state["level"].items() if t in self.level})
        self.seen.update({t: [float(x) for x in v] for t, v in state["seen"].items() if t in self.seen})

    def metrics(self) -> dict[str, float]:
        figures: dict[str, float] = {}
        for task, index in self.level.items():
            figures[f"difficulty/{task}"] = float(self.levels[index])
            window = self.seen[task]
            if window:
                figures[f"window_pass_rate/{task}"] = sum(window) / len(window)
        return figures


@register_source("failures")
class FailuresSource(PairSource):
    """The problems of `file` (a failures file, or any problems file), reshuffled each pass, each
    draw a fresh problem of the run's tasks and difficulties instead with probability `fresh`.
    Reports the share of replayed problems that passed so far (`replay_pass_rate`) beside the
    fresh ones' (`fresh_pass_rate`): learning the one, forgetting the other."""

    def __init__(self, context: SourceContext, file: str = "", fresh: float = 0.25) -> None:
        super().__init__(context)
        from ..verify_files import read_problems_file, unverified_references

        if not file:
            raise UserError(
                "problem source 'failures' needs file: a failures file (axiom-rl failures collect)"
            )
        if not 0.0 <= fresh < 1.0:
            raise UserError(f"failures' fresh must be in [0, 1), got {fresh}")
        self.fresh = fresh
        problems = read_problems_file(file)
        broken = unverified_references(problems)
        if broken:
            (problem, verdict), more = broken[0], len(broken) - 1
            raise UserError(
                f"{file}: problem {problem.id!r} does not verify: its reference solution gets"
                f" {verdict.status}" + (f" (and {more} more problems)" if more else "")
            )
        self.replayed = FileProblemStream(problems, context.seed, context.rank, context.world)
        self.replay_ids: set[str] = {p.id for p in self.replayed.problems}
        self.passed = {"replay": 0.0, "fresh": 0.0}
        self.seen = {"replay": 0, "fresh": 0}

    def next_batch(self, n: int) -> list[Problem]:
        return [
            self.stream.take_from(
                self.rng.choice(self.context.tasks), self.rng.choice(self.context.difficulties)
            )
            if self.rng.random() < self.fresh
            else self.replayed.next()
            for _ in range(n)
        ]

    def observe(self, results: Sequence[Outcome]) -> None:
        for outcome in results:
            kind = "replay" if outcome.problem.id in self.replay_ids else "fresh"
            self.passed[kind] += outcome.pass_rate
            self.seen[kind] += 1

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "replayed": self.replayed.state_dict(), "passed": dict(self.passed),
                "seen": dict(self.seen)}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.replayed.load_state_dict(state["replayed"])
        self.passed = {k: float(state["passed"][k]) for k in self.passed}
        self.seen = {k: int(state["seen"][k]) for k in self.seen}

    def metrics(self) -> dict[str, float]:
        return {
            f"{kind}_pass_rate": self.passed[kind] / self.seen[kind] for kind in self.seen if self.seen[kind]
        }
