"""Wall-clock time to a held-out accuracy: axiom-rl's trainer against TRL's GRPOTrainer.

The same SFT'd built-in model (the quickstart's base: micro, Countdown difficulty 1), the same
Countdown training problems (one problems file, each trainer drawing from it in its own shuffled
order), the same reward (axiom-rl's verifier: TRL gets it through
`axiom_rl.integrations.trl.VerifiedReward`), the same work per step (16 prompts x 8 completions,
at most 24 tokens, temperature 1.0, beta 0.01, lr 2e-4), each trainer otherwise at its defaults
(axiom-rl: constant lr, its speed settings; TRL: its linear decay over a max_steps far beyond the
budget, so nearly constant). Each trains for the same wall time, saving a checkpoint every few
steps and recording when each step ended (axiom-rl's clock starts when `train` is called, model
loading included; TRL's when its training loop begins, after the trainer is built). Afterwards the
same evaluator (axiom-rl's, greedy, compact prompts) scores the checkpoints nearest before fixed
wall-clock points on the same held-out problems (the eval split), and the base at time 0.

Reported: accuracy against wall time for both (a table and a plot), and the time axiom-rl took to
reach TRL's final accuracy as a share of TRL's time (interpolated between points; "not reached"
when it never did), per seed and the median.

    python benchmarks/time_to_accuracy.py --minutes 10 --seeds 3      # the full comparison
    python benchmarks/time_to_accuracy.py --minutes 2 --seeds 1       # a quick check, ~10 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from axiom_rl.config import EvalConfig, SFTConfig, TrainConfig  # noqa: E402
from axiom_rl.eval.evaluate import evaluate  # noqa: E402
from axiom_rl.io import write_jsonl_atomic, write_text_atomic  # noqa: E402
from axiom_rl.quickstart import MAX_TOKENS, QuickstartConfig, sft_settings  # noqa: E402
from axiom_rl.tasks import generate_problems  # noqa: E402
from axiom_rl.train.checkpoint import checkpoints  # noqa: E402
from axiom_rl.train.grpo import train  # noqa: E402
from axiom_rl.train.sft import sft  # noqa: E402

PROMPTS, GENERATIONS, LR, BETA, TEMPERATURE = 16, 8, 2e-4, 0.01, 1.0
TRAIN_PROBLEMS = (
    12_000  # of the 12,444 distinct ones in the train split: neither trainer runs out in 10 minutes
)


def quiet(*_: Any, **__: Any) -> None:
    pass


def held_out(model: Path, db: Path, run: str, count: int) -> float:
    """Greedy accuracy on `count` eval-split Countdown problems of difficulty 1."""
    _, summary = evaluate(
        EvalConfig(model=str(model), tasks=["countdown"], difficulty="1", count=count, samples=1, temperature=0.0,
                   split="eval", max_completion_length=MAX_TOKENS, prompt_style="compact", db=str(db),
                   run_name=run, batch_size=128),
        say=quiet,
    )  # fmt: skip
    return summary[0]["success_rate"]


def run_axiom(
    base: Path, problems: Path, out: Path, seed: int, seconds: float, every: int
) -> dict[int, float]:
    """Train for `seconds`; {step: seconds since `train` was called, when the step ended}."""
    shutil.rmtree(out, ignore_errors=True)
    ended: dict[int, float] = {}
    start = time.perf_counter()
    train(
        TrainConfig(model=str(base), problems_file=str(problems), steps=10**6, prompts_per_step=PROMPTS,
                    num_generations=GENERATIONS, max_completion_length=MAX_TOKENS, lr=LR, beta=BETA,
                    temperature=TEMPERATURE, seed=seed, max_seconds=seconds, save_every=every, keep_checkpoints=0,
                    output_dir=str(out)),
        progress=lambda step, total, row: ended.__setitem__(step, time.perf_counter() - start),
        say=quiet,
    )  # fmt: skip
    return ended


def run_trl(
    base: Path, problems: list[Any], out: Path, seed: int, seconds: float, every: int
) -> dict[int, float]:
    """TRL's GRPOTrainer for `seconds` of its training loop; {step: seconds when it ended}."""
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from axiom_rl.integrations.hf_datasets import to_dataset
    from axiom_rl.integrations.trl import VerifiedReward

    shutil.rmtree(out, ignore_errors=True)
    ended: dict[int, float] = {}

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            ended[state.global_step] = time.perf_counter() - self.start
            if ended[state.global_step] >= seconds:
                control.should_training_stop = True
                control.should_save = True

    config = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=PROMPTS * GENERATIONS, num_generations=GENERATIONS,
        max_completion_length=MAX_TOKENS, temperature=TEMPERATURE, beta=BETA, learning_rate=LR, max_steps=10**5,
        save_strategy="steps", save_steps=every, save_only_model=True, logging_steps=10, report_to=[],
        use_cpu=True, seed=seed, disable_tqdm=True,
    )  # fmt: skip
    with VerifiedReward() as reward:
        trainer = GRPOTrainer(model=str(base), reward_funcs=[reward], args=config,
                              train_dataset=to_dataset(problems, style="compact"),
                              processing_class=AutoTokenizer.from_pretrained(base), callbacks=[Clock()])  # fmt: skip
        trainer.train()
    return ended


