"""Rollouts whose completions end at different lengths, with the rows that finished left out of
the decode step (`drop`, the default) and kept in it to the end (`keep`), alternating in one
process.

A rollout lasts as long as its longest completion. `keep` (axiom-rl before 2026-11-27) runs every
row through every token step, the finished ones fed padding; `drop` hands the C++ decode step only
the rows still going, from the step after each row's last token, in whole shares of the step's
split of rows between its threads (rollout/fast.py's _Decoding). Both sample the same tokens from
the same seed: the script checks it on every repeat.

The completions: a random built-in model samples characters near uniformly, and a row ends at the
first of the `--stops` characters it samples, or at `--completion` tokens: lengths spread like those
of a policy whose answers end at varied points (with the 4 default stop characters of the 259-token
vocabulary, a median of 32 tokens and a mean of 47 at a 256-token budget, the longest row of most
rollouts over 150). It prints, per mode,
the rollout's seconds (median and range over repeats), the rows the decode step computed summed
over its token steps, and the ratios, drop / keep.

    python benchmarks/finished_rows.py [--repeats 7] [--prompts 8 --generations 8 --completion 256]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from grpo_step import prompts as countdown_prompts  # noqa: E402  (the step benchmark's prompts)

from axiom_rl.errors import UserError  # noqa: E402
from axiom_rl.models.load import load_policy  # noqa: E402
from axiom_rl.rollout.fast import FastBackend, supports  # noqa: E402
from axiom_rl.speed import Speed  # noqa: E402

MODES = ("keep", "drop")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="timed rollouts per mode, alternating keep / drop")
    ap.add_argument("--model", default="tiny", help="'tiny' (the built-in model) or a model directory")
    ap.add_argument(
        "--tiny-size", default="tiny", help="the built-in model's size (nano, micro, tiny, small)"
    )
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--completion", type=int, default=256, help="most tokens per completion")
    ap.add_argument("--stops", default="aeio", help="characters that end a completion (one stop string each)")
    ap.add_argument(
        "--no-record",
        action="store_true",
        help="the rollout without the record of its linear layers' outputs that the trainer keeps for "
        "its first update (speed/replay.py)",
    )
    args = ap.parse_args()
    for name in ("repeats", "prompts", "generations", "completion"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if not args.stops:
        ap.error("--stops needs at least one character")
    try:
        policy = load_policy(
            args.model, tiny_size=args.tiny_size, finetune="full", dtype="fp32", device="cpu",
            need_reference=False, seed=0,
        )  # fmt: skip
    except UserError as e:
        ap.error(str(e))
    if not supports(policy.model):
        ap.error("this model's architecture is not one axiom-rl's decode loop runs (see rollout/fast.py)")
    prompts = countdown_prompts(args.prompts)
    stops = list(args.stops)
    backends = {
        mode: FastBackend(speed=Speed(drop_finished_rows=mode == "drop")) for mode in ("drop", "keep")
    }
    for backend in backends.values():
        backend.record_linear_outputs = not args.no_record  # as the trainer's, where μ = 1

    def rollout(mode: str, seed: int) -> tuple[float, list[list[int]], int]:
        backend = backends[mode]
        torch.manual_seed(seed)
        start = time.perf_counter()
        out = backend.generate(
            policy.model, policy.tokenizer, prompts, args.generations, args.completion, 1.0, 1.0, stops, 1024
        )
        took = time.perf_counter() - start
        backend.recycle(out.linear_outputs)  # as the trainer does once its update has read it
        return took, out.completion_ids, backend.last_row_steps

    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    row_steps: dict[str, list[int]] = {m: [] for m in MODES}
    lengths: list[int] = []
    for mode in MODES:  # a warm-up rollout each (and the C++ step built, the first time)
        rollout(mode, seed=0)
    print(
        f"{args.prompts} prompts x G={args.generations}, at most {args.completion} tokens, stop characters "
        f"{args.stops!r}; {sum(p.numel() for p in policy.model.parameters()) / 1e6:.2f}M parameters, float32, "
        f"cpu, {torch.get_num_threads()} threads, {'no record' if args.no_record else 'recording the linear layers'}; "
        f"torch {torch.__version__}"
    )
    for i in range(args.repeats):
        completions = {}
        for mode in MODES if i % 2 == 0 else MODES[::-1]:
            took, completions[mode], rows = rollout(mode, seed=i + 1)
            seconds[mode].append(took)
            row_steps[mode].append(rows)
            print(f"   repeat {i + 1}/{args.repeats} {mode}: {took:.3f} s, {rows} row-steps", flush=True)
        if completions["drop"] != completions["keep"]:
            sys.exit(f"repeat {i + 1}: dropping finished rows changed the sampled tokens")
        lengths += [len(c) for c in completions["keep"]]
    lengths.sort()
    print(
        f"   completion lengths over all repeats: median {statistics.median(lengths):.0f}, mean "
        f"{statistics.mean(lengths):.1f}, max {lengths[-1]}; "
        f"{sum(n >= args.completion for n in lengths) / len(lengths):.1%} at the budget; "
        "the same tokens in both modes on every repeat"
    )
    print(f"   {'rows':<6}{'s/rollout median (range)':>28}{'row-steps median':>18}")
    for mode in MODES:
        s = seconds[mode]
        print(
            f"   {mode:<6}{statistics.median(s):>12.3f} ({min(s):.3f}-{max(s):.3f}){statistics.median(row_steps[mode]):>18.0f}"
        )
    time_ratio = statistics.median(seconds["drop"]) / statistics.median(seconds["keep"])
    work_ratio = statistics.median(d / k for d, k in zip(row_steps["drop"], row_steps["keep"], strict=True))
    print(f"   drop : keep  time {time_ratio:.3f}x, row-steps {work_ratio:.3f}x")


if __name__ == "__main__":
    main()
