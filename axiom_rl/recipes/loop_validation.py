"""`axiom-rl experiment loop-validation`: a few GRPO steps that check every stage of the loop
(the original experiments' "GRPO training loop validation": FizzBuzz at difficulty 3, two
completions per prompt, lr 2e-5, beta 0.04, five steps).

Per seed, OUT/s<seed>/ holds the run directory the original experiment lists: config.json (the
resolved settings), training_log.txt (what the run printed), metrics.jsonl (one row per step),
with the trainer's own samples.jsonl, train.log and report.md beside them, and checklist.json:
each stage of the loop, whether it worked and the evidence.

At the cpu scale the built-in model first learns to write programs at all (a short SFT on
FizzBuzz's reference solutions: from scratch it writes no code, and the sandbox would have
nothing to run); at the gpu scale the hub model starts as it is, with LoRA, as in the original.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..io import write_text_atomic
from .common import RecipeOptions, Results, Say, grpo_model, markdown_table, sft_model, write_report

TASK = "fizzbuzz"
DIFFICULTY = "3"
# The built-in model SFT'd from scratch writes a program whole only at a lower temperature
# (docs/results.md, the code-task configuration); the hub model samples at it too.
TEMPERATURE = 0.6


@dataclass(frozen=True)
class Scale:
    model: str
    sft_steps: int  # 0: the model starts as it is
    steps: int
    prompts: int
    generations: int
    max_tokens: int
    extra: dict[str, Any]  # the model's own settings (size, LoRA, dtype)


SCALES = {
    "cpu": Scale("tiny", sft_steps=100, steps=5, prompts=1, generations=2, max_tokens=340,
                 extra={"tiny_size": "micro"}),
    "gpu": Scale("Qwen/Qwen2.5-Coder-0.5B-Instruct", sft_steps=0, steps=5, prompts=1, generations=2,
                 max_tokens=384, extra={"finetune": "lora", "lora_r": 16, "lora_alpha": 32}),
}  # fmt: skip


def scale_of(opts: RecipeOptions) -> Scale:
    scale = SCALES[opts.scale]
    if opts.smoke:
        scale = replace(scale, sft_steps=min(scale.sft_steps, 4), steps=2, max_tokens=64)
    return replace(scale, model=opts.model) if opts.model else scale


def changed_weights(base: Path | None, final: Path) -> float | None:
    """The largest change of any weight between two saved models, or, for a LoRA adapter, the
    largest entry of its B matrices (zero at the start: any other value is an update). None when
    neither can be read."""
    from safetensors.torch import load_file

    if base is not None and (final / "model.safetensors").exists() and (base / "model.safetensors").exists():
        before, after = (
            load_file(str(base / "model.safetensors")),
            load_file(str(final / "model.safetensors")),
        )
        shared = [k for k in after if k in before and before[k].shape == after[k].shape]
        if not shared:
            return None
        return max(float((after[k].float() - before[k].float()).abs().max()) for k in shared)
    if (final / "adapter_model.safetensors").exists():
        adapter = load_file(str(final / "adapter_model.safetensors"))
        b = [t for k, t in adapter.items() if "lora_B" in k]
        return max(float(t.float().abs().max()) for t in b) if b else None
    return None


def checklist(metrics: list[dict[str, Any]], samples: list[dict[str, Any]], weight_change: float | None,
              expected: int) -> list[dict[str, Any]]:  # fmt: skip
    """Each stage of the loop: did it work, and what shows it."""

    def finite(key: str) -> bool:
        return all(math.isfinite(float(m.get(key, math.nan))) for m in metrics)

    def total(key: str) -> int:
        return int(sum(m.get(key, 0) for m in metrics))

    completions = total("completions")
    no_code = total("status/no_code")
    ran = completions - no_code - total("internal_errors")
    statuses = sorted({k.removeprefix("status/") for m in metrics for k in m if k.startswith("status/")})
    informative = [1 - m["zero_std_frac"] for m in metrics]
    kls = [float(m["kl"]) for m in metrics]
    norms = ", ".join(f"{m['grad_norm']:.3f}" for m in metrics)
    rows = [
        ("rollout", completions == expected and all(m["completion_len_mean"] > 0 for m in metrics),
         f"{completions} completions ({expected} expected), mean length "
         f"{sum(m['completion_len_mean'] for m in metrics) / len(metrics):.0f} tokens"),
        ("code extraction", completions > no_code,
         f"code found in {completions - no_code} of {completions} completions"),
        ("test execution", ran > 0 and total("internal_errors") == 0,
         f"programs run in the sandbox: {ran}, outcomes: {', '.join(statuses)}; "
         f"{total('internal_errors')} internal errors"),
        ("reward computation", finite("reward_mean") and all(0 <= m["reward_mean"] <= m["reward_max"] <= 1 for m in metrics),
         "mean reward per step " + ", ".join(f"{m['reward_mean']:.2f}" for m in metrics)),
        ("advantage calculation", finite("reward_std"),
         f"{sum(informative) / len(informative):.0%} of groups had unequal rewards (the rest: advantages 0)"),
        ("KL penalty", finite("kl") and max(kls[1:] or [0.0]) > 0,
         "KL to the reference per step " + ", ".join(f"{k:.2e}" for k in kls)),
        ("backpropagation", finite("grad_norm") and any(m["grad_norm"] > 0 for m in metrics)
         and (weight_change is None or weight_change > 0),
         f"gradient norm per step {norms}; largest weight change "
         + ("not readable" if weight_change is None else f"{weight_change:.2e}")),
        ("numerical stability", finite("loss") and finite("grad_norm"),
         "loss per step " + ", ".join(f"{m['loss']:.4f}" for m in metrics)),
    ]  # fmt: skip
    if samples and not any(s.get("completion") for s in samples):
        rows[0] = ("rollout", False, "every sampled completion is empty")
    return [{"stage": s, "ok": bool(ok), "evidence": e} for s, ok, e in rows]


def run_seed(opts: RecipeOptions, seed: int, say: Say) -> dict[str, Any]:
    scale = scale_of(opts)
    run_dir = opts.out / f"s{seed}"
    lines: list[str] = []

    def log(message: str) -> None:
        lines.append(message)
        say(message)

    model = scale.model
    log(f"loop validation, seed {seed}: {model} on {TASK} difficulty {DIFFICULTY}")
    start = time.perf_counter()
    if scale.sft_steps:
        base = sft_model(opts.out / f"sft-s{seed}", {
            "model": model, **scale.extra, "tasks": [TASK], "difficulty": "1-5", "steps": scale.sft_steps,
            "batch_size": 16, "lr": 2e-3, "warmup_steps": min(20, scale.sft_steps // 2), "seed": seed})  # fmt: skip
        log(
            f"SFT on {TASK}'s reference solutions: {scale.sft_steps} steps ({time.perf_counter() - start:.0f}s)"
        )
        model, extra = str(base), {}
    else:
        extra = dict(scale.extra)
    settings = {
        "model": model, **extra, "tasks": [TASK], "difficulty": DIFFICULTY, "steps": scale.steps,
        "prompts_per_step": scale.prompts, "num_generations": scale.generations,
        "max_completion_length": scale.max_tokens, "temperature": TEMPERATURE, "lr": 2e-5, "beta": 0.04, "seed": seed, "save_every": 0,
        "samples_per_step": scale.prompts * scale.generations,
    }  # fmt: skip
    log(
        f"generations per prompt {scale.generations}, learning rate 2e-05, KL weight 0.04, {scale.steps} steps"
    )

    def progress(step: int, total: int, row: dict[str, Any]) -> None:
        log(
            f"step {step} | loss {row['loss']:.4f} | mean reward {row['reward_mean']:.4f} | kl {row['kl']:.2e}"
        )

    result = grpo_model(run_dir, settings, progress=progress, say=log)
    samples = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines() if x.strip()]
    change = changed_weights(Path(model) if Path(model).is_dir() else None, run_dir / "final_model")
    checks = checklist(result.metrics, samples, change, scale.steps * scale.prompts * scale.generations)
    seconds = time.perf_counter() - start
    for c in checks:
        log(f"{'ok  ' if c['ok'] else 'FAIL'} {c['stage']}: {c['evidence']}")
    log(f"loop validation {'passed' if all(c['ok'] for c in checks) else 'FAILED'} in {seconds:.0f}s")
    write_text_atomic(run_dir / "training_log.txt", "\n".join(lines) + "\n")
    write_text_atomic(run_dir / "checklist.json", json.dumps(checks, indent=1) + "\n")
    stages = ("time_rollout_s", "time_reward_s", "time_reference_s", "time_update_s")
    timing = {k: sum(m.get(k, 0.0) for m in result.metrics) for k in stages}
    return {"checks": checks, "seconds": seconds, "timing": timing, "metrics": result.metrics}


def tables(data: dict[str, dict[str, Any]]) -> list[str]:
    seeds = sorted(data, key=lambda s: int(s.removeprefix("s")))
    stages = [c["stage"] for c in data[seeds[0]]["checks"]]
    status = markdown_table(
        ["stage", *seeds],
        [[stage, *("ok" if data[s]["checks"][i]["ok"] else "FAILED" for s in seeds)] for i, stage in enumerate(stages)],
    )  # fmt: skip
    steps = markdown_table(
        ["seed", "step", "loss", "mean reward", "KL to the reference"],
        [[s, m["step"], f"{m['loss']:.4f}", f"{m['reward_mean']:.4f}", f"{m['kl']:.2e}"]
         for s in seeds for m in data[s]["metrics"]],
    )  # fmt: skip
    timing = markdown_table(
        ["seed", "rollout", "reward", "reference", "update", "whole run"],
        [[s, *(f"{data[s]['timing'][k]:.1f}s" for k in data[s]["timing"]), f"{data[s]['seconds']:.0f}s"]
         for s in seeds],
    )  # fmt: skip
    return [f"## Components\n\n{status}", f"## Metrics per step\n\n{steps}", f"## Timing\n\n{timing}"]


def run(opts: RecipeOptions, say: Say) -> tuple[str, bool]:
    results = Results(opts.out)
    for seed in opts.seeds:
        if results.get(f"s{seed}") is None:
            results.put(f"s{seed}", run_seed(opts, seed, say))
    data = {f"s{s}": results.get(f"s{s}") for s in opts.seeds}
    sections = tables(data)
    evidence = "\n".join(f"- {s} {c['stage']}: {c['evidence']}" for s in data for c in data[s]["checks"])
    write_report(opts.out, "GRPO loop validation", [*sections, f"## Evidence\n\n{evidence}"])
    ok = all(c["ok"] for d in data.values() for c in d["checks"])
    return "\n\n".join(sections), ok
