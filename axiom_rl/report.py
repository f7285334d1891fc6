"""The report of a training run (report.md and training.png in every GRPO and SFT run
directory) and the quickstart's: report.md and PNG plots in its run directory."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .io import atomic_open, read_jsonl, write_text_atomic


def _smooth(values: list[float], window: int = 20) -> list[float]:
    """The moving average of the last `window` values, over the finite ones: a step skipped for
    a NaN loss leaves a gap in the raw curve, not in the rest of the average."""
    out = []
    for i in range(len(values)):
        recent = [v for v in values[max(0, i - window + 1) : i + 1] if math.isfinite(v)]
        out.append(sum(recent) / len(recent) if recent else math.nan)
    return out


def _number(value: Any) -> Any:
    """metrics.jsonl writes non-finite floats as "nan", "inf" and "-inf" (JSON has none): back."""
    return float(value) if value in ("nan", "inf", "-inf") else value


def _save(fig: Any, path: Path) -> None:
    """Write the figure as a PNG, atomically (a run directory never holds half a file)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)


def plot_run(run_dir: Path, metrics: list[dict[str, Any]] | None = None) -> Path | None:
    """training.png from a run directory's metrics.jsonl (every step, a resumed run's too; or its
    rows, where the caller has read them): a GRPO run's rewards, KL, lengths and flat groups, or
    an SFT run's loss and learning rate. None when it has no finished step."""
    metrics = _read_metrics(run_dir) if metrics is None else metrics
    if not metrics:
        return None
    plot = plot_training if "reward_mean" in metrics[0] else plot_sft
    plot(metrics, run_dir / "training.png")
    return run_dir / "training.png"


