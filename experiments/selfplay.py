"""Self-play measured: rounds that target the weakest cells (and their debug problems) against a
uniform control with the same steps, and the saboteur's yield per operator and task.

Per seed: the built-in micro model SFT'd from scratch on the reference solutions of three code
tasks and of their debug tasks (difficulties 1-3; 200 steps x 16, lr 2e-3 cosine, 20 warm-up
steps); then two self-play runs from it, `weakness` and `uniform` targeting, each 3 rounds of 15
GRPO steps (4 prompts x 8 completions of at most 256 tokens, lr 5e-5, beta 0.04, T 1.0), with
held-out evaluation of every cell (6 eval-split problems x 2 samples at T 1.0) before the first
round and after each. Both arms train on the same number of problems per round, so the same
work; each arm's wall time is printed beside it.

    python experiments/selfplay.py run --seeds 0 1 2 --out runs/selfplay-experiment
    python experiments/selfplay.py report --out runs/selfplay-experiment

OUT/results.json holds each finished part (a stopped experiment resumes: a self-play run resumes
at the round and step where it stopped).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from curriculum import Results, quiet  # noqa: E402

from axiom_rl.config import SFTConfig  # noqa: E402
from axiom_rl.selfplay import SelfPlayConfig, run_selfplay  # noqa: E402
from axiom_rl.selfplay.report import groups, mean_rate  # noqa: E402
from axiom_rl.tasks import generate_problems  # noqa: E402
from axiom_rl.tasks.debug.saboteur import SabotageYield, all_bugs  # noqa: E402
from axiom_rl.train.sft import sft  # noqa: E402

TASKS = ("is_palindrome", "max_subarray", "house_robber")
DIFFICULTY = "1-3"
ARMS = ("weakness", "uniform")


def sft_base(out: Path, seed: int, steps: int, results: Results) -> Path:
    final = out / f"sft-s{seed}" / "final_model"
    if not (final / "axiom_rl.json").exists():
        import shutil

        shutil.rmtree(final.parent, ignore_errors=True)  # an SFT stopped before it finished
        start = time.perf_counter()
        sft(
            SFTConfig(model="tiny", tiny_size="micro", tasks=[*TASKS, *(f"debug_{t}" for t in TASKS)],
                      difficulty=DIFFICULTY, steps=steps, batch_size=16, lr=2e-3, lr_schedule="cosine",
                      warmup_steps=20, seed=seed, output_dir=str(final.parent), save_every=0),
            say=quiet,
        )  # fmt: skip
        results.put(f"s{seed}/sft", {"seconds": time.perf_counter() - start})
        print(f"seed {seed}: SFT base in {time.perf_counter() - start:.0f}s", flush=True)
    return final


def arm_config(out: Path, seed: int, base: Path, arm: str, args: argparse.Namespace) -> SelfPlayConfig:
    return SelfPlayConfig(
        model=str(base), tasks=list(TASKS), difficulty=DIFFICULTY, rounds=args.rounds,
        steps_per_round=args.steps_per_round, targeting=arm, eval_count=args.eval_count, eval_samples=2,
        lr=args.lr, seed=seed, out=str(out / f"s{seed}-{arm}"),
    )  # fmt: skip


def summarise(state: dict[str, Any]) -> dict[str, Any]:
    """Held-out accuracy by group: round 1's targets, the rest, the debug tasks, all cells;
    before the first round and after each."""
    rounds = state["rounds"]
    first = groups(rounds[0])
    return {
        name: [mean_rate(rounds[0]["before"], keep)] + [mean_rate(r["after"], keep) for r in rounds]
        for name, keep in first.items()
    } | {"seconds": sum(sum(r["seconds"].values()) for r in rounds),
         "targets": [r["targets"] for r in rounds]}  # fmt: skip


def saboteur_yield(count: int) -> list[dict[str, Any]]:
    """Every single-edit mutant of `count` train-split problems per task and difficulty 1-3,
    screened: tried and kept per operator and task."""
    from axiom_rl.sandbox import Sandbox

    tally = SabotageYield()
    with Sandbox() as sandbox:
        for task in TASKS:
            for difficulty in (1, 2, 3):
                for problem in generate_problems(task, difficulty, count, seed=0):
                    all_bugs(problem, sandbox, tally=tally)
    return tally.rows()


def run_seed(out: Path, seed: int, args: argparse.Namespace, results: Results) -> None:
    base = sft_base(out, seed, args.sft_steps, results)
    for arm in ARMS:
        if results.get(f"s{seed}/{arm}") is not None:
            continue
        start = time.perf_counter()
        state = run_selfplay(arm_config(out, seed, base, arm, args), say=quiet)
        results.put(f"s{seed}/{arm}", {**summarise(state), "wall_s": time.perf_counter() - start})
        print(f"seed {seed}: {arm} in {time.perf_counter() - start:.0f}s", flush=True)


def mean_spread(values: list[float], scale: float = 100.0, unit: str = "") -> str:
    if not values:
        return "-"
    text = f"{scale * statistics.fmean(values):+.1f}"
    return text + (f" ± {scale * statistics.stdev(values):.1f}" if len(values) > 1 else "") + unit


def report(out: Path) -> str:
    results = Results(out).data
    seeds = sorted({k.split("/")[0] for k in results if k.startswith("s") and "/" in k})
    lines = ["| seed | arm | round 1's targets: before → after round 3 | the rest | debug tasks | all cells | wall |",
             "| --- | --- | --- | --- | --- | --- | ---: |"]  # fmt: skip
    gains: dict[str, list[float]] = {arm: [] for arm in ARMS}
    rest: dict[str, list[float]] = {arm: [] for arm in ARMS}
    debug: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for seed in seeds:
        weak = results.get(f"{seed}/weakness")
        for arm in ARMS:
            r = results.get(f"{seed}/{arm}")
            if r is None or weak is None:
                continue
            # Both arms are read on the cells the weakness arm's round 1 targeted (both start
            # from the same model, evaluated alike): the targeted cells, and the rest.
            targeted = _on_cells(out, seed, arm, weak["targets"][0])
            others = _on_cells(out, seed, arm, weak["targets"][0], complement=True)
            gains[arm].append(targeted[-1] - targeted[0])
            rest[arm].append(others[-1] - others[0])
            debug[arm].append(r["debug tasks"][-1] - r["debug tasks"][1])
            lines.append(
                f"| {seed} | {arm} | {targeted[0]:.1%} → {targeted[-1]:.1%} | {others[0]:.1%} → {others[-1]:.1%} | "
                f"{' → '.join(f'{v:.0%}' for v in r['debug tasks'])} | {r['all cells'][0]:.1%} → {r['all cells'][-1]:.1%} | "
                f"{r['wall_s'] / 60:.1f} min |"
            )
    lines += ["", "| arm | seeds | round 1's targets, pts | elsewhere, pts | debug tasks round 1 → 3, pts |",
              "| --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for arm in ARMS:
        lines.append(
            f"| {arm} | {len(gains[arm])} | {mean_spread(gains[arm])} | {mean_spread(rest[arm])} | {mean_spread(debug[arm])} |"
        )
    if "yield" in results:
        lines += ["", "| task | operator | kept / tried |", "| --- | --- | ---: |"]
        for row in results["yield"]:
            lines.append(f"| {row['task']} | {row['operator']} | {row['kept']} / {row['tried']} |")
    return "\n".join(lines)


def _on_cells(
    out: Path, seed: str, arm: str, cells: list[list[Any]], complement: bool = False
) -> list[float]:
    """An arm's held-out accuracy (before round 1, after each round) on these cells (or the others)."""
    import json

    state = json.loads((out / f"{seed}-{arm}" / "selfplay.json").read_text())
    wanted = {tuple(c) for c in cells}

    def keep(task: str, difficulty: int) -> bool:
        return ((task, difficulty) in wanted) != complement

    rounds = state["rounds"]
    return [mean_rate(rounds[0]["before"], keep)] + [mean_rate(r["after"], keep) for r in rounds]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["run", "report"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sft-steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps-per-round", type=int, default=15)
    parser.add_argument("--eval-count", type=int, default=6, help="held-out problems per cell")
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument(
        "--yield-count", type=int, default=5, help="problems per task and difficulty for the saboteur's yield"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/selfplay-experiment"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.what == "run":
        results = Results(args.out)
        if results.get("yield") is None:
            results.put("yield", saboteur_yield(args.yield_count))
        for seed in args.seeds:
            run_seed(args.out, seed, args, results)
            print(f"seed {seed} done", flush=True)
    print(report(args.out))


if __name__ == "__main__":
    main()
