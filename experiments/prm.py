"""Process rewards labelled by the verifier, measured: the PRM's step AUC and best-of-8 reranking on
held-out Countdown problems, and GRPO with process rewards (the exact labels, the learned PRM)
against outcome-only GRPO for the same wall time.

Per seed: the built-in micro model SFT'd on Countdown difficulty 1 in the steps style (the
quickstart's SFT settings: 700 steps x 64, lr 2e-3 constant, 50 warm-up steps); its completions on
2,000 train-split problems and 200 held-out ones, 8 samples each at T = 1.0, labelled by `prm
label`; a PRM trained on the train-split labels (2,000 steps, otherwise `prm train`'s defaults) and
evaluated on the held-out ones (`prm eval`); then GRPO arms from the SFT'd model for the same wall
time each (--minutes): outcome only (countdown), countdown + oracle_steps (λ 0.5), countdown + prm
(λ 0.5 and 0.1); and countdown + prm (λ 0.5) with --process-groups mixed for the steps the plain λ
0.5 arm took; each 16 prompts x 8 completions of at most 64 tokens, lr 2e-4, β 0.01, T 1.0, and each evaluated
on 200 held-out problems x 4 samples at T = 1.0.

    python experiments/prm.py run --seeds 0 1 2 --minutes 3 --out runs/prm-experiment
    python experiments/prm.py report --out runs/prm-experiment

The code tasks' Monte-Carlo labels (`code`): per seed, the curriculum experiment's code base (the
micro model SFT'd on six code tasks' reference solutions, difficulties 1-5); its completions at
T = 1.0 on train-split and held-out problems of every task and difficulty, 4 samples each; each
line of a function body labelled by 4 continuations of its prefix from the same policy, verified
in the sandbox (the label is the share that pass); a PRM trained on the train-split labels and
evaluated on the held-out ones.

    python experiments/prm.py code --seeds 0 1 2 --out runs/prm-code

A larger body for the Countdown PRM (`body`): per seed of a finished `run`, a built-in model of
--body-size (tiny: 3.0M parameters, the policy's micro 0.8M) SFT'd as the policy was, then a PRM
on its body trained and evaluated on the same labels, and a GRPO arm with it (λ 0.5, process
credit where outcomes differ, --minutes), beside the policy-body PRM's figures.

    python experiments/prm.py body --body-size tiny --seeds 0 1 2 --out runs/prm-experiment

OUT/results.json holds each finished part (a stopped run resumes after the last one).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from curriculum import CODE, Results, quiet, sft_base  # noqa: E402

from axiom_rl.cli import main as cli  # noqa: E402
from axiom_rl.config import EvalConfig, SFTConfig, TrainConfig  # noqa: E402
from axiom_rl.eval.evaluate import evaluate  # noqa: E402
from axiom_rl.quickstart import QuickstartConfig, sft_settings  # noqa: E402
from axiom_rl.train.grpo import train  # noqa: E402
from axiom_rl.train.sft import sft  # noqa: E402

MAX_TOKENS = 64
ARMS = {
    "outcome": {"rewards": "countdown"},
    "oracle_steps": {"rewards": "countdown:1.0,oracle_steps:0.5"},
    "prm": {"rewards": "countdown:1.0,prm:0.5"},
    "prm_small": {"rewards": "countdown:1.0,prm:0.1"},  # the learned PRM with a fifth of the weight
    # λ 0.5 with process credit only in groups whose outcomes differ, for as many steps as the
    # plain λ 0.5 arm took (the guard against hacking, compared step for step)
    "prm_mixed": {"rewards": "countdown:1.0,prm:0.5", "process_groups": "mixed"},
}
STEPS_OF = {"prm_mixed": "prm"}  # arms run for the steps another arm took, not for --minutes


def held_out(model: Path, db: Path, run: str, seed: int, count: int) -> float:
    """Sampled accuracy (T = 1.0) on `count` eval-split problems of difficulty 1, 4 samples each."""
    _, summary = evaluate(
        EvalConfig(model=str(model), tasks=["countdown"], difficulty="1", count=count, samples=4, temperature=1.0,
                   split="eval", max_completion_length=MAX_TOKENS, db=str(db), run_name=run, seed=seed),
        say=quiet,
    )  # fmt: skip
    return summary[0]["success_rate"]


def train_and_evaluate_prm(
    seed_dir: Path, base: Path, seed: int, steps: int, name: str = "prm"
) -> dict[str, Any]:
    """`prm train` on seed_dir's train-samples.jsonl (on the base's body, into seed_dir/NAME) and
    `prm eval` on its held-out.jsonl: the eval's figures, the training's seconds and the training
    labels' counts (a step is good at >= 0.5: Countdown's labels are 0 or 1, code's a share)."""
    start = time.perf_counter()
    assert cli(["prm", "train", "--model", str(base), "--labels", str(seed_dir / "train-samples.jsonl"),
                "--out", str(seed_dir / name), "--seed", str(seed), "--steps", str(steps)]) == 0  # fmt: skip
    prm_s = time.perf_counter() - start
    figures = seed_dir / f"{name}-eval.json"
    assert cli(["prm", "eval", "--prm", str(seed_dir / name), "--labels", str(seed_dir / "held-out.jsonl"),
                "--out", str(figures)]) == 0  # fmt: skip
    rows = [json.loads(line) for line in (seed_dir / "train-samples.jsonl").read_text().splitlines()]
    labels = [x for row in rows for x in row["labels"]]
    return {**json.loads(figures.read_text()), "prm_train_s": prm_s, "train_completions": len(rows),
            "train_steps": len(labels), "train_good": sum(x >= 0.5 for x in labels)}  # fmt: skip


