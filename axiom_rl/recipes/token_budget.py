"""`axiom-rl experiment token-budget-sweep`: GRPO, Dr. GRPO and the hybrid across three
completion budgets on Countdown (the original experiments' sweep: Qwen3-1.7B, budgets of 256,
512 and 1024 tokens; Dr. GRPO collapsed at 1024, from 32.5% zero-shot to 4.9%, with 971 of 1024
answers "partial").

Per seed: one SFT'd base (the quickstart's: the built-in model, Countdown difficulty 1), its
zero-shot accuracy at each budget, then one GRPO run per (loss, budget) cell from it, and two runs
with the graduated reward at the largest budget (the original's proposed fix). Each run is
evaluated on the same held-out problems at its own budget, one sample each at temperature 1.0:
correct, partial (an answer, wrong), failed (no complete answer: for Countdown, no closing
</answer> within the budget), and the mean completion length.

    grpo     per-sequence token mean, advantages scaled by the group's std (DeepSeekMath)
    dr_grpo  token sum / (sequences x budget), advantages not scaled (Dr. GRPO, Liu et al. 2025)
    hybrid   alpha x dr_grpo's loss + (1 - alpha) x grpo's, alpha = min(1, longest completion /
             reference); the original's reference of 512 is its middle budget, and scales with it
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from typing import Any

from ..quickstart import QuickstartConfig, sft_settings
from .common import (
    RecipeOptions,
    Results,
    Say,
    evaluated_attempts,
    grpo_model,
    markdown_table,
    mean_spread,
    once,
    sft_model,
    training_signal,
    write_report,
)

LOSSES = ("grpo", "dr_grpo", "hybrid")
GRADUATED = "countdown_graduated"


@dataclass(frozen=True)
class Scale:
    model: str
    budgets: tuple[int, int, int]
    sft_steps: int  # 0: the model starts as it is
    grpo_steps: int
    prompts: int
    generations: int
    lr: float
    beta: float
    eval_count: int
    model_settings: dict[str, Any]


SCALES = {
    # The quickstart's settings (its answers are about 16 tokens: the middle budget is its 24),
    # budgets halved and doubled as the original's 256 / 512 / 1024.
    "cpu": Scale("tiny", (12, 24, 48), sft_steps=700, grpo_steps=60, prompts=16, generations=8, lr=2e-4,
                 beta=0.01, eval_count=256, model_settings={"tiny_size": "micro"}),
    # The original's: Qwen3-1.7B, 80 steps of 64 rollouts (8 prompts x 8), lr 7e-6, no SFT.
    "gpu": Scale("Qwen/Qwen3-1.7B", (256, 512, 1024), sft_steps=0, grpo_steps=80, prompts=8, generations=8,
                 lr=7e-6, beta=0.0, eval_count=1024, model_settings={"finetune": "lora"}),
}  # fmt: skip


def scale_of(opts: RecipeOptions) -> Scale:
    scale = SCALES[opts.scale]
    if opts.smoke:
        scale = replace(scale, budgets=(8, 12, 16), sft_steps=min(scale.sft_steps, 4), grpo_steps=1, prompts=2,
                        generations=2, eval_count=4)  # fmt: skip
    return replace(scale, model=opts.model) if opts.model else scale


def arms(scale: Scale) -> list[tuple[str, str, int, str]]:
    """(name, loss, budget, reward) of every GRPO run: each loss at each budget with the 1 / 0.1 / 0
    reward, then grpo and dr_grpo at the largest budget with the graduated one."""
    cells = [(f"{loss}-{b}", loss, b, "countdown") for loss in LOSSES for b in scale.budgets]
    top = scale.budgets[-1]
    return cells + [(f"{loss}-{top}-graduated", loss, top, GRADUATED) for loss in ("grpo", "dr_grpo")]


def outcome_counts(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """correct / partial / failed as the original counts them, and the mean completion length.
    Not eval.evaluate.summarize's counts: its partial is an answer that passed some tests, which a
    Countdown answer never does; the original's partial is an answer, wrong."""
    correct = sum(a["status"] == "passed" for a in attempts)
    failed = sum(a["status"] == "format_error" for a in attempts)
    return {
        "accuracy": correct / len(attempts),
        "correct": correct,
        "partial": len(attempts) - correct - failed,
        "failed": failed,
        "mean_tokens": statistics.mean(a["tokens"] for a in attempts),
    }


