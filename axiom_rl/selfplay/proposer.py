"""The proposer's reward: how learnable a proposed puzzle is for the solver.

One shared model plays two roles: it solves Countdown puzzles (rewarded by the verifier, as
always) and proposes them (the propose_countdown task). A proposal is worth what it teaches:
the solver's success rate p on it, estimated from `samples` attempts, gives 4p(1-p) (1 at p=1/2;
0 for a puzzle the solver always or never solves, and for an invalid proposal): the learnability
reward of prime-rl's proposer/solver environment and of Absolute Zero (arXiv 2505.03335, whose
proposer reward is 1 - p for 0 < p < 1, also 0 at both ends).

The solver is a model loaded from a path (`solver`): in self-play, the model entering the round,
fixed for the round's steps, so that what a proposal earns does not drift within the round.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from ..reward_stage import ComponentScores, RewardComponent, register_component
from ..rewards import REWARDS
from ..types import PASSED, Problem, Verdict

PROPOSER_TASKS = ("propose_countdown",)


def learnability(successes: int, samples: int) -> float:
    """4p(1-p) of the success rate p = successes / samples."""
    if samples < 1 or not 0 <= successes <= samples:
        raise ValueError(f"{successes} successes of {samples} samples")
    p = successes / samples
    return 4.0 * p * (1.0 - p)


@dataclass
class SolverAttempts:
    """The solver's attempts at each puzzle: completions and whether each passed."""

    completions: list[list[str]]
    passed: list[list[bool]]

    def successes(self) -> list[int]:
        return [sum(row) for row in self.passed]


class Solver:
    """A model that samples answers to problems (Countdown puzzles, or proposals): loaded once,
    sampled without touching the caller's random state (its draws are seeded by the prompts
    themselves, so the same problems get the same samples however the run got there)."""

    def __init__(
        self,
        model: str,
        tiny_size: str = "tiny",
        prompt_style: str = "auto",
        temperature: float = 1.0,
        max_completion_length: int = 64,
        seed: int = 0,
        device: str = "auto",
    ) -> None:
        from ..models.load import check_model_spec, load_for_inference, resolve_device
        from ..train.plan import resolve_prompt_style

        if temperature <= 0:
            raise UserError(f"the solver samples: its temperature must be above 0, got {temperature}")
        self.name, self.temperature, self.max_completion_length = model, temperature, max_completion_length
        self.prompt_style = resolve_prompt_style(prompt_style, model, check_model_spec(model, tiny_size))
        self.model, self.tokenizer, _ = load_for_inference(
            model, "auto", str(resolve_device(device)), tiny_size, seed
        )

    def sample(self, problems: Sequence[Problem], samples: int) -> list[list[str]]:
        """`samples` completions of each problem."""
        import torch  # the torch-free parts (the reward registry) import this module too

        from ..rollout import get_backend
        from ..tasks import get_task
        from ..tasks.prompts import format_prompt

        if not problems:
            return []
        prompts = [format_prompt(p, self.tokenizer, self.prompt_style) for p in problems]
        stops = sorted({s for p in problems for s in get_task(p.task).stop_strings})
        digest = hashlib.sha256("\0".join(prompts).encode()).digest()
        devices = [self.model.device] if self.model.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            torch.manual_seed(int.from_bytes(digest[:8], "big"))
            rollout = get_backend("auto", self.model).generate(
                self.model, self.tokenizer, prompts, samples, self.max_completion_length,
                self.temperature, 1.0, stops, 4096,
            )  # fmt: skip
        return [rollout.texts[i * samples : (i + 1) * samples] for i in range(len(problems))]

    def attempt(self, puzzles: Sequence[Problem], samples: int) -> SolverAttempts:
        """`samples` attempts at each puzzle, each verified."""
        from ..tasks import get_task

        completions = self.sample(puzzles, samples)
        passed = [
            [get_task(p.task).score(p, text).status == PASSED for text in row]
            for p, row in zip(puzzles, completions)
        ]
        return SolverAttempts(completions, passed)


