"""A GRPO step's training passes over completions of varied lengths, in gradient-accumulation
micro-batches, with length bucketing (`on`) and without (`off`), alternating in one process.

`on` (the trainer's default): the rows sorted by length, so each micro-batch holds rows of similar
lengths, and each micro-batch cut to its own longest prompt and completion. `off`: the rows in
their order, each micro-batch as wide as the whole batch's longest row (axiom-rl before
2026-11-27). A rollout that lets completions end (EOS) gives lengths like these: the batch is as
wide as its longest completion, most rows far shorter.

The batch: `--prompts` prompts of 24-64 tokens, G completions each, each completion's length
uniform between 1/16 of `--completion` and all of it, and a quarter of them cut at `--completion`
(truncated), seeded. Timed: the reference pass and one optimizer step (forward, backward, AdamW),
the trainer's own functions (train/grpo.py: frozen_passes, optimizer_step). It prints, per mode,
the seconds (median and range over repeats), the token positions the layers run (padding
included; each group's prompt once per micro-batch where the passes share it), and the ratios,
on / off.

    python benchmarks/length_buckets.py [--repeats 7] [--micro-batches 8] [--device cpu|cuda]
    python benchmarks/length_buckets.py --device cuda --model PATH --completion 1024
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

from axiom_rl.config import TrainConfig  # noqa: E402
from axiom_rl.errors import UserError  # noqa: E402
from axiom_rl.models.load import load_policy  # noqa: E402
from axiom_rl.train.batch import TokenBatch, build_batch, micro_batches, prompt_runs  # noqa: E402
from axiom_rl.train.distributed import Parallel  # noqa: E402
from axiom_rl.train.grpo import frozen_passes, optimizer_step, share_prompt_passes  # noqa: E402
from axiom_rl.train.optim import make_optimizer  # noqa: E402

MODES = ("off", "on")


def varied_batch(
    prompts: int, g: int, completion: int, vocab: int, pad: int, device: torch.device, seed: int = 0
) -> TokenBatch:
    """Prompts of 24-64 tokens, G completions each of varied lengths (see the module docstring)."""
    gen = torch.Generator().manual_seed(seed)
    ids = lambda n: torch.randint(3, vocab, (n,), generator=gen).tolist()  # noqa: E731
    prompt_ids = [ids(int(torch.randint(24, 65, (1,), generator=gen))) for _ in range(prompts)]
    shortest = max(1, completion // 16)
    completions = []
    for _ in range(prompts * g):
        truncated = float(torch.rand(1, generator=gen)) < 0.25
        length = (
            completion if truncated else int(torch.randint(shortest, completion + 1, (1,), generator=gen))
        )
        completions.append(ids(length))
    rows = [prompt_ids[i // g] for i in range(prompts * g)]
    return build_batch(rows, completions, pad, device)


def positions(batch: TokenBatch, parts: int, share: bool, bucket: bool) -> int:
    """Token positions the layers run in the micro-batches, with length bucketing or without,
    padding included (with `share`, each group's prompt once per micro-batch)."""
    total = 0
    for _, part in micro_batches(batch, parts, share, bucket=bucket):
        rows, t = part.input_ids.shape[0], part.completion_length
        prompts = len(prompt_runs(part)[0]) if share else rows
        total += prompts * (part.input_ids.shape[1] - t) + rows * t
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="timed steps per mode, alternating off / on")
    ap.add_argument("--micro-batches", type=int, default=8, help="gradient_accumulation_steps")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="tiny", help="'tiny' (the built-in model) or a model directory")
    ap.add_argument(
        "--tiny-size", default="tiny", help="the built-in model's size (nano, micro, tiny, small)"
    )
    ap.add_argument("--dtype", default="auto", help="auto: fp32 on a CPU, bf16 on a GPU")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--completion", type=int, default=256, help="most tokens per completion")
    ap.add_argument(
        "--prompt-passes",
        choices=("auto", "shared", "separate"),
        default="auto",
        help="each group's prompt run once (shared: the CPU default) or once per row (separate: a GPU's)",
    )
    args = ap.parse_args()
    for name in ("repeats", "micro_batches", "prompts", "generations", "completion"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    passes = {} if args.prompt_passes == "auto" else {"share_prompt_passes": args.prompt_passes == "shared"}
    try:
        policy = load_policy(
            args.model,
            tiny_size=args.tiny_size,
            finetune="full",
            dtype=args.dtype,
            device=args.device,
            seed=0,
        )
    except UserError as e:
        ap.error(str(e))
    configs = {  # the two modes: the run's speed setting, as a user sets it
        mode: TrainConfig(
            model=args.model, tiny_size=args.tiny_size, beta=0.04, loss_type="grpo",
            gradient_accumulation_steps=args.micro_batches, max_completion_length=args.completion,
            speed={**passes, "bucket_lengths": mode == "on"},
        )
        for mode in MODES
    }  # fmt: skip
    vocab = policy.model.get_input_embeddings().weight.shape[0]
    batch = varied_batch(
        args.prompts, args.generations, args.completion, vocab, policy.tokenizer.pad_token_id, policy.device
    )
    advantages = torch.randn(batch.input_ids.shape[0], generator=torch.Generator().manual_seed(1)).to(
        policy.device
    )
    optimizer = make_optimizer(policy.trainable_parameters, lr=1e-6, weight_decay=0.0)
    parallel = Parallel(policy.device)
    share = share_prompt_passes(batch, configs["on"])

    def step(mode: str) -> float:
        cfg = configs[mode]
        start = time.perf_counter()
        ref, old, _ = frozen_passes(policy, batch, cfg)
        optimizer_step(policy, policy.model, optimizer, batch, advantages, old, ref, cfg, parallel)
        if policy.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    real = int(batch.attention_mask.sum())
    print(
        f"{args.prompts} prompts x G={args.generations}, completions of {args.completion // 16}-{args.completion} "
        f"tokens ({real} real tokens, {batch.input_ids.numel()} positions in the padded batch), "
        f"{args.micro_batches} micro-batches, prompt passes {'shared' if share else 'separate'}; {sum(p.numel() for p in policy.model.parameters()) / 1e6:.2f}M "
        f"parameters, {next(policy.model.parameters()).dtype}, {policy.device}; torch {torch.__version__}"
    )
    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    tokens = {}
    for mode in MODES:  # one warm-up step each
        tokens[mode] = positions(batch, args.micro_batches, share, bucket=mode == "on")
        step(mode)
    for i in range(args.repeats):
        for mode in MODES if i % 2 == 0 else MODES[::-1]:
            seconds[mode].append(step(mode))
            print(f"   repeat {i + 1}/{args.repeats} {mode}: {seconds[mode][-1]:.3f} s", flush=True)
    print(f"   {'bucketing':<10}{'s/step median (range)':>26}{'positions':>12}")
    for mode in MODES:
        s = seconds[mode]
        print(f"   {mode:<10}{statistics.median(s):>10.3f} ({min(s):.3f}-{max(s):.3f}){tokens[mode]:>12}")
    ratio = statistics.median(seconds["on"]) / statistics.median(seconds["off"])
    print(f"   on : off  time {ratio:.3f}x, positions {tokens['on'] / tokens['off']:.3f}x")


if __name__ == "__main__":
    main()