def run_seed(opts: RecipeOptions, seed: int, results: Results, say: Say) -> None:
    s = scale_of(opts)
    out, db = opts.out, opts.out / "results.db"
    key = f"s{seed}"
    if s.sft_steps:
        settings = {**sft_settings(QuickstartConfig(seed=seed)), **s.model_settings, "model": s.model,
                    "steps": s.sft_steps}  # fmt: skip
        base, extra = str(sft_model(out / key / "sft", settings)), {}
    else:
        base, extra = s.model, dict(s.model_settings)

    def held_out(model: str, run: str, budget: int) -> dict[str, Any]:
        _, attempts = evaluated_attempts(db, f"{key}-{run}", {
            "model": model, "tasks": ["countdown"], "difficulty": "1", "count": s.eval_count, "samples": 1,
            "temperature": 1.0, "seed": seed, "max_completion_length": budget, "batch_size": 128})  # fmt: skip
        return outcome_counts(attempts)

    for budget in s.budgets:
        once(results, f"{key}/zero-shot-{budget}", lambda b=budget: held_out(base, f"zero-shot-{b}", b), say)
    for name, loss, budget, reward in arms(s):

        def arm(
            name: str = name, loss: str = loss, budget: int = budget, reward: str = reward
        ) -> dict[str, Any]:
            begun = time.perf_counter()
            run_dir = out / key / name
            result = grpo_model(run_dir, {
                "model": base, **extra, "tasks": ["countdown"], "difficulty": "1", "steps": s.grpo_steps,
                "prompts_per_step": s.prompts, "num_generations": s.generations, "max_completion_length": budget,
                "temperature": 1.0, "lr": s.lr, "lr_schedule": "cosine", "beta": s.beta, "seed": seed,
                "loss_type": loss, "advantage": "dr_grpo" if loss == "dr_grpo" else "grpo", "rewards": reward,
                "loss_params": {"hybrid_reference_tokens": s.budgets[1]} if loss == "hybrid" else {},
                "save_every": 0, "keep_checkpoints": 0})  # fmt: skip
            wall = time.perf_counter() - begun
            return {**held_out(str(run_dir / "final_model"), name, budget), "wall_s": wall,
                    "train": training_signal(result.metrics)}  # fmt: skip

        once(results, f"{key}/{name}", arm, say)


def tables(results: Results, seeds: list[int], scale: Scale) -> list[str]:
    def over_seeds(run: str, field: str) -> list[float]:
        return [results.get(f"s{s}/{run}")[field] for s in seeds]

    def count(run: str, field: str) -> str:
        values = over_seeds(run, field)
        return f"{statistics.mean(values):.0f}" + (
            f" ± {statistics.stdev(values):.0f}" if len(values) > 1 else ""
        )

    rows = []
    for name, loss, budget, reward in arms(scale):
        zero, trained = over_seeds(f"zero-shot-{budget}", "accuracy"), over_seeds(name, "accuracy")
        rows.append([
            {"grpo": "GRPO", "dr_grpo": "Dr. GRPO", "hybrid": "hybrid"}[loss]
            + (" (graduated reward)" if reward == GRADUATED else ""),
            budget, mean_spread(zero), mean_spread(trained),
            mean_spread([t - z for t, z in zip(trained, zero, strict=True)], unit=" pts"),
            count(name, "correct"), count(name, "partial"), count(name, "failed"),
            f"{statistics.mean(over_seeds(name, 'mean_tokens')):.1f}",
        ])  # fmt: skip
    n = len(seeds)
    table = markdown_table(
        ["loss", "max tokens", "zero-shot accuracy", "trained accuracy", "improvement", "correct", "partial",
         "failed", "mean tokens"],
        rows,
    )  # fmt: skip
    train = markdown_table(
        ["run", "wall time", "mean reward", "flat groups", "training accuracy, first tenth", "last tenth",
         "mean completion length (training)"],
        [[name, mean_spread([results.get(f"s{s}/{name}")["wall_s"] for s in seeds], 1, " s"),
          mean_spread([results.get(f"s{s}/{name}")["train"]["reward_mean"] for s in seeds], 1, "", 2),
          mean_spread([results.get(f"s{s}/{name}")["train"]["zero_std_frac"] for s in seeds]),
          mean_spread([results.get(f"s{s}/{name}")["train"]["accuracy_first"] for s in seeds]),
          mean_spread([results.get(f"s{s}/{name}")["train"]["accuracy_last"] for s in seeds]),
          mean_spread([results.get(f"s{s}/{name}")["train"]["completion_len_mean"] for s in seeds], 1, "")]
         for name, *_ in arms(scale)],
    )  # fmt: skip
    return [
        f"## GRPO vs Dr. GRPO vs the hybrid across budgets ({n} seed{'s' * (n > 1)}, mean ± sd; counts of "
        f"{scale.eval_count} held-out answers)\n\n{table}",
        f"## Training\n\n{train}",
    ]


def run(opts: RecipeOptions, say: Say) -> tuple[str, bool]:
    results = Results(opts.out)
    for seed in opts.seeds:
        run_seed(opts, seed, results, say)
    sections = tables(results, opts.seeds, scale_of(opts))
    write_report(opts.out, "GRPO vs Dr. GRPO across completion budgets", sections)
    return "\n\n".join(sections), True
