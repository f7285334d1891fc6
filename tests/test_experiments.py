"""experiments/curriculum.py: its split of held-out problems by what the base did, by hand, and the
whole script run end to end at a tiny size (its figures are measured by running it, not here)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from axiom_rl.eval.store import Attempt, ResultsDB
from axiom_rl.tasks import generate_problems

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "curriculum.py"


def experiment(name: str):
    """experiments/NAME.py, loaded as a module."""
    spec = importlib.util.spec_from_file_location(f"{name}_experiment", SCRIPT.parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def curriculum():
    return experiment("curriculum")


def test_held_out_accuracy_splits_by_what_the_base_failed(curriculum, tmp_path: Path):
    a, b, c = generate_problems("countdown", 1, 3, seed=0)
    passed = {("base", a.id): 0, ("base", b.id): 1, ("base", c.id): 4, ("after", a.id): 1, ("after", b.id): 2,
              ("after", c.id): 3}  # fmt: skip
    with ResultsDB(tmp_path / "r.db") as db:
        for name in ("base", "after"):
            run = db.start_run(name, "tiny", {})
            db.add_batch(run, [a, b, c], [
                Attempt(p.id, s, "x", float(s < passed[name, p.id]), "passed" if s < passed[name, p.id] else "wrong_answer",
                        int(s < passed[name, p.id]), 1, 3, 0.0)
                for p in (a, b, c) for s in range(4)
            ])  # fmt: skip
    split = curriculum.held_out_split(tmp_path / "r.db", "base", "after")
    # a: failed by the base (every sample), 1 of 4 after; b and c: the rest, 2 + 3 of 8 after
    assert split == {"failed": 0.25, "rest": 5 / 8, "failed_n": 1, "rest_n": 2}


@pytest.mark.slow
def test_the_experiment_runs_resumes_and_reports(curriculum, tmp_path: Path, capsys):
    tiny = ["--seeds", "0", "--steps", "2", "--eval-every", "1", "--eval-count", "2", "--collect-count", "3",
            "--sft-steps", "5", "--out", str(tmp_path)]  # fmt: skip

    def run(*args: str) -> str:
        curriculum.main(list(args))
        return capsys.readouterr().out

    run("sources", "--arms", "uniform", "learnability-replay", *tiny)
    run("failures", *tiny)
    results = json.loads((tmp_path / "results.json").read_text())
    uniform = results["sources/s0/uniform"]
    assert sorted(uniform["curve"], key=int) == ["1", "2"] and len(uniform["zero_std_frac"]) == 2
    assert set(uniform["curve"]["2"]) == {"1", "2", "3", "4"}  # held-out accuracy per difficulty
    assert {"failed", "rest", "wall_s"} <= set(results["failures/s0/failures-dgro"])
    collected = [json.loads(line) for line in (tmp_path / "failures-s0.jsonl").read_text().splitlines()]
    assert collected and all(f["failures"]["run"] == "s0-base-train" for f in collected)
    before = (tmp_path / "results.json").read_text()
    assert "learnability-replay" not in run(
        "sources", "--arms", "learnability-replay", *tiny
    )  # already there
    assert (tmp_path / "results.json").read_text() == before
    report = run("report", "--out", str(tmp_path))
    assert "| learnability-replay |" in report and "| failures-dgro |" in report
    assert (tmp_path / "sources.png").stat().st_size > 1000 and (
        tmp_path / "failures.png"
    ).stat().st_size > 1000


@pytest.mark.slow
def test_the_code_configuration_measures_each_task(curriculum, tmp_path: Path, capsys):
    """The code comparison's path (its own SFT base, runs and results keys, held-out accuracy per
    task) on two tasks with short completions; its figures come from running the script."""
    import argparse
    import dataclasses

    import matplotlib
    from matplotlib import pyplot

    tasks = ("fizzbuzz", "lcs")
    small = dataclasses.replace(
        curriculum.CODE, tasks=tasks, difficulty="1-2", max_tokens=12,
        sft={**curriculum.CODE.sft, "tasks": list(tasks), "difficulty": "1-2"},
    )  # fmt: skip
    args = argparse.Namespace(seeds=[0], arms=["uniform", "adaptive"], steps=2, eval_every=1, eval_count=1,
                              sft_steps=3, out=str(tmp_path))  # fmt: skip
    curriculum.run_sources(args, small)
    results = json.loads((tmp_path / "results.json").read_text())
    assert {"code-sft/s0", "code/s0/base", "code/s0/uniform", "code/s0/adaptive"} <= set(results)
    assert set(results["code/s0/adaptive"]["curve"]["2"]) == set(tasks)  # held-out accuracy per task
    assert (tmp_path / "code-s0-adaptive" / "final_model").is_dir() and (tmp_path / "code-sft-s0").is_dir()
    with ResultsDB(tmp_path / "results.db") as db:
        attempts = db.attempts(db.require_run("code-s0-adaptive-final"))
    assert {a["task"] for a in attempts} == set(tasks) and len(
        attempts
    ) == 2 * 2 * 4  # tasks x levels x samples
    capsys.readouterr()
    matplotlib.use("Agg")
    curriculum.report_sources(results, small, tmp_path, pyplot)
    table = capsys.readouterr().out
    assert (
        "| source | seeds | wall s | zero-variance (mean over steps) | last 100 steps | fizzbuzz | lcs | mean |"
        in table
    )
    assert "| adaptive |" in table and (tmp_path / "code.png").stat().st_size > 1000


@pytest.mark.slow
def test_the_or_debug_experiment_runs_and_reports(tmp_path: Path, capsys):
    module = experiment("or_debug")
    module.main(
        [
            "run",
            "--seeds",
            "0",
            "--steps",
            "2",
            "--sft-steps",
            "3",
            "--eval-count",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    module.main(["report", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    results = json.loads((tmp_path / "results.json").read_text())
    for arm in ("base", "grpo", "sft-more"):
        assert set(results[f"or_debug/s0/{arm}"]) >= {"greedy", "sampled"}
        assert f"\n{arm} " in out
    assert results["or_debug/s0/sft-more"]["wall_s"] > 0


def test_time_to_accuracy_reads_a_run_s_clock_and_windows(tmp_path: Path):
    """Four steps of 1 s logged in a run of 8 s wall (each step counts 2 s); over windows of 2
    steps, accuracy 0, 0.5, 1, 1 first averages 0.75 at the third step: 6 s in."""
    metrics = tmp_path / "metrics.jsonl"
    rows = [{"accuracy": a, "time_rollout_s": 0.5, "time_update_s": 0.5} for a in (0.0, 0.5, 1.0, 1.0)]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    module = experiment("prm")
    assert module.time_to_accuracy(metrics, 8.0, 0.75, 2) == pytest.approx(6.0)
    assert module.time_to_accuracy(metrics, 8.0, 0.5, 1) == pytest.approx(4.0)
    assert module.time_to_accuracy(metrics, 8.0, 1.01, 2) is None


@pytest.mark.slow
def test_the_prm_experiment_runs_resumes_and_reports(tmp_path: Path, capsys):
    """experiments/prm.py end to end at a tiny size: every part recorded, a second run resumes
    without training again, and the report prints the PRM's figures and each arm."""
    module = experiment("prm")
    argv = ["run", "--seeds", "0", "--minutes", "0.05", "--sft-steps", "40", "--train-count", "8", "--eval-count", "3",
            "--prm-steps", "2", "--out", str(tmp_path)]  # fmt: skip
    module.main(argv)
    results = json.loads((tmp_path / "results.json").read_text())
    assert {"s0/prm-model", "s0/outcome", "s0/oracle_steps", "s0/prm", "s0/prm_mixed"} <= set(results)
    # the gated arm runs for the steps the plain λ 0.5 arm took, whatever the clock
    assert results["s0/prm_mixed"]["steps"] == results["s0/prm"]["steps"]
    model = results["s0/prm-model"]
    assert model["problems"] == 3 and 0 <= model["train_good"] <= model["train_steps"]
    assert all(results[f"s0/{arm}"]["steps"] >= 1 for arm in ("outcome", "oracle_steps"))
    assert "reward/oracle_steps" in results["s0/oracle_steps"]
    stamp = (tmp_path / "results.json").stat().st_mtime_ns
    module.main(argv)  # everything is there: nothing runs again
    assert (tmp_path / "results.json").stat().st_mtime_ns == stamp
    out = capsys.readouterr().out
    assert "| SFT base |" in out and "| oracle_steps |" in out and "step AUC" in out
    # a PRM on a larger body, trained and evaluated on the same labels, and GRPO with it, reported
    # beside the policy-body PRM's
    module.main(["body", "--seeds", "0", "--sft-steps", "2", "--prm-steps", "2", "--minutes", "0.05",
                 "--out", str(tmp_path)])  # fmt: skip
    results = json.loads((tmp_path / "results.json").read_text())
    body = results["s0/prm-body-tiny"]
    assert body["problems"] == model["problems"] and body["train_steps"] == model["train_steps"]
    assert results["s0/prm-body-tiny/grpo"]["steps"] >= 1 and (tmp_path / "s0" / "prm-tiny").is_dir()
    assert "reward/prm" in results["s0/prm-body-tiny/grpo"]
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| s0 |")]
    assert [row.split(" | ")[1] for row in rows] == [
        "micro",
        "tiny",
        "prm_mixed (micro PRM)",
        "prm_mixed (tiny PRM)",
    ]