def trl_checkpoints(out: Path) -> list[tuple[int, Path]]:
    found = [(int(p.name.split("-")[1]), p) for p in out.glob("checkpoint-*") if (p / "config.json").exists()]
    return sorted(found)


def at_points(
    saved: list[tuple[int, Path]], ended: dict[int, float], points: list[float]
) -> list[tuple[float, Path | None]]:
    """For each wall-clock point, the newest checkpoint whose step had ended by then (None: none yet)."""
    chosen = []
    for t in points:
        ready = [(step, path) for step, path in saved if ended.get(step, float("inf")) <= t + 1e-9]
        chosen.append((t, ready[-1][1] if ready else None))
    return chosen


def time_to_reach(curve: list[tuple[float, float]], target: float) -> float | None:
    """The first time the curve reaches `target`, linearly between points (None: never)."""
    for (t0, a0), (t1, a1) in zip(curve, curve[1:]):
        if a1 >= target:
            if a0 >= target:
                return t0
            return t0 + (t1 - t0) * (target - a0) / (a1 - a0)
    return curve[0][0] if curve and curve[0][1] >= target else None


def base_to_train(card: Path, sft_steps: int) -> bool:
    """Whether the SFT base must be trained: a base left in --out by an earlier invocation is used
    again only when its model card says it had the SFT steps asked for (not one of another size)."""
    try:
        made = json.loads(card.read_text())
    except (OSError, ValueError):
        return True
    return not isinstance(made, dict) or made.get("sft_steps") != sft_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="training wall time of each trainer")
    parser.add_argument("--seeds", type=int, default=3, help="how many seeds (0, 1, ...)")
    parser.add_argument("--points", type=int, default=6, help="evaluation points after time 0")
    parser.add_argument("--eval-count", type=int, default=400, help="held-out problems")
    parser.add_argument("--sft-steps", type=int, default=700)
    parser.add_argument("--out", default="runs/time-to-accuracy")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seconds = args.minutes * 60
    points = [seconds * i / args.points for i in range(args.points + 1)]
    every = 5  # checkpoints: a few ms each for the micro model
    print(f"{args.minutes:g} minutes per trainer, {args.seeds} seed(s); {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, python {platform.python_version()}", flush=True)  # fmt: skip
    results: dict[str, Any] = {"minutes": args.minutes, "points": points, "seeds": {}}
    for seed in range(args.seeds):
        base = out / f"sft-s{seed}"
        if base_to_train(base / "final_model" / "axiom_rl.json", args.sft_steps):
            shutil.rmtree(base, ignore_errors=True)
            settings = {**sft_settings(QuickstartConfig(seed=seed)), "steps": args.sft_steps}
            sft(SFTConfig(**settings, output_dir=str(base), save_every=0), say=quiet)
        base = base / "final_model"
        problems = generate_problems("countdown", 1, TRAIN_PROBLEMS, seed=1000 + seed, split="train")
        problems_file = out / f"train-s{seed}.jsonl"
        write_jsonl_atomic(problems_file, (p.to_json() for p in problems))
        db = out / f"results-s{seed}.db"
        db.unlink(missing_ok=True)
        base_acc = held_out(base, db, "base", args.eval_count)
        curves: dict[str, list[tuple[float, float]]] = {}
        steps: dict[str, int] = {}
        for name in ("trl", "axiom-rl"):  # TRL first: a warm machine favours the one that runs second
            run_dir = out / f"{name}-s{seed}"
            if name == "axiom-rl":
                ended = run_axiom(base, problems_file, run_dir, seed, seconds, every)
                saved = [(step, path / "model") for step, path in checkpoints(run_dir)]
            else:
                ended = run_trl(base, problems, run_dir, seed, seconds, every)
                saved = trl_checkpoints(run_dir)
            steps[name] = max(ended) if ended else 0
            curve = [(0.0, base_acc)]
            for t, path in at_points(saved, ended, points)[1:]:
                curve.append(
                    (t, base_acc if path is None else held_out(path, db, f"{name}-{t:.0f}s", args.eval_count))
                )
            curves[name] = curve
            print(f"seed {seed} {name}: {steps[name]} steps in {args.minutes:g} min; accuracy "
                  + ", ".join(f"{t / 60:.1f} min {a:.1%}" for t, a in curve), flush=True)  # fmt: skip
        target = curves["trl"][-1][1]
        reached = time_to_reach(curves["axiom-rl"], target) if target > base_acc else None
        ratio = None if reached is None else reached / seconds
        results["seeds"][str(seed)] = {"curves": curves, "steps": steps, "trl_final": target, "ratio": ratio}
        if target <= base_acc:
            outcome = f"no better than the base ({base_acc:.1%}): no time to compare (a longer --minutes)"
        elif ratio is None:
            outcome = "axiom-rl did not reach it within the budget"
        else:
            outcome = f"axiom-rl reached it at {reached / 60:.2f} min = {ratio:.2f}x TRL's time"
        print(f"seed {seed}: TRL's final accuracy {target:.1%}; {outcome}", flush=True)
    write_text_atomic(out / "results.json", json.dumps(results, indent=1) + "\n")
    ratios = [r["ratio"] for r in results["seeds"].values()]
    reached_all = [r for r in ratios if r is not None]
    if reached_all:
        print(f"time to TRL's final accuracy, axiom-rl / TRL: median {statistics.median(reached_all):.2f}x "
              f"(range {min(reached_all):.2f}-{max(reached_all):.2f}x, reached in {len(reached_all)} of {len(ratios)} seeds)")  # fmt: skip
    else:
        print("no seed gave a time to TRL's final accuracy (see each seed's line)")
    plot(results, out / "time_to_accuracy.png")
    print(f"results: {out / 'results.json'}, plot: {out / 'time_to_accuracy.png'}")


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, colour in (("axiom-rl", "tab:blue"), ("trl", "tab:orange")):
        runs = [r["curves"][name] for r in results["seeds"].values()]
        for curve in runs:
            ax.plot([t / 60 for t, _ in curve], [a for _, a in curve], color=colour, alpha=0.3, linewidth=1)
        median = [statistics.median(c[i][1] for c in runs) for i in range(len(runs[0]))]
        label = "axiom-rl" if name == "axiom-rl" else "TRL GRPOTrainer"
        ax.plot([t / 60 for t, _ in runs[0]], median, color=colour, linewidth=2, marker="o",
                label=f"{label} (median of {len(runs)} seed{'s' * (len(runs) > 1)})")  # fmt: skip
    ax.set_xlabel("training wall time (minutes)")
    ax.set_ylabel("held-out accuracy (Countdown d1, greedy)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
