"""A deterministic, resumable stream of training problems over tasks x difficulties, or over a
file's problems. In a data-parallel run each of the `world` processes (`rank`) draws its own,
disjoint share: the same sequence, every world-th item from its rank on."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from typing import Any

from ..tasks import iter_problems
from ..types import Problem


class ProblemStream:
    """Draws (task, difficulty) pairs with its own seeded RNG and takes the next train problem of
    that pair. Its state (RNG + how many problems each pair has given) goes into checkpoints;
    restoring replays the pairs' sequences, so a resumed run sees the same problems."""

    def __init__(
        self,
        tasks: Sequence[str],
        difficulties: Sequence[int],
        seed: int,
        rank: int = 0,
        split: str = "train",
        world: int = 1,
    ):
        self.pairs = [(t, d) for t in tasks for d in difficulties]
        self.seed, self.split, self.rank, self.world = seed, split, rank, world
        self.rng = random.Random(f"axiom-rl/stream/{seed}/{rank}")
        self.consumed: dict[str, int] = {}
        self._iters: dict[str, Iterator[Problem]] = {}

    @staticmethod
    def _key(task: str, difficulty: int) -> str:
        return f"{task}/{difficulty}"

    def _iterator(self, task: str, difficulty: int) -> Iterator[Problem]:
        key = self._key(task, difficulty)
        if key not in self._iters:
            # Repeats allowed: a long run may see a small problem space many times over. Each
            # rank takes every world-th problem of the pair's one sequence: no two draw the same.
            problems = iter_problems(task, difficulty, seed=self.seed, split=self.split, unique=False)
            self._iters[key] = itertools.islice(problems, self.rank, None, self.world)
            for _ in range(self.consumed.get(key, 0)):  # fast-forward after a restore
                next(self._iters[key])
        return self._iters[key]

    def next(self) -> Problem:
        return self.take_from(*self.rng.choice(self.pairs))

    def take_from(self, task: str, difficulty: int) -> Problem:
        """The next problem of one pair (a source that picks pairs itself draws through this)."""
        problem = next(self._iterator(task, difficulty))
        key = self._key(task, difficulty)
        self.consumed[key] = self.consumed.get(key, 0) + 1
        return problem

    def take(self, n: int) -> list[Problem]:
        return [self.next() for _ in range(n)]

    def state_dict(self) -> dict[str, Any]:
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss], "consumed": dict(self.consumed)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.consumed = {k: int(v) for k, v in state["consumed"].items()}
        self._iters = {}


class FileProblemStream:
    """The problems of a file, in a seeded order reshuffled on every pass over them: the same
    interface as ProblemStream. Every rank shuffles alike and takes every world-th problem of a
    pass (all of them, if the file has fewer problems than there are ranks). Its state is how
    many it has given, so a restore replays the orders (cheap: no problem is generated)."""

    def __init__(self, problems: Sequence[Problem], seed: int, rank: int = 0, world: int = 1) -> None:
        self.problems = list(problems)
        self.seed, self.rank, self.world = seed, rank, world
        self._restart(0)

    def _restart(self, given: int) -> None:
        # One seed for all ranks ("/0": what a single process has always used), so that their
        # shares of a pass are disjoint.
        self.rng = random.Random(f"axiom-rl/file-stream/{self.seed}/0")
        self.given, self._order = 0, []
        for _ in range(given):
            self.next()

    def next(self) -> Problem:
        if not self._order:
            order = list(range(len(self.problems)))
            self.rng.shuffle(order)
            self._order = order[self.rank :: self.world] or order
            self._order.reverse()  # pop() from the end gives the shuffled order
        self.given += 1
        return self.problems[self._order.pop()]

    def take(self, n: int) -> list[Problem]:
        return [self.next() for _ in range(n)]

    def state_dict(self) -> dict[str, Any]:
        return {"given": self.given}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._restart(int(state["given"]))
