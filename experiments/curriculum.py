"""Curriculum measured: problem sources against uniform sampling, and training on what SFT failed.

Both experiments start from the quickstart's SFT'd base (the built-in micro model, 700 SFT steps
on Countdown difficulty 1; one base per seed) and train with the quickstart's GRPO settings
(16 prompts x 8 completions, lr 2e-4 cosine, temperature 1.0, completions of at most 24 tokens)
on Countdown difficulties 1-4. Every arm of a seed gets the same number of optimizer steps: the
same prompts and completions per step, so the same work; each arm's wall time is measured and
printed beside it (a step-count budget, unlike a wall-clock one, does not move with the host's
load). Held-out accuracy is measured on the eval split, sampled at temperature 1.0.

    sources   uniform, learnability (and with replay), adaptive, schedule: the zero-variance fraction per step,
              held-out accuracy per difficulty at checkpoints along the run
    failures  the base evaluated on train-split problems, its failures collected (axiom-rl
              failures collect), then GRPO on the failures source, DGRO on it (the seeds'
              settings: beta_kl 0.001, beta_reward 2.0), and more SFT on the failed problems'
              reference solutions for their median wall time; held-out accuracy on the problems
              the base failed and on the rest (forgetting), beside the sources experiment's
              uniform arm on the same held-out problems (run `sources` first)

    python experiments/curriculum.py sources --seeds 0 1 2 --out runs/curriculum
    python experiments/curriculum.py failures --seeds 0 1 2 --out runs/curriculum
    python experiments/curriculum.py report --out runs/curriculum

Results go to OUT/results.json (an arm already there is not run again: a stopped experiment
resumes), every attempt to OUT/results.db, plots to OUT/*.png; `report` prints the tables.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from axiom_rl.config import EvalConfig, SFTConfig, TrainConfig  # noqa: E402
from axiom_rl.eval.evaluate import evaluate  # noqa: E402
from axiom_rl.eval.failures import failed_problems  # noqa: E402
from axiom_rl.eval.store import ResultsDB  # noqa: E402
from axiom_rl.io import write_jsonl_atomic  # noqa: E402
from axiom_rl.quickstart import MAX_TOKENS, QuickstartConfig, sft_settings  # noqa: E402
from axiom_rl.recipes.common import Results  # noqa: E402
from axiom_rl.train.checkpoint import checkpoints  # noqa: E402
from axiom_rl.train.grpo import train  # noqa: E402
from axiom_rl.train.sft import sft  # noqa: E402


@dataclass(frozen=True)
class Setup:
    """What one comparison trains on and how: its tasks and difficulties, the GRPO settings every
    arm shares, its SFT base, and how held-out accuracy is broken down (`by`: difficulty or task)."""

    key: str  # results.json's prefix and the run directories'
    tasks: tuple[str, ...]
    difficulty: str
    prompts: int
    generations: int
    max_tokens: int
    temperature: float  # of the rollout and of held-out sampling
    lr: float
    beta: float
    by: str
    sft: dict[str, Any]

    @property
    def levels(self) -> list[int]:
        low, _, high = self.difficulty.partition("-")
        return list(range(int(low), int(high or low) + 1))

    @property
    def prefix(self) -> str:
        """Of its run directories and run names: none for Countdown, whose runs' names predate the
        code configuration's."""
        return "" if self.key == "sources" else f"{self.key}-"

    def columns(self) -> list[str]:
        return [str(d) for d in self.levels] if self.by == "difficulty" else list(self.tasks)


# The quickstart's GRPO settings and SFT base (on difficulty 1), on difficulties 1-4.
COUNTDOWN = Setup(
    key="sources", tasks=("countdown",), difficulty="1-4", prompts=16, generations=8, max_tokens=MAX_TOKENS,
    temperature=1.0, lr=2e-4, beta=0.01, by="difficulty",
    sft={k: v for k, v in sft_settings(QuickstartConfig()).items() if k not in ("seed", "steps")},
)  # fmt: skip