def test_the_selfplay_experiment_runs_resumes_and_reports(tmp_path: Path, capsys):
    """experiments/selfplay.py end to end at a tiny size: the saboteur's yield, both arms of a
    seed recorded, a second run resumes without training again, and the report prints them."""
    module = experiment("selfplay")
    argv = ["run", "--seeds", "0", "--sft-steps", "2", "--rounds", "2", "--steps-per-round", "1", "--eval-count", "1",
            "--yield-count", "1", "--out", str(tmp_path)]  # fmt: skip
    module.main(argv)
    results = json.loads((tmp_path / "results.json").read_text())
    assert {"yield", "s0/sft", "s0/weakness", "s0/uniform"} <= set(results)
    weakness = results["s0/weakness"]
    assert len(weakness["all cells"]) == 3 and len(weakness["targets"]) == 2 and weakness["targets"][0]
    assert all(row["tried"] > 0 and 0 <= row["kept"] <= row["tried"] for row in results["yield"])
    stamp = (tmp_path / "results.json").stat().st_mtime_ns
    module.main(argv)  # everything is there: nothing runs again
    assert (tmp_path / "results.json").stat().st_mtime_ns == stamp
    out = capsys.readouterr().out
    assert "| s0 | weakness |" in out and "| s0 | uniform |" in out and "kept / tried" in out
