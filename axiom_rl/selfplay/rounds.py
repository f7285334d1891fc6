"""Self-play in rounds: evaluate, profile the weaknesses, make a targeted problem set, train, repeat.

Each round r:

    1. the model entering the round is evaluated on the held-out set (the run's tasks, and the
       debug_<task> of each of its code tasks, at each difficulty) into OUT/results.db; round
       r > 1 takes round r - 1's closing evaluation rather than repeat it
    2. the weakness profile (axiom_rl.eval.failures.weakness_profile) ranks the (task,
       difficulty) cells by held-out pass rate
    3. the round's problems (OUT/round-r/problems.jsonl): fresh train-split problems of the
       weakest cells, with the debug problems of their code tasks at the same difficulty, and a
       share of problems of every cell (so the rest is not forgotten); with targeting "uniform"
       (the control), problems of every cell alike, as many. With --propose (Countdown), that
       share of them asks the policy to propose puzzles instead (the propose_countdown task)
    4. GRPO on them for the round's steps (OUT/round-r/train), from the model entering the round;
       a proposal earns 4p(1-p) of the success rate p of the model entering the round on its
       puzzle (the learnability reward, selfplay/proposer.py), every other row its task's reward
    5. the trained model evaluated on the same held-out set (and, with --propose, its proposals
       on held-out proposer prompts, against the same solver as the model entering the round's:
       valid share and learnability before and after); the round's report
       (OUT/round-r/report.md: the profile before and after, cell by cell) and the plot across
       rounds (OUT/selfplay.png) are written, and only then is the round marked done in
       OUT/selfplay.json

A killed run, started again with the same options, resumes: finished rounds are not repeated,
an evaluation continues where it stopped (the database keeps every stored attempt), training
resumes from its last checkpoint, and a half-finished round is never reported as finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import EvalConfig, TrainConfig
from ..errors import UserError
from ..eval.failures import Cell, weakness_profile
from ..io import write_jsonl_atomic, write_text_atomic
from ..tasks import CodeTask, generate_problems, get_task, iter_problems, parse_task_list
from ..tasks.generate import check_difficulty, parse_range
from ..types import Problem
from ..verify_files import read_problems_file

TARGETINGS = ("weakness", "uniform")
PROPOSER_REWARDS = ("learnability", "validity")
STATE = "selfplay.json"
PROPOSER = "propose_countdown"
# Settings added since self-play runs were first written: a stored run without one had its default.
NEWER_SETTINGS = ("propose", "solver_samples", "proposer_reward")


@dataclass(frozen=True)
class SelfPlayConfig:
    """What a self-play run does. Everything here but `rounds` is fixed for the run: a resume with
    other values is refused (more rounds continue it)."""

    model: str = "tiny"
    """'tiny', a model directory (an SFT run's final_model) or a hub name: the first round's model."""
    tiny_size: str = "tiny"
    tasks: list[str] = field(default_factory=lambda: ["is_palindrome", "max_subarray"])
    """The run's tasks; each code task brings its debug_<task> to the profile and the problem sets."""
    difficulty: str = "1-3"
    rounds: int = 3
    steps_per_round: int = 10
    targeting: str = "weakness"
    """weakness: train on the weakest cells (and their debug problems); uniform: on every cell alike (the control)."""
    weak_cells: int = 3
    """How many of the weakest cells a round targets."""
    keep: float = 0.25
    """The share of a round's problems drawn from every cell, so that the rest is not forgotten."""
    eval_count: int = 4
    """Held-out problems per cell."""
    eval_samples: int = 2
    prompts_per_step: int = 4
    num_generations: int = 8
    max_completion_length: int = 256
    temperature: float = 1.0
    """Of the rollouts and of held-out sampling."""
    lr: float = 2e-5
    beta: float = 0.04
    propose: float = 0.0
    """The share of a round's problems that ask the policy to propose Countdown puzzles (the
    proposer role; needs countdown among the tasks), rewarded by their learnability."""
    solver_samples: int = 8
    """The solver's attempts at each proposed puzzle (the learnability's success rate)."""
    proposer_reward: str = "learnability"
    """What a proposal earns: learnability (4p(1-p) for the solver), or validity (1 for a valid
    puzzle, whatever the solver makes of it: the control)."""
    seed: int = 0
    out: str = "runs/selfplay"

    @property
    def cell_tasks(self) -> list[str]:
        """The run's tasks followed by the debug task of each code task among them."""
        debug = [f"debug_{t}" for t in self.tasks if isinstance(get_task(t), CodeTask)]
        return [*self.tasks, *debug]

    @property
    def levels(self) -> list[int]:
        low, high = parse_range(self.difficulty)
        return list(range(low, high + 1))


def check_config(cfg: SelfPlayConfig) -> None:
    """Bad options as one-line errors, before anything is written."""
    if cfg.rounds < 1:
        raise UserError(f"--rounds must be >= 1, got {cfg.rounds}")
    if cfg.steps_per_round < 1:
        raise UserError(f"--steps-per-round must be >= 1, got {cfg.steps_per_round}")
    if cfg.targeting not in TARGETINGS:
        raise UserError(f"--targeting must be one of {', '.join(TARGETINGS)}, got {cfg.targeting!r}")
    if cfg.weak_cells < 1:
        raise UserError(f"--weak-cells must be >= 1, got {cfg.weak_cells}")
    if not 0.0 <= cfg.keep < 1.0:
        raise UserError(f"--keep must be in [0, 1), got {cfg.keep}")
    if cfg.eval_count < 1 or cfg.eval_samples < 1:
        raise UserError("--eval-count and --eval-samples must be >= 1")
    if not 0.0 <= cfg.propose < 1.0:
        raise UserError(f"--propose must be in [0, 1), got {cfg.propose}")
    if cfg.proposer_reward not in PROPOSER_REWARDS:
        raise UserError(
            f"--proposer-reward must be one of {', '.join(PROPOSER_REWARDS)}, got {cfg.proposer_reward!r}"
        )
    if cfg.solver_samples < 2:
        raise UserError(f"--solver-samples must be >= 2, got {cfg.solver_samples}")
    names = parse_task_list(cfg.tasks)
    if cfg.propose and "countdown" not in names:
        raise UserError("--propose has the policy propose Countdown puzzles: give countdown among the tasks")
    if PROPOSER in names:
        raise UserError(f"{PROPOSER} is the proposer's role: give --propose SHARE, not the task")
    derived = [n for n in names if get_task(n).derived_from]
    if derived:
        raise UserError(
            f"give the base tasks ({', '.join(get_task(n).derived_from or '' for n in derived)}), "
            f"not {', '.join(derived)}: a code task brings its debug task with it"
        )
    low, high = parse_range(cfg.difficulty)
    for name in names:
        for difficulty in (low, high):
            check_difficulty(get_task(name), difficulty)


def _settings(cfg: SelfPlayConfig) -> dict[str, Any]:
    # Rounds may grow: the same run given --rounds above what it did goes on from there.
    return {k: v for k, v in asdict(cfg).items() if k not in ("out", "rounds")}


def load_state(cfg: SelfPlayConfig) -> dict[str, Any]:
    """OUT/selfplay.json as it stands, or a new one; refuses a directory of another run."""
    out = Path(cfg.out)
    path = out / STATE
    if not path.exists():
        if out.exists() and any(out.iterdir()):
            raise UserError(f"{out} is not empty and holds no self-play run; give another --out")
        return {"settings": _settings(cfg), "rounds": []}
    try:
        state = json.loads(path.read_text())
        if not isinstance(state, dict) or not isinstance(state.get("rounds"), list):
            raise ValueError("not a self-play state")
    except (ValueError, OSError) as e:
        raise UserError(f"{path} is not a self-play run's state ({e}); give another --out") from None
    theirs = state.get("settings")
    if isinstance(theirs, dict):
        # A run from before a setting existed had that setting's default (propose: 0, no proposer).
        theirs = {**{k: v for k, v in _settings(SelfPlayConfig()).items() if k in NEWER_SETTINGS}, **theirs}
    if theirs != _settings(cfg):
        theirs = theirs or {}
        differ = sorted(k for k in _settings(cfg) if theirs.get(k) != _settings(cfg)[k])
        raise UserError(
            f"{out} holds a self-play run with other settings ({', '.join(differ) or 'unreadable'}); "
            "give the same options to resume it, or another --out"
        )
    return state


def save_state(cfg: SelfPlayConfig, state: dict[str, Any]) -> None:
    write_text_atomic(Path(cfg.out) / STATE, json.dumps(state, indent=1) + "\n")


def round_dir(cfg: SelfPlayConfig, r: int) -> Path:
    return Path(cfg.out) / f"round-{r}"


def model_entering(cfg: SelfPlayConfig, r: int) -> str:
    return cfg.model if r == 1 else str(round_dir(cfg, r - 1) / "train" / "final_model")


def held_out(cfg: SelfPlayConfig, model: str, run_name: str, say: Callable[[str], None]) -> list[Cell]:
    """The model's weakness profile on the held-out set (stored, resumable, as run `run_name`)."""
    from ..eval.evaluate import evaluate
    from ..eval.store import ResultsDB

    db = str(Path(cfg.out) / "results.db")
    evaluate(
        EvalConfig(model=model, tiny_size=cfg.tiny_size, tasks=cfg.cell_tasks, difficulty=cfg.difficulty,
                   count=cfg.eval_count, samples=cfg.eval_samples, temperature=cfg.temperature, seed=cfg.seed,
                   split="eval", max_completion_length=cfg.max_completion_length, db=db, run_name=run_name),
        say=say,
    )  # fmt: skip
    with ResultsDB(db) as store:
        return weakness_profile(store.attempts(store.require_run(run_name)))


def weakest(cells: Sequence[Cell], n: int) -> list[Cell]:
    """The n cells of lowest held-out pass rate (ties: the easier difficulty, then the task's name)."""
    return sorted(cells, key=lambda c: (c.pass_rate, c.difficulty, c.task))[:n]


def round_targets(cfg: SelfPlayConfig, profile: Sequence[Cell]) -> list[tuple[str, int]]:
    """The cells a round targets: none for uniform targeting; else the weakest cells, each code
    task's with its debug task at the same difficulty."""
    if cfg.targeting == "uniform":
        return []
    targets: list[tuple[str, int]] = []
    for cell in weakest(profile, cfg.weak_cells):
        targets.append((cell.task, cell.difficulty))
        if f"debug_{cell.task}" in cfg.cell_tasks:  # a weak code task's bugs
            targets.append((f"debug_{cell.task}", cell.difficulty))
    return list(dict.fromkeys(targets))


def proposer_levels(cfg: SelfPlayConfig) -> list[int]:
    """The run's difficulties the proposer is asked for (those its task has)."""
    top = get_task(PROPOSER).max_difficulty
    return [d for d in cfg.levels if d <= top] or [top]


def round_problems(cfg: SelfPlayConfig, r: int, targets: Sequence[tuple[str, int]]) -> list[Problem]:
    """Round r's training problems, steps x prompts of them: the --propose share asks for puzzles
    (the run's difficulties in turn); of the rest, the targets in turn and the --keep share (all
    of them without targets) drawn from every cell; fresh train-split problems each round."""
    everything = cfg.steps_per_round * cfg.prompts_per_step
    proposing = round(everything * cfg.propose)
    total = everything - proposing
    every = [(t, d) for t in cfg.cell_tasks for d in cfg.levels]
    pool = list(targets) or every
    share = round(total * (1.0 - cfg.keep)) if targets else total
    wanted = {cell: 0 for cell in pool}
    rng = random.Random(f"axiom-rl/selfplay/s{cfg.seed}/round{r}")
    for i in range(share):
        wanted[pool[i % len(pool)]] += 1
    for _ in range(total - share):
        cell = rng.choice(every)
        wanted[cell] = wanted.get(cell, 0) + 1
    problems: list[Problem] = []
    levels = proposer_levels(cfg)
    for i in range(proposing):
        key = (PROPOSER, levels[i % len(levels)])
        wanted[key] = wanted.get(key, 0) + 1
    for (task, difficulty), count in wanted.items():
        start = (r - 1) * everything
        if task == PROPOSER:  # a request, not a puzzle: asked again, it is answered anew (and at
            # difficulty 1 there are only some 170 train prompts)
            stream = iter_problems(task, difficulty, seed=cfg.seed, split="train", unique=False)
            problems += itertools.islice(stream, start, start + count)
        elif count:  # round r's slice of the cell's train sequence: no problem is trained on twice
            problems += generate_problems(task, difficulty, count, seed=cfg.seed, split="train", start=start)
    rng.shuffle(problems)
    return problems


def train_round(cfg: SelfPlayConfig, r: int, problems_file: Path, say: Callable[[str], None]) -> Path:
    """GRPO on the round's problems, resumed from its last checkpoint if it was stopped."""
    from ..train.grpo import train

    run_dir = round_dir(cfg, r) / "train"
    final = run_dir / "final_model"
    learnability = cfg.propose > 0 and cfg.proposer_reward == "learnability"
    if (final / "axiom_rl.json").exists():
        return final
    train(
        TrainConfig(model=model_entering(cfg, r), tiny_size=cfg.tiny_size, problems_file=str(problems_file),
                    steps=cfg.steps_per_round, prompts_per_step=cfg.prompts_per_step,
                    num_generations=cfg.num_generations, max_completion_length=cfg.max_completion_length,
                    temperature=cfg.temperature, lr=cfg.lr, beta=cfg.beta, seed=cfg.seed * 1000 + r,
                    rewards="learnability" if learnability else "auto",  # auto: each task's own (validity)
                    solver=model_entering(cfg, r) if learnability else None, solver_samples=cfg.solver_samples,
                    output_dir=str(run_dir), save_every=max(1, cfg.steps_per_round // 4), keep_checkpoints=1,
                    resume=(run_dir / "config.json").exists()),
        say=say,
    )  # fmt: skip
    return final


def proposer_problems(cfg: SelfPlayConfig) -> list[Problem]:
    """The held-out proposer prompts: --eval-count at each of the run's difficulties, or as many
    distinct ones as there are (about 40 at difficulty 1)."""
    problems: list[Problem] = []
    for d in proposer_levels(cfg):
        stream = iter_problems(PROPOSER, d, seed=cfg.seed, split="eval")
        with contextlib.suppress(UserError):  # the distinct prompts ran out: those made are kept
            for problem in itertools.islice(stream, cfg.eval_count):
                problems.append(problem)
    return problems


def measure_proposals(cfg: SelfPlayConfig, r: int, trained: Path) -> dict[str, dict[str, Any]]:
    """The proposals of the model entering round r and of the model it trained, on the held-out
    proposer prompts (--eval-samples each), judged by the same solver: the model entering the round."""
    from .proposer import Solver, measure_proposer

    options = dict(tiny_size=cfg.tiny_size, temperature=cfg.temperature,
                   max_completion_length=cfg.max_completion_length, seed=cfg.seed)  # fmt: skip
    problems = proposer_problems(cfg)
    solver = Solver(model_entering(cfg, r), **options)  # type: ignore[arg-type]
    measured = {}
    for name, model in (("before", solver), ("after", Solver(str(trained), **options))):  # type: ignore[arg-type]
        proposals = [
            (p, c) for p, row in zip(problems, model.sample(problems, cfg.eval_samples)) for c in row
        ]
        measured[name] = measure_proposer(proposals, solver, cfg.solver_samples)
    return measured


@dataclass
class RoundResult:
    round: int
    targeting: str
    targets: list[tuple[str, int]]
    before: list[dict[str, Any]]
    after: list[dict[str, Any]]
    seconds: dict[str, float]
    problems: dict[str, int]
    # With --propose: the proposals before and after the round (measure_proposals).
    proposer: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "targets": [list(t) for t in self.targets]}


def run_selfplay(cfg: SelfPlayConfig, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Every round not yet done; returns the state (OUT/selfplay.json)."""
    from .report import write_plot, write_round_report

    check_config(cfg)
    cfg = dataclasses.replace(cfg, tasks=parse_task_list(cfg.tasks))
    state = load_state(cfg)
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    save_state(cfg, state)
    for r in range(len(state["rounds"]) + 1, cfg.rounds + 1):
        directory = round_dir(cfg, r)
        directory.mkdir(exist_ok=True)
        seconds: dict[str, float] = {}
        start = time.perf_counter()
        before = held_out(
            cfg, model_entering(cfg, r), f"round-{r}-before" if r == 1 else f"round-{r - 1}-after", say
        )
        seconds["evaluate_before"] = time.perf_counter() - start
        targets = round_targets(cfg, before)
        problems_file = directory / "problems.jsonl"
        if problems_file.exists():  # a resumed round: its problems as they were made (all seeded)
            problems = read_problems_file(str(problems_file))
        else:
            problems = round_problems(cfg, r, targets)
            write_jsonl_atomic(problems_file, [p.to_dict() for p in problems])
        say(f"round {r}: {len(problems)} problems, targeting "
            + (", ".join(f"{t} d{d}" for t, d in targets) if targets else "every cell alike"))  # fmt: skip
        start = time.perf_counter()
        trained = train_round(cfg, r, problems_file, say)
        seconds["train"] = time.perf_counter() - start
        start = time.perf_counter()
        after = held_out(cfg, str(trained), f"round-{r}-after", say)
        seconds["evaluate_after"] = time.perf_counter() - start
        proposer = {}
        if cfg.propose:
            start = time.perf_counter()
            proposer = measure_proposals(cfg, r, trained)
            seconds["measure_proposals"] = time.perf_counter() - start
            say(f"round {r}: proposals valid {proposer['before']['valid']:.0%} -> {proposer['after']['valid']:.0%}, "
                f"learnability {proposer['before']['learnability']:.3f} -> {proposer['after']['learnability']:.3f}")  # fmt: skip
        counts = dict(Counter(p.task for p in problems))
        result = RoundResult(r, cfg.targeting, targets, [c.to_dict() for c in before], [c.to_dict() for c in after],
                             seconds, counts, proposer)  # fmt: skip
        write_round_report(directory, result)
        state["rounds"].append(result.to_dict())
        write_plot(Path(cfg.out) / "selfplay.png", state["rounds"])
        save_state(cfg, state)  # the round is done only now
        say(f"round {r} done: {directory / 'report.md'}")
    return state