# Six code tasks of three families, difficulties 1-5. After SFT the built-in model writes each
# task's one reference program; sampled at 0.6 it gets 95-100% of them right (nothing left to
# learn), at 1.0 between 8% and 30%, by task: the rollout and held-out sampling run at 1.0, with
# the learning rate and KL weight that code needs (docs/results.md: 2e-4 and 0.01 collapsed it).
CODE_TASKS = ("fizzbuzz", "is_palindrome", "max_subarray", "house_robber", "edit_distance", "lcs")
CODE = Setup(
    key="code", tasks=CODE_TASKS,
    difficulty="1-5", prompts=4, generations=8, max_tokens=340, temperature=1.0, lr=2e-5, beta=0.04, by="task",
    sft={"model": "tiny", "tiny_size": "micro", "tasks": list(CODE_TASKS), "difficulty": "1-5", "batch_size": 16, "lr": 2e-3, "lr_schedule": "cosine",
         "warmup_steps": 20},
)  # fmt: skip


def quiet(message: str) -> None:
    pass


def sft_base(out: Path, seed: int, results: Results, steps: int, setup: Setup = COUNTDOWN) -> Path:
    """The setup's SFT'd base for this seed (no time cap), trained once."""
    prefix = setup.prefix
    final = out / f"{prefix}sft-s{seed}" / "final_model"
    if not (final / "axiom_rl.json").exists():
        shutil.rmtree(final.parent, ignore_errors=True)  # an SFT stopped before it finished
        start = time.perf_counter()
        sft(
            SFTConfig(**setup.sft, steps=steps, seed=seed, output_dir=str(final.parent), save_every=0),
            say=quiet,
        )
        results.put(f"{prefix}sft/s{seed}", {"seconds": time.perf_counter() - start})
        print(f"seed {seed}: {prefix}SFT base in {time.perf_counter() - start:.0f}s", flush=True)
    return final


def held_out(
    model: Path, run: str, out: Path, seed: int, count: int, split: str = "eval", setup: Setup = COUNTDOWN
) -> dict[str, float]:
    """Sampled (4 samples at the setup's temperature) accuracy on `count` problems of each task
    and difficulty, per difficulty or per task (the mean over the other)."""
    _, summary = evaluate(
        EvalConfig(model=str(model), tasks=list(setup.tasks), difficulty=setup.difficulty, count=count, samples=4,
                   temperature=setup.temperature, seed=seed, split=split, max_completion_length=setup.max_tokens,
                   db=str(out / "results.db"), run_name=run, batch_size=128),
        say=quiet,
    )  # fmt: skip
    rates: dict[str, list[float]] = {}
    for row in summary:
        rates.setdefault(str(row[setup.by]), []).append(row["success_rate"])
    return {key: statistics.mean(values) for key, values in rates.items()}


def grpo(
    model: Path, run_dir: Path, seed: int, steps: int, every: int, setup: Setup = COUNTDOWN, **settings: Any
) -> tuple[Any, float]:
    shutil.rmtree(run_dir, ignore_errors=True)  # an arm stopped before its results were saved
    start = time.perf_counter()
    result = train(
        TrainConfig(model=str(model), tasks=list(setup.tasks), difficulty=setup.difficulty, steps=steps,
                    prompts_per_step=setup.prompts, num_generations=setup.generations,
                    max_completion_length=setup.max_tokens, lr=setup.lr, lr_schedule="cosine",
                    temperature=setup.temperature, seed=seed, output_dir=str(run_dir), save_every=every,
                    keep_checkpoints=0, **{"beta": setup.beta, **settings}),
        say=quiet,
    )  # fmt: skip
    return result, time.perf_counter() - start