def _window(n_steps: int) -> int:
    """The moving average's window: 20 steps, or a fifth of a short run (at least 1)."""
    return max(1, min(20, n_steps // 5))


def _raw_and_smoothed(
    ax: Any, steps: list[int], values: list[float], label: str, window: int, **style: Any
) -> None:
    """Every step faintly, and its moving average labelled as one: a short run's noise stays
    visible, not smoothed into a trend."""
    line = ax.plot(steps, values, alpha=0.25, linewidth=0.8, **style)[0]
    name = f"{label} ({window}-step moving average)" if window > 1 else label
    ax.plot(steps, _smooth(values, window), color=line.get_color(), label=name, **style)


def _steps_axis(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)


def _read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [
        {key: _number(value) for key, value in line.value.items()}
        for line in (read_jsonl(path) if path.exists() else [])
        if isinstance(line.value, dict)
    ]


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    values = [float(r[key]) for r in rows if isinstance(r.get(key), int | float) and math.isfinite(r[key])]
    return sum(values) / len(values) if values else math.nan


# Reward components that score steps (axiom_rl/prm/components.py): logged as reward/<name>.
PROCESS_REWARDS = ("prm", "oracle_steps")
# Changes smaller than this (in a mean over a tenth of the steps) are not called a rise or a fall.
HACKING_MARGIN = 0.02


def process_reward_keys(metrics: list[dict[str, Any]]) -> list[str]:
    return [f"reward/{name}" for name in PROCESS_REWARDS if any(f"reward/{name}" in m for m in metrics)]


def reward_hacking_warnings(
    first: list[dict[str, Any]], last: list[dict[str, Any]], keys: list[str]
) -> list[str]:
    """A line for each process reward that rose from the first tenth of the steps to the last while
    the outcome (the share of completions passed) fell: the policy pleasing the PRM, not solving."""
    out = []
    fell = _mean(first, "accuracy") - _mean(last, "accuracy")
    for key in keys:
        rose = _mean(last, key) - _mean(first, key)
        if rose > HACKING_MARGIN and fell > HACKING_MARGIN:
            out.append(
                f"**Reward hacking?** `{key}` rose by {rose:.3f} while accuracy fell by {fell:.3f} "
                "(first tenth of the steps to the last): the policy may be pleasing the process reward "
                "without solving. Compare the two curves in training.png."
            )
    return out


def write_run_report(run_dir: Path) -> Path | None:
    """report.md and training.png of a GRPO or SFT run directory: what ran (the settings that
    shape it), how it went (the first and last tenth of its steps side by side) and where its
    files are. None when it has no finished step. Written again, whole, at each call."""
    metrics = _read_metrics(run_dir)
    if not metrics:
        return None
    plot = plot_run(run_dir, metrics)  # the rows read above, not read again
    try:
        config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    config = config if isinstance(config, dict) else {}
    grpo = "reward_mean" in metrics[0]
    tenth = max(1, len(metrics) // 10)
    first, last = metrics[:tenth], metrics[-tenth:]
    span = f"steps {first[0]['step']}-{first[-1]['step']}", f"steps {last[0]['step']}-{last[-1]['step']}"
    kind = "GRPO" if grpo else "SFT"

    def setting(*keys: str) -> str:
        return ", ".join(f"{k} {config[k]}" for k in keys if config.get(k) not in (None, "", [], {}))

    lines = [f"# {kind} run: {run_dir.name}", ""]
    steps = metrics[-1]["step"]
    planned = config.get("steps")
    lines.append(f"{steps} steps" + (f" of {planned}" if planned and planned != steps else "") + ".")
    lines += ["", "## Settings", ""]
    lines.append(
        f"- model: {config.get('model', '?')}; " + setting("tasks", "difficulty", "problems_file", "source")
    )
    if grpo:
        lines.append(
            "- " + setting("prompts_per_step", "num_generations", "max_completion_length", "temperature")
        )
        lines.append(
            "- " + setting("advantage", "loss_type", "beta", "lr", "lr_schedule", "warmup_steps", "rewards")
        )
    else:
        lines.append("- " + setting("batch_size", "lr", "lr_schedule", "warmup_steps"))
    lines.append("- every option: `config.json`")
    rows = (
        [("reward mean", "reward_mean"), ("accuracy (share of completions passed)", "accuracy"),
         ("groups with zero reward variance", "zero_std_frac"), ("KL to the reference", "kl"),
         ("completion length (tokens)", "completion_len_mean")]
        if grpo else [("loss", "loss"), ("learning rate", "lr")]
    )  # fmt: skip
    process = process_reward_keys(metrics)
    rows += [(f"process reward `{k}` (mean step score)", k) for k in process]
    lines += ["", f"## First and last tenth of the steps ({tenth} each)", "", f"| | {span[0]} | {span[1]} |",
              "| --- | ---: | ---: |"]  # fmt: skip
    for label, key in rows:
        lines.append(f"| {label} | {_mean(first, key):.4g} | {_mean(last, key):.4g} |")
    for warning in reward_hacking_warnings(first, last, process):
        lines += ["", warning]
    lines += ["", "## Files", ""]
    if plot is not None:
        lines += [f"![every step, with a moving average]({plot.name})", ""]
    lines.append("- `metrics.jsonl`: every step's figures; `train.log`: what the run said")
    if grpo:
        lines.append("- `samples.jsonl`: completions with their prompts, targets, verdicts and rewards")
    if (run_dir / "final_model").is_dir():
        lines.append("- `final_model/`: the trained model; its `README.md` says how to load and prompt it")
    path = run_dir / "report.md"
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path


def plot_sft(metrics: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [m["step"] for m in metrics]
    window = _window(len(steps))
    fig, (loss_ax, lr_ax) = plt.subplots(1, 2, figsize=(10, 3.5))
    _raw_and_smoothed(loss_ax, steps, [m["loss"] for m in metrics], "loss", window)
    loss_ax.set_title("SFT loss (completion tokens), every step and smoothed")
    loss_ax.legend()
    lr_ax.plot(steps, [m["lr"] for m in metrics])
    lr_ax.set_title("learning rate")
    for ax in (loss_ax, lr_ax):
        _steps_axis(ax)
    _save(fig, path)


def plot_training(metrics: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [m["step"] for m in metrics]
    window = _window(len(steps))
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    ax = axes[0][0]
    rewards = [m["reward_mean"] for m in metrics]
    _raw_and_smoothed(ax, steps, rewards, "reward mean", window)
    _raw_and_smoothed(ax, steps, [m["accuracy"] for m in metrics], "accuracy", window, linestyle="--")
    for key in process_reward_keys(metrics):  # beside accuracy: a PRM's reward rising alone is hacking
        values = [m.get(key, math.nan) for m in metrics]
        _raw_and_smoothed(
            ax, steps, values, key.removeprefix("reward/") + " (step score)", window, linestyle=":"
        )
    ax.set_title("reward and accuracy per step")
    ax.legend(fontsize=8)
    axes[0][1].plot(steps, [m["kl"] for m in metrics])
    axes[0][1].set_title("KL to the reference policy (per step)")
    _raw_and_smoothed(axes[1][0], steps, [m["completion_len_mean"] for m in metrics], "mean length", window)
    axes[1][0].set_title("completion length (tokens)")
    axes[1][0].legend(fontsize=8)
    _raw_and_smoothed(axes[1][1], steps, [m["zero_std_frac"] for m in metrics], "flat groups", window)
    axes[1][1].set_title("fraction of groups with zero reward variance")
    axes[1][1].set_ylim(-0.02, 1.02)
    axes[1][1].legend(fontsize=8)
    for ax in axes.flat:
        _steps_axis(ax)
    _save(fig, path)


def plot_accuracy(before: Any, after: Any, control: Any, difficulties: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [("SFT", before), ("SFT + GRPO", after)] + ([("more SFT (control)", control)] if control else [])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, mode in zip(axes, ("greedy", "sampled")):
        width = 0.8 / len(series)
        for k, (label, summary) in enumerate(series):
            rates = [
                next((r["success_rate"] for r in summary[mode] if r["difficulty"] == d), 0.0)
                for d in difficulties
            ]
            xs = [i + k * width for i in range(len(difficulties))]
            bars = ax.bar(xs, rates, width, label=label)
            ax.bar_label(bars, labels=[f"{r:.0%}" for r in rates], fontsize=8)
        ax.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(difficulties))])
        ax.set_xticklabels([f"difficulty {d}" for d in difficulties])
        ax.set_title("greedy" if mode == "greedy" else "sampled (temperature 1.0)")
        ax.set_ylim(0, 1)
    axes[0].set_ylabel("held-out accuracy")
    axes[1].legend()
    _save(fig, path)


def success_rate(summary: Any, mode: str, difficulty: int) -> float | None:
    """The success rate of one decoding mode at one difficulty, or None if it was not evaluated."""
    return next((r["success_rate"] for r in summary[mode] if r["difficulty"] == difficulty), None)


def accuracy_cells(
    before: Any, after: Any, control: Any, mode: str, difficulty: int
) -> tuple[list[str], str]:
    """The cells of one (difficulty, decoding) row of the quickstart's results: SFT, GRPO and the
    change, and the more-SFT control ("" when there is no control; "-" for what was not measured)."""
    a, b = success_rate(before, mode, difficulty), success_rate(after, mode, difficulty)
    cells = (
        [f"{a:.1%}", f"{b:.1%}", f"{(b - a) * 100:+.1f} pts"]
        if a is not None and b is not None
        else ["-"] * 3
    )
    c = success_rate(control, mode, difficulty) if control else None
    return cells, ("" if not control else "-" if c is None else f"{c:.1%}")


def _md_table(before: Any, after: Any, control: Any, cfg: Any) -> str:
    head = "| difficulty | trained on | greedy: SFT | GRPO | change | sampled: SFT | GRPO | change |"
    sep = "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    if control:
        head += " greedy: more SFT | sampled: more SFT |"
        sep += " ---: | ---: |"
    lines = [head, sep]
    for d in (cfg.difficulty, cfg.untrained_difficulty):
        row = [str(d), "yes" if d == cfg.difficulty else "no"]
        extra = []
        for mode in ("greedy", "sampled"):
            cells, more_sft = accuracy_cells(before, after, control, mode, d)
            row += cells
            if control:
                extra.append(more_sft)
        lines.append("| " + " | ".join(row + extra) + " |")
    return "\n".join(lines)


# The quickstart's goals at the trained difficulty (issue: "the quickstart that shows RL really teaching").
SAMPLED_GAIN_PTS, SAMPLED_GAIN_RATIO, GREEDY_GAIN_PTS = 10.0, 1.25, 5.0


def goal_verdicts(before: Any, after: Any, control: Any, difficulty: int) -> list[str]:
    """Plain sentences: whether GRPO met the goals, and whether it beat the more-SFT control."""
    sft_s, grpo_s = success_rate(before, "sampled", difficulty), success_rate(after, "sampled", difficulty)
    sft_g, grpo_g = success_rate(before, "greedy", difficulty), success_rate(after, "greedy", difficulty)
    if None in (sft_s, grpo_s, sft_g, grpo_g):
        return []
    gain_s, gain_g = (grpo_s - sft_s) * 100, (grpo_g - sft_g) * 100
    ratio = grpo_s / sft_s if sft_s else float("inf")  # any gain from 0% is more than 1.25x
    met_s = gain_s >= SAMPLED_GAIN_PTS and ratio >= SAMPLED_GAIN_RATIO
    times = f"{ratio:.2f}x" if sft_s else "no ratio from 0%"
    lines = [
        f"Sampled accuracy {sft_s:.1%} -> {grpo_s:.1%} ({gain_s:+.1f} pts, {times}): the goal of "
        f">= +{SAMPLED_GAIN_PTS:.0f} pts and >= {SAMPLED_GAIN_RATIO}x is {'met' if met_s else 'NOT met'}.",
        f"Greedy accuracy {sft_g:.1%} -> {grpo_g:.1%} ({gain_g:+.1f} pts): the goal of "
        f">= +{GREEDY_GAIN_PTS:.0f} pts is {'met' if gain_g >= GREEDY_GAIN_PTS else 'NOT met'}.",
    ]
    ctrl_s = success_rate(control, "sampled", difficulty) if control else None
    if ctrl_s is not None:
        beats = grpo_s > ctrl_s
        lines.append(
            f"GRPO {'beats' if beats else 'does NOT beat'} the control (the same wall time spent on more SFT) "
            f"on sampled accuracy: {grpo_s:.1%} vs {ctrl_s:.1%} ({(grpo_s - ctrl_s) * 100:+.1f} pts)."
        )
    return lines


def write_report(
    run_dir: Path, cfg: Any, before: Any, after: Any, control: Any, metrics: list[dict[str, Any]],
    sft_base: Any, grpo_seconds: float, total_seconds: float,
) -> None:  # fmt: skip
    difficulties = [cfg.difficulty, cfg.untrained_difficulty]
    if metrics:
        plot_training(metrics, run_dir / "training.png")
    plot_accuracy(before, after, control, difficulties, run_dir / "accuracy.png")
    n = cfg.eval_count
    sft_line = "cached from an earlier run" if sft_base.cached else f"{sft_base.seconds:.0f}s"
    sft_steps = (
        f"{sft_base.steps} of {sft_base.wanted} steps (stopped by its time budget)"
        if sft_base.short
        else f"{sft_base.steps} steps"
    )
    text = f"""# axiom-rl quickstart

The built-in tiny model ({cfg.tiny_size}) learns Countdown: SFT on reference solutions, then GRPO.
Accuracy is measured on {n} held-out eval problems per difficulty (never seen in training):
greedy, and sampled at temperature 1.0 with {cfg.eval_samples} samples per problem.
Difficulty {cfg.untrained_difficulty} was never trained on: it is the forgetting check.

{_md_table(before, after, control, cfg)}

{chr(10).join(f"- {line}" for line in goal_verdicts(before, after, control, cfg.difficulty))}
- SFT warm-up: {sft_steps} ({sft_line}); GRPO: {len(metrics)} steps ({grpo_seconds:.0f}s); whole run {total_seconds:.0f}s.
- Seed {cfg.seed}. Settings: `quickstart.json`; GRPO run: `grpo/` (config.json, metrics.jsonl, samples.jsonl);
  every attempt: `results.db` (`axiom-rl eval compare sft-greedy grpo-greedy --db {run_dir / "results.db"}`).
{"- Control: the same extra wall time as GRPO spent on more SFT, from the same base (`more-sft/`)." if control else "- Run with `--control` to also spend GRPO's wall time on more SFT instead (the control)."}

![training](training.png)

![accuracy](accuracy.png)
"""
    write_text_atomic(run_dir / "report.md", text)
    summary = {
        "before": before,
        "after": after,
        "control": control,
        "grpo_steps": len(metrics),
        "grpo_seconds": grpo_seconds,
        "total_seconds": total_seconds,
    }
    write_text_atomic(run_dir / "summary.json", json.dumps(summary, indent=1) + "\n")
