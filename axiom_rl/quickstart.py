"""`axiom-rl quickstart` (and `make quickstart`): show reinforcement learning teaching, on a CPU.

    1. build the built-in tiny model and warm it up with SFT on Countdown train problems
       (cached: a second run starts at step 3);
    2. evaluate it on held-out eval problems, greedy and sampled;
    3. train it with GRPO;
    4. evaluate again, and print the before/after table, with a difficulty it was never trained
       on as the forgetting check;
    5. write report.md and PNG plots into the run directory.

With `--control`, the same extra wall time GRPO took is also spent on more SFT instead, and
evaluated the same way: the comparison a sceptical reviewer asks for.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .io import ensure_dir, hold_run_dir, holding, remove_if_abandoned
from .report import accuracy_cells, goal_verdicts, write_report
from .rewards import compute_reward
from .sandbox import Sandbox
from .tasks import all_tasks, generate_problems, get_task
from .verifier import verify_many

DIFFICULTIES = (1, 5, 10)


@dataclass
class QuickstartConfig:
    seed: int = 0
    """Seed of the model, the data and the evaluation problems."""
    tiny_size: str = "micro"
    """Size of the built-in model (micro: 0.8M parameters)."""
    difficulty: int = 1
    """Countdown difficulty trained on (3 numbers up to 20, targets up to 100)."""
    untrained_difficulty: int = 3
    """A difficulty never trained on, evaluated before and after (the forgetting check)."""
    sft_steps: int = 700
    """SFT steps (batch 64, lr 2e-3)."""
    grpo_steps: int = 580
    """GRPO steps (16 prompts x 8 completions, lr 2e-4 cosine)."""
    beta: float = 0.01
    """KL coefficient to the SFT base."""
    eval_count: int = 500
    """Held-out problems per difficulty."""
    eval_samples: int = 4
    """Samples per problem for the sampled (temperature 1.0) evaluation."""
    max_seconds: float = 540.0
    """Wall-time cap for SFT + GRPO together (a slower machine stops earlier, with a note)."""
    control: bool = False
    """Also spend GRPO's wall time on more SFT, and evaluate that (the control)."""
    output_dir: str = "runs"
    """Parent of the timestamped run directory."""
    cache_dir: str = ".axiom-cache"
    """Where the SFT'd base is kept between runs."""


MAX_TOKENS = 24  # a compact Countdown answer is ~16 tokens
SFT_SHARE = 0.3  # of max_seconds, the most the SFT warm-up may take; GRPO gets what it leaves


def sft_settings(cfg: QuickstartConfig) -> dict[str, Any]:
    return {
        "model": "tiny",
        "tiny_size": cfg.tiny_size,
        "tasks": ["countdown"],
        "difficulty": str(cfg.difficulty),
        "steps": cfg.sft_steps,
        "batch_size": 64,
        "lr": 2e-3,
        "lr_schedule": "constant",
        "warmup_steps": 50,
        "seed": cfg.seed,
    }


def code_fingerprint(package: Path = Path(__file__).parent) -> str:
    """What decides an SFT run's numbers besides its settings: axiom-rl's own source (its C++
    kernels included, whose sums set the bits), the versions of torch and transformers, and the
    float32 matmul library on this CPU. A base SFT'd by other code is not reused, so a seed gives
    the same figures as a fresh clone's."""
    from importlib.metadata import version

    from .speed import cpu_matmul

    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.suffix in (".py", ".cpp", ".h")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    digest.update(f"torch {version('torch')} transformers {version('transformers')}".encode())
    digest.update(cpu_matmul.backend().encode())
    return digest.hexdigest()[:12]


@dataclass
class SFTBase:
    """The SFT'd base a quickstart run starts GRPO from."""

    path: Path  # its final_model directory
    cached: bool  # taken from the cache, not trained by this run
    seconds: float  # spent training it in this run (0 when cached)
    steps: int  # SFT steps it had: `wanted` unless the time budget stopped it first
    wanted: int  # the SFT steps its settings asked for

    @property
    def short(self) -> bool:
        """Whether the time budget stopped its SFT before all its steps."""
        return self.steps < self.wanted


