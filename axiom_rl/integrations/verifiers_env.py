"""axiom-rl's tasks as an environment of the `verifiers` library (prime-rl's environments).

A verifiers taskset whose tasks are axiom-rl problems, scored by axiom-rl's verifier. verifiers
imports a taskset by a top-level name: axiom-rl installs this one as `axiom_rl_verifiers` (id
`axiom-rl-verifiers`), so prime-rl and `vf-eval` load it by that name once axiom-rl is installed:

    vf-eval axiom-rl-verifiers --env.taskset.tasks countdown,edit_distance

or from Python:

    import verifiers.v1 as vf
    from axiom_rl.integrations.verifiers_env import AxiomTasksetConfig
    taskset = vf.load_taskset(AxiomTasksetConfig(id="axiom-rl-verifiers", tasks="countdown"))

Each task's prompt is the problem's (one user message); its reward `verified` is the reward
`axiom-rl verify` gives the agent's last reply (code run in axiom-rl's sandbox, one pool per
process), with `passed` (1.0 when every test passed) as a metric beside it. `validate` checks that
a problem's reference solution passes its own tests. Needs `verifiers` 0.4 (its v1 API).
"""

from __future__ import annotations

import asyncio
from typing import Any

import verifiers.v1 as vf

from axiom_rl.integrations.scoring import problem_from_json, process_scorer
from axiom_rl.tasks import generate_mixed, get_task, parse_task_list
from axiom_rl.tasks.generate import parse_range
from axiom_rl.types import PASSED

__all__ = ["AxiomData", "AxiomTask", "AxiomTaskset", "AxiomTasksetConfig"]


class AxiomData(vf.TaskData):
    """One problem: the prompt the agent sees, and the problem's JSON for the verifier."""

    problem: str = ""
    """The problem as a problems file holds it (tests and reference solution included: the
    agent sees only `prompt`)."""


class AxiomTask(vf.Task[AxiomData]):
    """An axiom-rl problem; rewarded by axiom-rl's verifier."""

    def _score(self, reply: str) -> Any:
        """The reply's verdict and reward, verified once for both the metric and the reward
        (the group's rollouts of this task share it: kept by reply text, the last 64)."""
        cache = self.__dict__.setdefault("_scored", {})
        if reply not in cache:
            problem = problem_from_json(self.data.problem)
            if len(cache) >= 64:
                cache.pop(next(iter(cache)))
            cache[reply] = process_scorer().score([problem], [reply])[0]
        return cache[reply]

    @vf.reward(weight=1.0)
    async def verified(self, trace: vf.Trace) -> float:
        """The reward `axiom-rl verify` gives the agent's last reply."""
        scored = await asyncio.to_thread(self._score, trace.last_reply)
        trace.info["axiom_rl"] = {"status": scored.verdict.status, "passed": scored.verdict.passed,
                                  "total": scored.verdict.total, "detail": scored.verdict.detail}  # fmt: skip
        return scored.reward

    @vf.metric
    async def passed(self, trace: vf.Trace) -> float:
        """1.0 when every test passed."""
        scored = await asyncio.to_thread(self._score, trace.last_reply)
        return float(scored.verdict.status == PASSED)

    async def validate(self, runtime: Any) -> bool | None:
        """Whether the problem's reference solution passes its own tests (None: it has none)."""
        problem = problem_from_json(self.data.problem)
        if problem.reference_solution is None:
            return None
        reference = get_task(problem.task).reference_completion(problem)
        scored = await asyncio.to_thread(process_scorer().score, [problem], [reference])
        return scored[0].verdict.status == PASSED


class AxiomTasksetConfig(vf.TasksetConfig):
    """Which problems: generated ones (`tasks`, `difficulty`, `count` per task and difficulty,
    `seed`, `split`), or a problems file's (`problems_file`: an imported HumanEval or MBPP)."""

    tasks: str = "countdown"
    """Task names, comma-separated (axiom-rl problems list)."""
    difficulty: str = "1"
    """A difficulty (5) or an inclusive range (1-3)."""
    count: int = 100
    """Problems per task and difficulty."""
    seed: int = 0
    split: str = "train"
    """train, or eval (held out from training)."""
    problems_file: str | None = None
    """A problems file instead of generated problems."""
    prompt_style: str = "full"


class AxiomTaskset(vf.Taskset[AxiomTask, AxiomTasksetConfig]):
    def load(self) -> list[AxiomTask]:
        c = self.config
        if c.problems_file is not None:
            from axiom_rl.verify_files import read_problems_file

            problems = read_problems_file(c.problems_file)
        else:
            lo, hi = parse_range(c.difficulty, "difficulty")
            problems = generate_mixed(parse_task_list(c.tasks), range(lo, hi + 1), c.count, c.seed, c.split)
        return [
            AxiomTask(
                AxiomData(
                    id=p.id,
                    name=p.id,
                    prompt=[{"role": "user", "content": get_task(p.task).render(p, c.prompt_style)}],
                    problem=p.to_json(),
                ),
                self.config.task,
            )
            for p in problems
        ]