def steps_style_sft(output_dir: Path, seed: int, steps: int, size: str = QuickstartConfig.tiny_size) -> float:
    """The quickstart's SFT on Countdown difficulty 1 in the steps style, for a built-in model of
    `size`; its seconds."""
    settings = {k: v for k, v in sft_settings(QuickstartConfig()).items() if k != "seed"}
    settings.update(prompt_style="steps", output_dir=str(output_dir), seed=seed, save_every=0, steps=steps,
                    tiny_size=size)  # fmt: skip
    start = time.perf_counter()
    sft(SFTConfig(**settings), say=quiet)
    return time.perf_counter() - start


def run_seed(out: Path, seed: int, args: argparse.Namespace, results: Results) -> None:
    base_dir = out / f"s{seed}"
    base = base_dir / "sft" / "final_model"
    db = base_dir / "results.db"
    if results.get(f"s{seed}/prm-model") is None:
        sft_s = steps_style_sft(base_dir / "sft", seed, args.sft_steps)
        for split, count, name in (
            ("train", args.train_count, "train-samples"),
            ("eval", args.eval_count, "held-out"),
        ):
            evaluate(
                EvalConfig(model=str(base), tasks=["countdown"], difficulty="1", count=count, samples=8,
                           temperature=1.0, split=split, max_completion_length=MAX_TOKENS, db=str(db),
                           run_name=name, seed=seed),
                say=quiet,
            )  # fmt: skip
            assert (
                cli(
                    ["prm", "label", "--db", str(db), "--run", name, "--out", str(base_dir / f"{name}.jsonl")]
                )
                == 0
            )
        results.put(f"s{seed}/prm-model", {**train_and_evaluate_prm(base_dir, base, seed, args.prm_steps), "sft_s": sft_s,
                                           "base_heldout": held_out(base, db, "base-heldout", seed, args.eval_count)})  # fmt: skip
    for arm, settings in ARMS.items():
        key = f"s{seed}/{arm}"
        if results.get(key) is not None:
            continue
        like = STEPS_OF.get(arm)
        steps, seconds = (
            (results.get(f"s{seed}/{like}")["steps"], 0.0) if like else (10**6, args.minutes * 60)
        )
        prm = base_dir / "prm" if arm.startswith("prm") else None
        results.put(
            key, grpo_arm(base, base_dir / f"grpo-{arm}", db, seed, settings, prm, steps, seconds, args)
        )