@register_component("learnability")
class Learnability(RewardComponent):
    """The proposer's rows (propose_countdown): 4p(1-p) of the solver's success rate on the
    proposed puzzle, 0 for an invalid proposal. Every other row (the solver's own) gets its task's
    default reward, so `--rewards learnability` trains both roles in one run."""

    def __init__(
        self,
        solver: str | None = None,
        samples: int = 8,
        tiny_size: str = "tiny",
        prompt_style: str = "auto",
        temperature: float = 1.0,
        max_completion_length: int = 64,
        seed: int = 0,
    ) -> None:
        if not solver:
            raise UserError(
                "the learnability reward needs a solver model: --solver (a model directory, or tiny)"
            )
        if samples < 2:
            raise UserError(
                f"--solver-samples must be >= 2 (a success rate of one attempt is 0 or 1), got {samples}"
            )
        self.samples = samples
        self.options = dict(model=solver, tiny_size=tiny_size, prompt_style=prompt_style,
                            temperature=temperature, max_completion_length=max_completion_length, seed=seed)  # fmt: skip
        self._solver: Solver | None = None
        self.last: dict[str, float] = {}  # the last batch's proposals: how many, valid, mean learnability

    def score(
        self, problems: Sequence[Problem], completions: Sequence[str], verdicts: Sequence[Verdict]
    ) -> ComponentScores:
        from ..tasks import get_task
        from ..tasks.propose import puzzle_of

        rows = [0.0] * len(problems)
        proposals = [i for i, p in enumerate(problems) if p.task in PROPOSER_TASKS]
        for i, (p, c, v) in enumerate(zip(problems, completions, verdicts)):
            if p.task not in PROPOSER_TASKS:
                rows[i] = float(REWARDS[get_task(p.task).default_reward](p, c, v))
        # An invalid proposal's verdict spares the solver's second look at it (an unsolvable one
        # costs the exact solver its whole budget again).
        puzzles = [
            puzzle_of(problems[i], completions[i]) if verdicts[i].status == PASSED else None
            for i in proposals
        ]
        if any(q is not None for q in puzzles) and self._solver is None:
            self._solver = Solver(**self.options)  # type: ignore[arg-type]
        scores, _ = proposal_scores(puzzles, self._solver, self.samples)
        for i, value in zip(proposals, scores):
            rows[i] = value
        self.last = {
            "proposals": float(len(proposals)),
            "valid": float(sum(q is not None for q in puzzles)),
            "learnability": statistics.fmean(scores) if scores else 0.0,
        }
        return ComponentScores(rows)


def proposal_scores(
    puzzles: Sequence[Problem | None], solver: Solver | None, samples: int
) -> tuple[list[float], list[int]]:
    """Each proposal's learnability (0 where its puzzle is None: an invalid proposal), and the
    solver's successes on the valid ones, in order. `solver` may be None when none is valid."""
    valid = [q for q in puzzles if q is not None]
    successes = solver.attempt(valid, samples).successes() if valid and solver is not None else []
    found = iter(successes)
    return [0.0 if q is None else learnability(next(found), samples) for q in puzzles], successes


def measure_proposer(
    proposals: Sequence[tuple[Problem, str]], solver: Solver, samples: int
) -> dict[str, Any]:
    """What a set of proposals is worth to `solver`: the share that is valid, the mean
    learnability (0 for invalid ones), and the solver's mean success rate on the valid ones."""
    from ..tasks.propose import puzzle_of

    puzzles = [puzzle_of(p, c) for p, c in proposals]
    scores, successes = proposal_scores(puzzles, solver, samples)
    return {
        "proposals": len(puzzles),
        "valid": len(successes) / len(puzzles) if puzzles else 0.0,
        "learnability": statistics.fmean(scores) if scores else 0.0,
        "solver_success": statistics.fmean(s / samples for s in successes) if successes else None,
    }