def step_rows(metrics: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per step: the zero-variance fraction, the training accuracy, and the seconds the step's
    stages took (rollout, reward, reference, update)."""
    stages = ("time_rollout_s", "time_reward_s", "time_reference_s", "time_update_s")
    return {
        "zero_std_frac": [m["zero_std_frac"] for m in metrics],
        "reward_std": [m["reward_std"] for m in metrics],
        "accuracy": [m["accuracy"] for m in metrics],
        "seconds": [sum(m.get(k, 0.0) for k in stages) for m in metrics],
        "difficulty_mean": [m.get("source/difficulty", float("nan")) for m in metrics],
    }


# ------------------------------------------------------------------------------------- sources

SOURCES = {
    "uniform": {"name": "uniform"},
    "learnability": {"name": "learnability"},
    # half of each batch drawn again from problems whose groups split, each up to 8 times
    "learnability-replay": {"name": "learnability", "replay": 0.5, "uses": 8},
    "adaptive": {"name": "adaptive"},
    # the ramp spread evenly over the run: each difficulty for a quarter of its problems
    "schedule": {"name": "schedule"},
}


def run_sources(args: argparse.Namespace, setup: Setup = COUNTDOWN) -> None:
    out, results = Path(args.out), Results(Path(args.out))
    prefix = setup.prefix
    for seed in args.seeds:
        base = sft_base(out, seed, results, args.sft_steps, setup)

        def measure(model: Path, run: str, seed: int = seed) -> dict[str, float]:
            return held_out(model, prefix + run, out, seed, args.eval_count, setup=setup)

        if results.get(f"{setup.key}/s{seed}/base") is None:
            results.put(f"{setup.key}/s{seed}/base", measure(base, f"s{seed}-base"))
        for arm in args.arms:
            key = f"{setup.key}/s{seed}/{arm}"
            if results.get(key) is not None:
                continue
            source = dict(SOURCES[arm])
            if arm == "schedule":
                source["every"] = args.steps * setup.prompts // len(setup.levels)
            run_dir = out / f"{prefix}s{seed}-{arm}"
            result, seconds = grpo(base, run_dir, seed, args.steps, args.eval_every, setup, source=source)
            curve = {
                step: measure(path / "model", f"s{seed}-{arm}-step{step}")
                for step, path in checkpoints(run_dir)
            }
            curve[args.steps] = measure(run_dir / "final_model", f"s{seed}-{arm}-final")
            results.put(
                key, {"wall_s": seconds, "steps": result.steps, "curve": curve, **step_rows(result.metrics)}
            )
            final = statistics.mean(curve[args.steps].values())
            zero = statistics.mean(step_rows(result.metrics)["zero_std_frac"])
            print(
                f"{prefix}seed {seed} {arm:<12} {seconds:5.0f}s  held-out {final:.3f}  zero-variance {zero:.3f}",
                flush=True,
            )


# ------------------------------------------------------------------------------------ failures


def held_out_split(db_path: Path, base_run: str, run: str) -> dict[str, float]:
    """Accuracy of `run` on the held-out problems the base run failed with every sample, and on
    the rest (forgetting), from the database."""
    with ResultsDB(str(db_path)) as db:
        base: dict[str, list[bool]] = {}
        for a in db.attempts(db.require_run(base_run)):
            base.setdefault(a["problem_id"], []).append(a["status"] == "passed")
        after: dict[str, list[bool]] = {}
        for a in db.attempts(db.require_run(run)):
            after.setdefault(a["problem_id"], []).append(a["status"] == "passed")
    failed = [p for p, v in base.items() if not any(v)]
    rest = [p for p, v in base.items() if any(v)]
    rate = lambda ids: sum(sum(after[p]) for p in ids) / max(1, sum(len(after[p]) for p in ids))  # noqa: E731
    return {"failed": rate(failed), "rest": rate(rest), "failed_n": len(failed), "rest_n": len(rest)}


def run_failures(args: argparse.Namespace) -> None:
    out, results = Path(args.out), Results(Path(args.out))
    for seed in args.seeds:
        base = sft_base(out, seed, results, args.sft_steps)
        failures = out / f"failures-s{seed}.jsonl"
        if not failures.exists():
            held_out(base, f"s{seed}-base-train", out, seed, args.collect_count, split="train")
            with ResultsDB(str(out / "results.db")) as db:
                lines = failed_problems(db, f"s{seed}-base-train")
            write_jsonl_atomic(failures, lines)
            print(f"seed {seed}: {len(lines)} failed problems collected", flush=True)
        # The held-out problems and the base's and uniform GRPO's attempts on them are the sources
        # experiment's (the same seed, split and count): run it first.
        base_run = f"s{seed}-base"
        for arm, run in (("base", base_run), ("uniform", f"s{seed}-uniform-final")):
            uniform = results.get(f"sources/s{seed}/uniform")
            if results.get(f"failures/s{seed}/{arm}") is None and uniform is not None:
                metrics = out / f"s{seed}-uniform" / "metrics.jsonl"
                rows = (
                    [json.loads(line) for line in metrics.read_text().splitlines()]
                    if metrics.exists()
                    else []
                )
                extra = {} if arm == "base" else {"wall_s": uniform["wall_s"], **step_rows(rows)}
                results.put(
                    f"failures/s{seed}/{arm}", {**held_out_split(out / "results.db", base_run, run), **extra}
                )
        arms = {
            # the quickstart's beta, as uniform's: the source is the only difference
            "failures-grpo": {"source": {"name": "failures", "file": str(failures), "fresh": 0.25}},
            # the seeds' DGRO settings
            "failures-dgro": {
                "beta": 0.001, "source": {"name": "failures", "file": str(failures), "fresh": 0.25},
                "advantage": "dgro", "advantage_params": {"beta_reward": 2.0}, "loss_type": "dgro",
            },
        }  # fmt: skip
        walls = []
        for arm, settings in arms.items():
            key = f"failures/s{seed}/{arm}"
            if results.get(key) is None:
                run_dir = out / f"s{seed}-f-{arm}"
                result, seconds = grpo(base, run_dir, seed, args.steps, 0, **settings)
                held_out(run_dir / "final_model", f"s{seed}-f-{arm}", out, seed, args.eval_count)
                split = held_out_split(out / "results.db", base_run, f"s{seed}-f-{arm}")
                results.put(
                    key, {"wall_s": seconds, "steps": result.steps, **split, **step_rows(result.metrics)}
                )
                print(f"seed {seed} {arm:<14} {seconds:5.0f}s  failed {split['failed']:.3f}  rest {split['rest']:.3f}",
                      flush=True)  # fmt: skip
            walls.append(results.get(key)["wall_s"])
        key = f"failures/s{seed}/more-sft"
        if results.get(key) is None:
            budget = statistics.median(walls)
            run_dir = out / f"s{seed}-f-more-sft"
            settings = dict(
                sft_settings(QuickstartConfig(seed=seed)), model=str(base), steps=10**6, warmup_steps=0
            )
            for name in ("tasks", "difficulty"):
                settings.pop(name)
            shutil.rmtree(run_dir, ignore_errors=True)
            start = time.perf_counter()
            sft(SFTConfig(**settings, problems_file=str(failures), max_seconds=budget, output_dir=str(run_dir),
                          save_every=0), say=quiet)  # fmt: skip
            seconds = time.perf_counter() - start
            held_out(run_dir / "final_model", f"s{seed}-f-more-sft", out, seed, args.eval_count)
            split = held_out_split(out / "results.db", base_run, f"s{seed}-f-more-sft")
            results.put(key, {"wall_s": seconds, **split})
            print(f"seed {seed} more-sft       {seconds:5.0f}s  failed {split['failed']:.3f}  rest {split['rest']:.3f}",
                  flush=True)  # fmt: skip


# -------------------------------------------------------------------------------------- report


def spread(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}" if values else "-"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def report_sources(data: dict[str, Any], setup: Setup, out: Path, plt: Any) -> None:
    """The sources' table, their gains over uniform seed by seed, and OUT/<key>.png."""
    seeds = sorted({int(k.split("/")[1][1:]) for k in data if k.startswith(f"{setup.key}/")})
    arms = [a for a in SOURCES if any(f"{setup.key}/s{s}/{a}" in data for s in seeds)]
    if not arms:
        return
    columns = setup.columns()
    names = [f"d{c}" for c in columns] if setup.by == "difficulty" else columns
    what = f"difficulties {setup.difficulty}" if setup.by == "difficulty" else "tasks"
    print(f"## {setup.key}: held-out sampled accuracy (mean of {what}), zero-variance fraction")
    print(f"tasks {', '.join(setup.tasks)}; difficulties {setup.difficulty}; seeds {seeds}; "
          "mean ± standard deviation over seeds\n")  # fmt: skip
    print(
        f"| source | seeds | wall s | zero-variance (mean over steps) | last 100 steps | {' | '.join(names)} | mean |"
    )
    print("| --- | ---: | ---: | ---: | ---: |" + " ---: |" * (len(columns) + 1))
    base = [data[f"{setup.key}/s{s}/base"] for s in seeds if f"{setup.key}/s{s}/base" in data]
    cells = [spread([b[c] for b in base]) for c in columns]
    print(
        f"| SFT base | {len(base)} | - | - | - | {' | '.join(cells)} | {spread([statistics.mean(b.values()) for b in base])} |"
    )
    for arm in arms:
        runs = [data[f"{setup.key}/s{s}/{arm}"] for s in seeds if f"{setup.key}/s{s}/{arm}" in data]
        final = [r["curve"][str(max(map(int, r["curve"])))] for r in runs]
        print(
            f"| {arm} | {len(runs)} | {spread([r['wall_s'] for r in runs])} | {spread([statistics.mean(r['zero_std_frac']) for r in runs])}"
            f" | {spread([statistics.mean(r['zero_std_frac'][-100:]) for r in runs])}"
            f" | {' | '.join(spread([f[c] for f in final]) for c in columns)}"
            f" | {spread([statistics.mean(f.values()) for f in final])} |"
        )
    print("\nAgainst uniform, seed by seed (mean ± standard deviation of the per-seed figures):\n")
    print(
        "| source | held-out mean, pts over uniform | zero-variance ÷ uniform's | reaches uniform's final at (× its steps) |"
    )
    print("| --- | ---: | ---: | ---: |")
    for arm in arms:
        if arm == "uniform":
            continue
        gains, ratios, reach = [], [], []
        for s in seeds:
            a, u = data.get(f"{setup.key}/s{s}/{arm}"), data.get(f"{setup.key}/s{s}/uniform")
            if not (a and u):
                continue
            last = str(max(map(int, u["curve"])))
            target = statistics.mean(u["curve"][last].values())
            gains.append(100 * (statistics.mean(a["curve"][last].values()) - target))
            ratios.append(statistics.mean(a["zero_std_frac"]) / statistics.mean(u["zero_std_frac"]))
            hit = [
                int(k)
                for k in sorted(a["curve"], key=int)
                if statistics.mean(a["curve"][k].values()) >= target
            ]
            reach.append(hit[0] / int(last) if hit else float("nan"))
        shown = ", ".join("not reached" if r != r else f"{r:.1f}" for r in reach)
        print(f"| {arm} | {spread(gains)} | {spread(ratios)} | {shown} |")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for arm in arms:
        ran = [s for s in seeds if f"{setup.key}/s{s}/{arm}" in data]
        runs = [data[f"{setup.key}/s{s}/{arm}"] for s in ran]
        n = min(len(r["zero_std_frac"]) for r in runs)
        mean = [statistics.mean(r["zero_std_frac"][i] for r in runs) for i in range(n)]
        window = 25
        smooth = [statistics.mean(mean[max(0, i - window + 1) : i + 1]) for i in range(n)]
        label = f"{arm} (seeds {', '.join(map(str, ran))})"
        ax1.plot(range(1, n + 1), smooth, label=label)
        steps = sorted(int(k) for k in runs[0]["curve"])
        acc = [statistics.mean(statistics.mean(r["curve"][str(k)].values()) for r in runs) for k in steps]
        base_mean = statistics.mean(statistics.mean(data[f"{setup.key}/s{s}/base"].values()) for s in ran)
        ax2.plot([0, *steps], [base_mean, *acc], marker="o", label=label)
    ax1.set(xlabel="step", ylabel="zero-variance fraction", title="25-step moving average", ylim=(0, 1))
    ax2.set(xlabel="step", ylabel="held-out sampled accuracy", title=f"mean of {what}")
    ax2.set_ylim(bottom=0)  # from zero: a few attempts' noise is not drawn as a trend
    for ax in (ax1, ax2):
        ax.legend()
        ax.grid(alpha=0.3)
    tasks = "Countdown" if setup is COUNTDOWN else f"{len(setup.tasks)} code tasks"
    fig.suptitle(f"{tasks}, difficulties {setup.difficulty}, from an SFT base; mean of each arm's seeds")
    fig.tight_layout()
    fig.savefig(out / f"{setup.key}.png", dpi=110)
    print(f"\nplot: {out / f'{setup.key}.png'}")


def report(args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out, results = Path(args.out), Results(Path(args.out))
    data = results.data
    for setup in (COUNTDOWN, CODE):
        report_sources(data, setup, out, plt)
    fseeds = sorted({int(k.split("/")[1][1:]) for k in data if k.startswith("failures/")})
    if fseeds:
        print("\n## failures: held-out accuracy on the problems the SFT base failed, and on the rest")
        print(f"seeds {fseeds}; mean ± standard deviation over seeds\n")
        print("| arm | wall s | zero-variance | base failed | rest (forgetting) |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for arm in ("base", "uniform", "failures-grpo", "failures-dgro", "more-sft"):
            runs = [data[f"failures/s{s}/{arm}"] for s in fseeds if f"failures/s{s}/{arm}" in data]
            if not runs:
                continue
            zero = (
                spread([statistics.mean(r["zero_std_frac"]) for r in runs])
                if "zero_std_frac" in runs[0]
                else "-"
            )
            wall = spread([r["wall_s"] for r in runs]) if "wall_s" in runs[0] else "-"
            print(
                f"| {arm} | {wall} | {zero} | {spread([r['failed'] for r in runs])} | {spread([r['rest'] for r in runs])} |"
            )
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        for arm in ("uniform", "failures-grpo", "failures-dgro"):
            runs = [data[f"failures/s{s}/{arm}"] for s in fseeds if f"failures/s{s}/{arm}" in data]
            for ax, key in ((ax1, "zero_std_frac"), (ax2, "reward_std")):
                if not runs or key not in runs[0]:
                    continue
                n = min(len(r[key]) for r in runs)
                mean = [statistics.mean(r[key][i] for r in runs) for i in range(n)]
                smooth = [statistics.mean(mean[max(0, i - 24) : i + 1]) for i in range(n)]
                ax.plot(range(1, n + 1), smooth, label=arm)
        ax1.set(xlabel="step", ylabel="zero-variance fraction", title="25-step moving average", ylim=(0, 1))
        ax2.set(xlabel="step", ylabel="reward std in the batch", title="25-step moving average")
        for ax in (ax1, ax2):
            ax.legend()
            ax.grid(alpha=0.3)
        fig.suptitle(f"Training on what the SFT base failed, mean of seeds {fseeds}")
        fig.tight_layout()
        fig.savefig(out / "failures.png", dpi=110)
        print(f"\nplot: {out / 'failures.png'}")


# Per experiment: GRPO steps of every arm, steps between held-out evaluations, held-out problems
# per task and difficulty, the base's SFT steps. Countdown's are the quickstart's; a code step
# verifies 32 programs of up to 340 tokens, so the code runs are shorter.
DEFAULTS = {
    "sources": {"steps": 580, "eval_every": 116, "eval_count": 200, "sft_steps": 700},
    "failures": {"steps": 580, "eval_every": 116, "eval_count": 200, "sft_steps": 700},
    "code": {"steps": 80, "eval_every": 40, "eval_count": 4, "sft_steps": 200},
    "report": {},
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("experiment", choices=tuple(DEFAULTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", choices=tuple(SOURCES), default=list(SOURCES))
    parser.add_argument(
        "--steps", type=int, help="GRPO steps of every arm (Countdown: 580, the quickstart's; code: 80)"
    )
    parser.add_argument("--eval-every", type=int, help="steps between held-out evaluations (116; code: 40)")
    parser.add_argument(
        "--eval-count", type=int, help="held-out problems per task and difficulty (200; code: 4)"
    )
    parser.add_argument("--collect-count", type=int, default=400, help="train-split problems per difficulty")
    parser.add_argument(
        "--sft-steps", type=int, help="the base's SFT steps (700, the quickstart's; code: 200)"
    )
    parser.add_argument("--out", default="runs/curriculum")
    args = parser.parse_args(argv)
    for name, value in DEFAULTS[args.experiment].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    run = {
        "sources": run_sources,
        "code": lambda a: run_sources(a, CODE),
        "failures": run_failures,
        "report": report,
    }
    run[args.experiment](args)


if __name__ == "__main__":
    main()
