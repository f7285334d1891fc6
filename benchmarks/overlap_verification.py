"""Training steps with the sandbox's verification overlapped (`--overlap-verification on`) and not
(`off`), alternating in one invocation.

Every completion must reach the sandbox, and a model of our own writes no code. So the problems
are assert-style (HumanEval's form) with a prelude that ends in a comment: whatever the model
writes lands there, and the program passes unless the completion breaks the line. Each of a
step's prompts x G completions is then one sandbox run, as in training on code, whatever the
model writes.

It prints, per mode, the step time (median and range over rounds x steps, after two warm-up
steps per run), the time a step still waited for its verdicts (time_reward_s), and the ratio of
the step times, on / off.

    python benchmarks/overlap_verification.py [--rounds 3] [--steps 8] [--device cpu|cuda]
    python benchmarks/overlap_verification.py --device cuda --model PATH --completion 512
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from axiom_rl.config import TrainConfig  # noqa: E402
from axiom_rl.io import write_jsonl_atomic  # noqa: E402
from axiom_rl.train.grpo import train  # noqa: E402
from axiom_rl.types import Problem  # noqa: E402

MODES = ("off", "on")


def commented_out_problem(i: int) -> Problem:
    """An assert-style problem whose completion lands in a comment: the sandbox runs every
    completion, which passes unless it breaks the line."""
    prelude = f"def f():\n    return {i}\n# "
    return Problem(
        id=f"comment/{i}",
        task="humaneval",
        difficulty=0,
        prompt=f"f returns {i}",
        entry_point="f",
        test_code=f"def check(candidate):\n    assert candidate() == {i}\n",
        reference_solution=prelude,
        metadata={"prelude": prelude, "judge_prelude": ""},
    )


def run(
    mode: str, args: argparse.Namespace, problems: Path, out: Path, seed: int
) -> tuple[list[float], list[float]]:
    """(seconds per step, seconds waited for verdicts per step), warm-up steps left out."""
    cfg = TrainConfig(
        model=args.model,
        device=args.device,
        problems_file=str(problems),
        steps=args.steps + 2,
        prompts_per_step=args.prompts,
        num_generations=args.generations,
        max_completion_length=args.completion,
        beta=0.04,
        overlap_verification=mode,
        output_dir=str(out),
        save_every=0,
        seed=seed,
    )
    ends: list[float] = []
    result = train(cfg, progress=lambda *_: ends.append(time.perf_counter()), say=lambda _: None)
    return [b - a for a, b in zip(ends[1:], ends[2:])], [row["time_reward_s"] for row in result.metrics[2:]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="runs per mode, alternating off / on")
    ap.add_argument("--steps", type=int, default=8, help="measured steps per run (after 2 warm-up steps)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="tiny", help="'tiny' or a model directory")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--completion", type=int, default=64, help="most tokens per completion")
    args = ap.parse_args()
    if args.rounds < 1 or args.steps < 1:
        ap.error("--rounds and --steps must be at least 1")
    steps: dict[str, list[float]] = {m: [] for m in MODES}
    waits: dict[str, list[float]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        problems = Path(tmp) / "problems.jsonl"
        write_jsonl_atomic(problems, [commented_out_problem(i).to_dict() for i in range(2 * args.prompts)])
        for r in range(args.rounds):
            for mode in MODES:
                s, w = run(mode, args, problems, Path(tmp) / f"{mode}{r}", seed=r)
                steps[mode] += s
                waits[mode] += w
                print(
                    f"   round {r + 1}/{args.rounds} {mode}: {statistics.median(s) * 1e3:.1f} ms/step",
                    flush=True,
                )
    print(
        f"== {args.prompts} x {args.generations} completions of at most {args.completion} tokens a step, each run "
        f"in the sandbox; model {args.model} on {args.device}; {os.cpu_count()} cores"
    )
    for mode in MODES:
        s, w = steps[mode], waits[mode]
        print(
            f"   overlap {mode:3s}  step {statistics.median(s) * 1e3:7.1f} ms ({min(s) * 1e3:.1f}-{max(s) * 1e3:.1f}), "
            f"waiting for verdicts {statistics.median(w) * 1e3:6.1f} ms, n = {len(s)}"
        )
    print(f"   on : off step time {statistics.median(steps['on']) / statistics.median(steps['off']):.3f}x")


if __name__ == "__main__":
    main()