def _sft_steps_done(final: Path) -> int:
    from .models.load import read_model_card

    return int(read_model_card(str(final)).get("sft_steps", 0))


def cached_sft_base(cfg: QuickstartConfig, phase: Callable[[str], Any], short_dir: Path) -> SFTBase:
    """The SFT'd base for these settings and this code. Only a base that ran all its steps enters
    the cache: one the time budget stopped early (a slow or busy machine) serves this run from
    `short_dir` and is not kept, or every later run would start from the weaker model."""
    settings = sft_settings(cfg)
    keyed = {**settings, "code": code_fingerprint()}
    key = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:12]
    home = Path(cfg.cache_dir) / f"sft-{key}"
    final = home / "final_model"
    if (final / "model.safetensors").exists() and (final / "axiom_rl.json").exists():
        if _sft_steps_done(final) == settings["steps"]:
            return SFTBase(final, True, 0.0, settings["steps"], settings["steps"])
        shutil.rmtree(home)  # stopped short by an earlier version, which cached it anyway
    cache = ensure_dir(cfg.cache_dir)
    # What quickstarts killed while training a base left: their work directories and locks.
    for dead in {p.with_suffix("") if p.suffix == ".lock" else p for p in cache.glob(".sft-*")}:
        remove_if_abandoned(dead, dead.with_name(dead.name + ".lock"))
    work = Path(tempfile.mkdtemp(prefix=f".sft-{key}-", dir=cache))
    lock = work.with_name(work.name + ".lock")
    with holding(lock):
        base = _train_sft_base(cfg, settings, phase, work, home, short_dir)
    lock.unlink(missing_ok=True)  # the work directory has moved: into the cache or the run
    return base


def _train_sft_base(
    cfg: QuickstartConfig, settings: dict[str, Any], phase: Callable[[str], Any], work: Path, home: Path,
    short_dir: Path,
) -> SFTBase:  # fmt: skip
    from .train.sft import SFTConfig, sft

    final = home / "final_model"
    start = time.perf_counter()
    with phase("SFT warm-up") as progress:
        sft(
            # save_every=0: the cache keeps the model; its one checkpoint (at the end) is not kept
            SFTConfig(
                **settings, output_dir=str(work), max_seconds=cfg.max_seconds * SFT_SHARE, save_every=0
            ),
            progress=progress,
            # Quiet: its fixed warm-up of 50 steps outlasts a short --sft-steps, not the user's to set.
            say=lambda m: None,
        )
        shutil.rmtree(work / "checkpoints", ignore_errors=True)
    seconds = time.perf_counter() - start
    trained = SFTBase(final, False, seconds, _sft_steps_done(work / "final_model"), settings["steps"])
    if trained.short:
        short_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(work, short_dir)  # the cache and the runs may be on other file systems
        trained.path = short_dir / "final_model"
        return trained
    if home.exists():
        shutil.rmtree(home)
    work.rename(home)  # only a finished SFT run ever becomes the cache entry
    return trained


def evaluate_both(
    model: Path, name: str, cfg: QuickstartConfig, db: Path, phase: Callable[[str], Any]
) -> dict[str, list[dict[str, Any]]]:
    from .eval.evaluate import EvalConfig, evaluate

    out = {}
    for mode, temperature, samples in (("greedy", 0.0, 1), ("sampled", 1.0, cfg.eval_samples)):
        with phase(f"evaluating {name} ({mode})") as progress:
            _, summary = evaluate(
                EvalConfig(
                    model=str(model),
                    tasks=["countdown"],
                    difficulty=f"{cfg.difficulty}-{cfg.untrained_difficulty}"
                    if cfg.untrained_difficulty > cfg.difficulty
                    else str(cfg.difficulty),
                    count=cfg.eval_count,
                    samples=samples,
                    temperature=temperature,
                    seed=cfg.seed,
                    max_completion_length=MAX_TOKENS,
                    db=str(db),
                    run_name=f"{name}-{mode}",
                    batch_size=128,
                ),
                progress=lambda done, total: progress(done, total, None),
            )
        out[mode] = [s for s in summary if s["difficulty"] in (cfg.difficulty, cfg.untrained_difficulty)]
    return out


