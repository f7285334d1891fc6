"""Does GRPO teach the built-in model to repair infeasible models? or_debug, difficulties 1-2.

Per seed: the built-in micro model is SFT'd on reference repairs (compact form: the model a
constraint per line, the answer without spaces), then
    grpo      GRPO with the `or_debug` reward (1.0 repaired, 0.5 x the diagnosis' overlap with
              the IIS, 0.1 for a readable answer), 8 prompts x 8 completions, temperature 1.0;
    sft-more  the control: more SFT on reference repairs (of fresh problems) for the GRPO arm's
              wall time, from the same base.
Held-out success (the eval split: no problem of it was trained on) before and after, greedy and
sampled (4 samples at temperature 1.0), 100 problems per difficulty.

    python experiments/or_debug.py run --seeds 0 1 2 --out runs/or-debug
    python experiments/or_debug.py report --out runs/or-debug

Results go to OUT/results.json (an arm already there is not run again), attempts to
OUT/results.db; `report` prints the table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from curriculum import Results, Setup, grpo, quiet, sft_base, spread  # noqa: E402

from axiom_rl.config import EvalConfig, SFTConfig  # noqa: E402
from axiom_rl.eval.evaluate import evaluate  # noqa: E402
from axiom_rl.train.sft import sft  # noqa: E402

OR_DEBUG = Setup(
    key="or_debug", tasks=("or_debug",), difficulty="1-2", prompts=8, generations=8, max_tokens=160,
    temperature=1.0, lr=2e-4, beta=0.01, by="difficulty",
    sft={"model": "tiny", "tiny_size": "micro", "tasks": ["or_debug"], "difficulty": "1-2", "batch_size": 32,
         "lr": 2e-3, "lr_schedule": "cosine", "warmup_steps": 20},
)  # fmt: skip
MODES = {"greedy": {"samples": 1, "temperature": 0.0}, "sampled": {"samples": 4, "temperature": 1.0}}


def success(model: Path, run: str, out: Path, seed: int, count: int) -> dict[str, float]:
    """Held-out success, greedy and sampled, over difficulties 1-2."""
    rates = {}
    for mode, settings in MODES.items():
        _, summary = evaluate(
            EvalConfig(model=str(model), tasks=["or_debug"], difficulty=OR_DEBUG.difficulty, count=count,
                       seed=seed, split="eval", max_completion_length=OR_DEBUG.max_tokens,
                       db=str(out / "results.db"), run_name=f"{run}-{mode}", batch_size=100, **settings),
            say=quiet,
        )  # fmt: skip
        rates[mode] = statistics.mean(row["success_rate"] for row in summary)
    return rates


def run(args: argparse.Namespace) -> None:
    out, results = Path(args.out), Results(Path(args.out))
    for seed in args.seeds:
        base = sft_base(out, seed, results, args.sft_steps, OR_DEBUG)
        key = f"or_debug/s{seed}"
        if results.get(f"{key}/base") is None:
            results.put(f"{key}/base", success(base, f"s{seed}-base", out, seed, args.eval_count))
        if results.get(f"{key}/grpo") is None:
            result, seconds = grpo(base, out / f"or_debug-s{seed}-grpo", seed, args.steps, 0, OR_DEBUG)
            rewards = [row["reward_mean"] for row in result.metrics]
            after = success(
                out / f"or_debug-s{seed}-grpo" / "final_model", f"s{seed}-grpo", out, seed, args.eval_count
            )
            results.put(f"{key}/grpo", {**after, "wall_s": seconds, "reward_first": statistics.mean(rewards[:5]),
                                         "reward_last": statistics.mean(rewards[-5:])})  # fmt: skip
            print(f"seed {seed} grpo {seconds:.0f}s {after}", flush=True)
        if results.get(f"{key}/sft-more") is None:
            budget = results.get(f"{key}/grpo")["wall_s"]
            run_dir = out / f"or_debug-s{seed}-sft-more"
            start = time.perf_counter()
            # From the base, on problems of a seed the base never saw, for the GRPO arm's time.
            settings = {**OR_DEBUG.sft, "model": str(base)}
            sft(SFTConfig(**settings, steps=100_000, seed=seed + 1000, max_seconds=budget, output_dir=str(run_dir),
                          save_every=0), say=quiet)  # fmt: skip
            seconds = time.perf_counter() - start
            after = success(run_dir / "final_model", f"s{seed}-sft-more", out, seed, args.eval_count)
            results.put(f"{key}/sft-more", {**after, "wall_s": seconds})
            print(f"seed {seed} sft-more {seconds:.0f}s {after}", flush=True)


def report(args: argparse.Namespace) -> None:
    data = Results(Path(args.out)).data
    seeds = sorted({int(k.split("/")[1][1:]) for k in data if k.startswith("or_debug/s")})
    print(f"or_debug difficulties 1-2, held-out success (eval split), seeds {seeds}")
    print(f"{'arm':<10} {'greedy':>22} {'sampled (4 at T=1.0)':>24} {'wall s':>8}")
    for arm in ("base", "grpo", "sft-more"):
        rows = [data[f"or_debug/s{s}/{arm}"] for s in seeds if f"or_debug/s{s}/{arm}" in data]
        if not rows:
            continue
        wall = spread([r["wall_s"] for r in rows]) if "wall_s" in rows[0] else ""
        print(
            f"{arm:<10} {spread([100 * r['greedy'] for r in rows]):>22} {spread([100 * r['sampled'] for r in rows]):>24} {wall:>8}"
        )
    for s in seeds:
        g = data.get(f"or_debug/s{s}/grpo")
        if g:
            print(
                f"seed {s}: GRPO reward (mean of 5 steps) {g['reward_first']:.3f} -> {g['reward_last']:.3f}"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("experiment", choices=("run", "report"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=100, help="GRPO steps")
    parser.add_argument("--sft-steps", type=int, default=600)
    parser.add_argument("--eval-count", type=int, default=100, help="held-out problems per difficulty")
    parser.add_argument("--out", default="runs/or-debug")
    args = parser.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    {"run": run, "report": report}[args.experiment](args)


if __name__ == "__main__":
    main()
