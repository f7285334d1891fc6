"""A self-play round's report (the weakness profile before and after, cell by cell) and the plot
of held-out accuracy across rounds."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from ..io import write_text_atomic


def _rates(cells: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(c["task"], c["difficulty"]): c for c in cells}


def mean_rate(cells: list[dict[str, Any]], keep: Any = lambda task, difficulty: True) -> float:
    """The mean pass rate over the cells `keep(task, difficulty)` accepts (nan when none)."""
    rates = [c["pass_rate"] for c in cells if keep(c["task"], c["difficulty"])]
    return statistics.mean(rates) if rates else float("nan")


def groups(round_: dict[str, Any]) -> dict[str, Any]:
    """The cell groups a round is read by: the cells it targeted, the rest, the debug tasks', all."""
    targets = {tuple(t) for t in round_["targets"]}
    return {
        "targeted": lambda t, d: (t, d) in targets,
        "the rest": lambda t, d: (t, d) not in targets,
        "debug tasks": lambda t, d: t.startswith("debug_"),
        "all cells": lambda t, d: True,
    }


def write_round_report(directory: Path, result: Any) -> None:
    data = result.to_dict()
    before, after = _rates(data["before"]), _rates(data["after"])
    targets = {tuple(t) for t in data["targets"]}
    lines = [
        f"# Self-play round {data['round']} ({data['targeting']})",
        "",
        "Held-out pass rate per task and difficulty, before and after the round's training "
        f"({', '.join(f'{k} {v:.0f} s' for k, v in data['seconds'].items())}).",
        "",
        "| group | before | after | change |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, keep in groups(data).items():
        b, a = mean_rate(data["before"], keep), mean_rate(data["after"], keep)
        lines.append(f"| {name} | {b:.1%} | {a:.1%} | {100 * (a - b):+.1f} pts |")
    lines += [
        "",
        "| task | difficulty | targeted | before | after | attempts |",
        "| --- | ---: | :---: | ---: | ---: | ---: |",
    ]
    for key in sorted(set(before) | set(after)):
        b, a = before.get(key, {}), after.get(key, {})
        lines.append(
            f"| {key[0]} | {key[1]} | {'yes' if key in targets else ''} | "
            f"{b.get('pass_rate', float('nan')):.1%} | {a.get('pass_rate', float('nan')):.1%} | {a.get('attempts', 0)} |"
        )
    lines += [
        "",
        "Problems trained on: " + ", ".join(f"{k} {v}" for k, v in sorted(data["problems"].items())),
        "",
    ]
    if data.get("proposer"):
        lines += [
            "The proposer on held-out prompts, its puzzles judged by the model entering the round "
            "(learnability: 4p(1-p) of that solver's success rate p, 0 for an invalid puzzle):",
            "",
            "| proposer | proposals | valid | learnability | solver's success on the valid ones |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for name in ("before", "after"):
            m = data["proposer"][name]
            success = "n/a" if m["solver_success"] is None else f"{m['solver_success']:.1%}"
            lines.append(
                f"| {name} | {m['proposals']} | {m['valid']:.1%} | {m['learnability']:.3f} | {success} |"
            )
        lines.append("")
    write_text_atomic(directory / "report.md", "\n".join(lines))


def write_plot(path: Path, rounds: list[dict[str, Any]]) -> None:
    """Held-out accuracy of each cell group after each round (round 0: before the first)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3.6))
    first = groups(rounds[0])
    for name, keep in first.items():
        if name == "the rest":
            continue
        points = [mean_rate(rounds[0]["before"], keep)] + [mean_rate(r["after"], keep) for r in rounds]
        label = f"{name} (round 1's targets)" if name == "targeted" else name
        axes.plot(range(len(points)), points, marker="o", label=label)
    axes.set_xlabel("round (0: before the first)")
    axes.set_ylabel("held-out pass rate")
    axes.set_xticks(range(len(rounds) + 1))
    axes.legend(fontsize=8)
    axes.set_title(f"self-play, {rounds[0]['targeting']} targeting", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