def run_quickstart(cfg: QuickstartConfig, console: Console, phase: Callable[[str], Any]) -> Path:
    started = time.perf_counter()
    for removed in remove_unfinished_runs(Path(cfg.output_dir)):
        console.print(f"removed {removed}: a quickstart that was stopped before it finished")
    run_dir = Path(cfg.output_dir) / f"quickstart-{time.strftime('%Y%m%d-%H%M%S')}-s{cfg.seed}"
    ensure_dir(run_dir, exist_ok=False)
    with hold_run_dir(run_dir):  # unfinished but held: another quickstart in progress
        return _run_quickstart(cfg, console, phase, run_dir, started)


def remove_unfinished_runs(output_dir: Path) -> list[Path]:
    """Quickstart directories that a killed (or failed) quickstart left without its report: a
    quickstart cannot be resumed, so they hold only its half-done parts. Another quickstart's
    directory in progress is held (hold_run_dir) and stays."""
    removed = []
    for run_dir in sorted(output_dir.glob("quickstart-*")) if output_dir.is_dir() else ():
        ours = (run_dir / "quickstart.json").is_file() and not run_dir.is_symlink()
        if ours and not (run_dir / "report.md").exists() and remove_if_abandoned(run_dir, run_dir / ".lock"):
            removed.append(run_dir)
    return removed


def _run_quickstart(
    cfg: QuickstartConfig, console: Console, phase: Callable[[str], Any], run_dir: Path, started: float
) -> Path:
    from .config import TrainConfig
    from .train.grpo import train
    from .train.sft import SFTConfig, sft

    (run_dir / "quickstart.json").write_text(json.dumps(asdict(cfg), indent=1) + "\n")
    db = run_dir / "results.db"

    sft_base = cached_sft_base(cfg, phase, run_dir / "sft")
    base, sft_seconds = sft_base.path, sft_base.seconds
    console.print(f"SFT'd base: {base}" + (" (cached)" if sft_base.cached else f" ({sft_seconds:.0f}s)"))
    if sft_base.short:
        console.print(
            f"SFT stopped by its time budget ({cfg.max_seconds * SFT_SHARE:.0f}s) at step {sft_base.steps} of"
            f" {sft_base.wanted}: a slow or busy machine. This run goes on from it; it is not cached, so"
            " the next run trains it again."
        )
    before = evaluate_both(base, "sft", cfg, db, phase)

    grpo_start = time.perf_counter()
    budget = max(30.0, cfg.max_seconds - sft_seconds)
    with phase("GRPO") as progress:
        result = train(
            TrainConfig(
                model=str(base), tasks=["countdown"], difficulty=str(cfg.difficulty), steps=cfg.grpo_steps,
                max_seconds=budget, prompts_per_step=16, num_generations=8, max_completion_length=MAX_TOKENS,
                lr=2e-4, lr_schedule="cosine", beta=cfg.beta, temperature=1.0, seed=cfg.seed,
                output_dir=str(run_dir / "grpo"), save_every=0,
            ),
            progress=progress,
            say=lambda m: None,
        )  # fmt: skip
    grpo_seconds = time.perf_counter() - grpo_start
    after = evaluate_both(run_dir / "grpo" / "final_model", "grpo", cfg, db, phase)

    control = None
    if cfg.control:
        # More SFT for the wall time GRPO took, from the same base, at the same learning rate.
        settings = dict(sft_settings(cfg), model=str(base), steps=10**6, warmup_steps=0)
        budget_s = max(1, round(grpo_seconds))
        with phase("control: more SFT (seconds)") as progress:
            sft(
                SFTConfig(
                    **settings, max_seconds=grpo_seconds, output_dir=str(run_dir / "more-sft"), save_every=0
                ),
                # bounded by time, not steps: the bar counts seconds of the budget
                progress=lambda step, total, row: progress(
                    min(budget_s, int(row["elapsed_s"])), budget_s, row
                ),
            )
        control = evaluate_both(run_dir / "more-sft" / "final_model", "more-sft", cfg, db, phase)

    table = results_table(before, after, control, cfg)
    console.print(table)
    for line in goal_verdicts(before, after, control, cfg.difficulty):
        console.print(line)

    write_report(
        run_dir,
        cfg,
        before,
        after,
        control,
        result.metrics,
        sft_base,
        grpo_seconds,
        time.perf_counter() - started,
    )
    console.print(f"report: {run_dir / 'report.md'}  (plots beside it); results database: {db}")
    return run_dir