def grpo_arm(
    base: Path, run_dir: Path, db: Path, seed: int, settings: dict[str, Any], prm: Path | None, steps: int,
    seconds: float, args: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    """One GRPO arm from the SFT'd base (16 prompts x 8 completions, lr 2e-4, β 0.01, T 1.0) for
    `steps` or `seconds`, whichever ends first: its held-out accuracy (run name: the run
    directory's), training curve and reward components."""
    start = time.perf_counter()
    result = train(
        TrainConfig(model=str(base), tasks=["countdown"], difficulty="1", steps=steps, prompts_per_step=16,
                    num_generations=8, max_completion_length=MAX_TOKENS, lr=2e-4, beta=0.01, temperature=1.0,
                    seed=seed, max_seconds=seconds, save_every=0, output_dir=str(run_dir),
                    prm=None if prm is None else str(prm), **settings),
        say=quiet,
    )  # fmt: skip
    wall = time.perf_counter() - start
    rows = result.metrics
    tenth = max(1, len(rows) // 10)
    return {
        "steps": result.steps, "wall_s": wall,
        "heldout": held_out(run_dir / "final_model", db, run_dir.name, seed, args.eval_count),
        "train_accuracy_first": statistics.fmean(r["accuracy"] for r in rows[:tenth]),
        "train_accuracy_last": statistics.fmean(r["accuracy"] for r in rows[-tenth:]),
        "zero_std_frac": statistics.fmean(r["zero_std_frac"] for r in rows),
        **{k: statistics.fmean(r[k] for r in rows[-tenth:]) for k in rows[-1] if k.startswith("reward/")},
    }  # fmt: skip


def run_body_seed(out: Path, seed: int, args: argparse.Namespace, results: Results) -> None:
    """A PRM on a larger body than the policy's: a built-in model of --body-size SFT'd as the
    policy was (the same data, steps and settings), then trained and evaluated on the policy's
    labels from `run` (the same completions, the same held-out set)."""
    if results.get(f"s{seed}/prm-model") is None:
        raise SystemExit(f"seed {seed} has no labels in {out}: run `prm.py run --seeds {seed}` there first")
    seed_dir = out / f"s{seed}"
    name = f"prm-{args.body_size}"
    key = f"s{seed}/prm-body-{args.body_size}"
    if results.get(key) is None:
        body = seed_dir / f"sft-{args.body_size}"
        sft_s = steps_style_sft(body, seed, args.sft_steps, args.body_size)
        figures = train_and_evaluate_prm(seed_dir, body / "final_model", seed, args.prm_steps, name)
        results.put(key, {**figures, "sft_s": sft_s})
    if results.get(f"{key}/grpo") is None:
        # the policy-body PRM's safe setting (λ 0.5, process credit where outcomes differ), for
        # outcome-only's wall time
        results.put(f"{key}/grpo", grpo_arm(seed_dir / "sft" / "final_model", seed_dir / f"grpo-prm_mixed-{args.body_size}",
                                            seed_dir / "results.db", seed, ARMS["prm_mixed"], seed_dir / name,
                                            10**6, args.minutes * 60, args))  # fmt: skip


def body_report(out: Path) -> str:
    """Each seed's PRMs (the policy's body first, then the larger ones) and GRPO with each at λ 0.5
    where outcomes differ, beside outcome-only."""
    results = Results(out).data
    prms = sorted(
        (key.split("/")[0], key.split("/")[1].removeprefix("prm-body-"), r)
        for key, r in results.items()
        if key.count("/") == 1 and key.split("/")[1].startswith("prm-body-")
    )
    lines = ["| seed | body | step AUC | one sample | best-of-8 (PRM, min) | majority | oracle | SFT, PRM train (s) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for seed, size, r in [
        (s, QuickstartConfig.tiny_size, results[f"{s}/prm-model"]) for s in sorted({p[0] for p in prms})
    ] + prms:
        area = "n/a" if r["auc"] is None else format(r["auc"], ".3f")
        lines.append(
            f"| {seed} | {size} | {area} | {r['single']:.1%} | {r['best_of_n_min']:.1%} | {r['majority']:.1%} | "
            f"{r['oracle']:.1%} | {r['sft_s']:.0f}, {r['prm_train_s']:.0f} |"
        )  # fmt: skip
    lines += [
        "",
        "| seed | arm | steps | held-out (T = 1.0) | over outcome-only, pts |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for seed, size, _ in prms:
        outcome = results.get(f"{seed}/outcome")
        for arm, r in ((f"prm_mixed ({QuickstartConfig.tiny_size} PRM)", results.get(f"{seed}/prm_mixed")),
                       (f"prm_mixed ({size} PRM)", results.get(f"{seed}/prm-body-{size}/grpo"))):  # fmt: skip
            if r is not None:
                gain = "-" if outcome is None else f"{100 * (r['heldout'] - outcome['heldout']):+.1f}"
                lines.append(f"| {seed} | {arm} | {r['steps']} | {r['heldout']:.1%} | {gain} |")
    return "\n".join(lines)


def run_code_seed(out: Path, seed: int, args: argparse.Namespace, results: Results) -> None:
    """Monte-Carlo step labels on code, a PRM trained on them, and its held-out AUC and reranking."""
    key = f"code/s{seed}"
    if results.get(key) is not None:
        return
    base = sft_base(out, seed, results, args.code_sft_steps, CODE)
    seed_dir = out / f"code-s{seed}"
    seed_dir.mkdir(parents=True, exist_ok=True)
    db = seed_dir / "results.db"
    label_s = 0.0
    for split, count, name in (("train", args.code_train_count, "train-samples"), ("eval", 1, "held-out")):
        labels = seed_dir / f"{name}.jsonl"
        if labels.exists():
            continue
        evaluate(
            EvalConfig(model=str(base), tasks=list(CODE.tasks), difficulty=CODE.difficulty, count=count, samples=4,
                       temperature=CODE.temperature, split=split, max_completion_length=CODE.max_tokens, db=str(db),
                       run_name=name, seed=seed, batch_size=128),
            say=quiet,
        )  # fmt: skip
        start = time.perf_counter()
        assert cli(["prm", "label", "--db", str(db), "--run", name, "--out", str(labels), "--model", str(base),
                    "--continuations", str(args.continuations), "--max-tokens", str(CODE.max_tokens)]) == 0  # fmt: skip
        label_s += time.perf_counter() - start
    results.put(
        key, {**train_and_evaluate_prm(seed_dir, base, seed, args.code_prm_steps), "label_s": label_s}
    )


def code_report(out: Path) -> str:
    results = {k: v for k, v in Results(out).data.items() if k.startswith("code/")}
    lines = ["| seed | train steps (good) | held-out steps (good) | step AUC | one sample | best-of-4 (PRM, min) | majority | oracle |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for key, r in sorted(results.items()):
        area = "n/a" if r["auc"] is None else format(r["auc"], ".3f")
        lines.append(
            f"| {key.split('/s')[1]} | {r['train_steps']} ({r['train_good'] / max(1, r['train_steps']):.0%}) | "
            f"{r['steps']} ({r['good_steps'] / max(1, r['steps']):.0%}) | {area} | {r['single']:.1%} | "
            f"{r['best_of_n_min']:.1%} | {r['majority']:.1%} | {r['oracle']:.1%} |"
        )
    return "\n".join(lines)


def mean_spread(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.1%}"
    return f"{statistics.fmean(values):.1%} ± {statistics.stdev(values):.1%}"


STEP_CLOCK = ("time_rollout_s", "time_reward_s", "time_update_s", "time_reference_s")


def time_to_accuracy(metrics: Path, wall_s: float, target: float, window: int) -> float | None:
    """Seconds into a GRPO run when the mean training accuracy of `window` consecutive steps first
    reaches `target`, or None if it never does. Each step's time is its logged stage times, scaled
    so that the run's steps add up to its wall time (the stages leave out the logging between them)."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    spent = [sum(r.get(k, 0.0) for k in STEP_CLOCK) for r in rows]
    scale = wall_s / max(sum(spent), 1e-9)
    clock = 0.0
    for i, step_s in enumerate(spent):
        clock += step_s * scale
        if (
            i + 1 >= window
            and statistics.fmean(x["accuracy"] for x in rows[i + 1 - window : i + 1]) >= target
        ):
            return clock
    return None


def to_outcome_accuracy(out: Path, seed: str, arm: str, results: dict[str, Any]) -> float | None:
    """An arm's time to outcome-only's final training accuracy (the mean of its last tenth of the
    steps, over windows of that many steps), as a multiple of outcome-only's own time to it."""
    outcome = results[f"{seed}/outcome"]
    window = max(1, outcome["steps"] // 10)

    def seconds(name: str) -> float | None:
        return time_to_accuracy(out / seed / f"grpo-{name}" / "metrics.jsonl", results[f"{seed}/{name}"]["wall_s"],
                                outcome["train_accuracy_last"] - 1e-12, window)  # fmt: skip

    base, mine = seconds("outcome"), seconds(arm)
    return None if base is None or mine is None else mine / base


def report(out: Path) -> str:
    results = {k: v for k, v in Results(out).data.items() if not k.startswith("code/")}
    seeds = sorted({k.split("/")[0] for k in results})
    prm = [results[f"{s}/prm-model"] for s in seeds if f"{s}/prm-model" in results]
    lines = [f"seeds: {', '.join(seeds)}", "", "| seed | step AUC | one sample | best-of-8 (PRM, min) | majority | oracle |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for s, r in zip(seeds, prm):
        lines.append(
            f"| {s} | {'n/a' if r['auc'] is None else format(r['auc'], '.3f')} | {r['single']:.1%} | {r['best_of_n_min']:.1%} | {r['majority']:.1%} | {r['oracle']:.1%} |"
        )
    lines += ["", "| arm | seeds | steps | held-out (T = 1.0) | over outcome-only, pts | zero-variance fraction | "
              "time to outcome-only's final training accuracy, × its |",
              "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    base = [r["base_heldout"] for r in prm]
    lines.append(f"| SFT base | {len(base)} | - | {mean_spread(base)} | - | - | - |")
    outcome = {s: results[f"{s}/outcome"]["heldout"] for s in seeds if f"{s}/outcome" in results}
    for arm in ARMS:
        runs = {s: results[f"{s}/{arm}"] for s in seeds if f"{s}/{arm}" in results}
        if not runs:
            continue
        gains = [100 * (r["heldout"] - outcome[s]) for s, r in runs.items() if s in outcome]
        gain = f"{statistics.fmean(gains):+.1f}" + (
            f" ± {statistics.stdev(gains):.1f}" if len(gains) > 1 else ""
        )
        times = [to_outcome_accuracy(out, s, arm, results) for s in runs if s in outcome]
        reached = [f"{t:.2f}" for t in times if t is not None]
        when = (
            "-"
            if arm == "outcome"
            else f"{', '.join(reached) or 'never'} ({len(reached)} of {len(times)} seeds)"
        )
        lines.append(
            f"| {arm} | {len(runs)} | {statistics.fmean(r['steps'] for r in runs.values()):.0f} | "
            f"{mean_spread([r['heldout'] for r in runs.values()])} | {gain if arm != 'outcome' else '-'} | "
            f"{statistics.fmean(r['zero_std_frac'] for r in runs.values()):.3f} | {when} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["run", "code", "body", "report"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--minutes", type=float, default=3.0, help="wall time of each GRPO arm")
    parser.add_argument("--sft-steps", type=int, default=700, help="the base's SFT steps (the quickstart's)")
    parser.add_argument(
        "--train-count", type=int, default=2000, help="train-split problems whose samples are labelled"
    )
    parser.add_argument("--eval-count", type=int, default=200, help="held-out problems")
    parser.add_argument("--prm-steps", type=int, default=2000, help="prm train's steps")
    parser.add_argument("--code-sft-steps", type=int, default=200, help="code: the base's SFT steps")
    parser.add_argument(
        "--code-train-count", type=int, default=2, help="code: train-split problems per task and difficulty"
    )
    parser.add_argument("--continuations", type=int, default=4, help="code: continuations per step")
    parser.add_argument("--code-prm-steps", type=int, default=80, help="code: prm train's steps")
    parser.add_argument(
        "--body-size",
        default="tiny",
        choices=["tiny", "small"],
        help="body: the larger built-in model's size",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/prm-experiment"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.what == "run":
        results = Results(args.out)
        for seed in args.seeds:
            run_seed(args.out, seed, args, results)
            print(f"seed {seed} done", flush=True)
    if args.what == "code":
        results = Results(args.out)
        for seed in args.seeds:
            run_code_seed(args.out, seed, args, results)
            print(f"code, seed {seed} done", flush=True)
    if args.what == "body":
        results = Results(args.out)
        for seed in args.seeds:
            run_body_seed(args.out, seed, args, results)
            print(f"{args.body_size} body, seed {seed} done", flush=True)
    print({"code": code_report, "body": body_report}.get(args.what, report)(args.out))


if __name__ == "__main__":
    main()