def results_table(before: Any, after: Any, control: Any, cfg: QuickstartConfig) -> Table:
    """One row per (difficulty, decoding): narrow enough for an 80-column terminal."""
    table = Table(title="Countdown, held-out accuracy", title_justify="left")
    for name, justify in (
        ("difficulty", "left"),
        ("decoding", "left"),
        ("after SFT", "right"),
        ("after GRPO", "right"),
        ("change", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    if control:
        table.add_column("more SFT instead", justify="right")
    for d in (cfg.difficulty, cfg.untrained_difficulty):
        label = f"{d} ({'trained' if d == cfg.difficulty else 'untrained'})"
        for mode, shown in (("greedy", "greedy"), ("sampled", "sampled T=1")):
            cells, more_sft = accuracy_cells(before, after, control, mode, d)
            table.add_row(label, shown, *cells, *([more_sft] if control else []))
    return table


def library_check(
    count: int, console: Console, progress: Callable[[int], Callable[[], None]] | None = None
) -> bool:
    """Generate `count` problems per task at difficulties 1, 5 and 10, verify every reference
    solution in the sandbox, print a table. True when all of them score reward 1.0."""
    problems = [
        p for name in all_tasks() for d in DIFFICULTIES for p in generate_problems(name, d, count, seed=0)
    ]
    start = time.perf_counter()
    completions = [get_task(p.task).reference_completion(p, "full") for p in problems]
    with Sandbox() as sandbox:
        tick = progress(len(problems)) if progress else None
        verdicts = verify_many(problems, completions, sandbox, progress=tick)
        isolation = sandbox.isolation
    elapsed = time.perf_counter() - start
    table = Table(
        "task", "category", "problems", "tests", "reference reward", "status", box=None, pad_edge=False
    )
    all_ok = True
    for name in all_tasks():
        rows = [(p, c, v) for p, c, v in zip(problems, completions, verdicts) if p.task == name]
        rewards = [compute_reward(p, c, v)[0] for p, c, v in rows]
        ok = all(r == 1.0 for r in rewards)
        all_ok &= ok
        tests = sum(len(p.tests or ()) or 1 for p, _, _ in rows)
        table.add_row(
            name, get_task(name).category, str(len(rows)), str(tests), f"{sum(rewards) / len(rewards):.2f}",
            "[green]ok[/green]" if ok else "[red]FAIL[/red]",
        )  # fmt: skip
    console.print(table)
    console.print(
        f"{len(problems)} problems from {len(all_tasks())} tasks at difficulties "
        f"{', '.join(map(str, DIFFICULTIES))}: reference solutions verified in {elapsed:.1f}s "
        f"({len(problems) / elapsed:.0f}/s). Sandbox: {isolation}"
    )
    return all_ok
