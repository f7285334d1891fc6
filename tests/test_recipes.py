"""`axiom-rl experiment`: each recipe run end to end in its smoke mode (a real model, sandbox and
SQLite file; a few steps, so it measures nothing), resumed, and refused on bad input; the loop
checklist, the sweep's outcome counts and the hybrid's reference by hand. The recipes' figures
are measured by running them (docs/results.md), not here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from axiom_rl.algorithms.aggregate import AGGREGATIONS
from axiom_rl.cli import main
from axiom_rl.recipes.hard_problems import SCALES as HARD_SCALES
from axiom_rl.recipes.loop_validation import checklist
from axiom_rl.recipes.token_budget import SCALES, arms, outcome_counts


def step(**changes: float) -> dict[str, float]:
    row = {"step": 1, "loss": 0.01, "reward_mean": 0.5, "reward_max": 1.0, "reward_std": 0.5, "zero_std_frac": 0.5,
           "kl": 1e-4, "grad_norm": 0.2, "completion_len_mean": 40.0, "completions": 2, "internal_errors": 0,
           "status/passed": 1, "status/wrong_answer": 1}  # fmt: skip
    return {**row, **changes}


def verdicts(metrics: list[dict[str, float]], change: float | None = 1e-3) -> dict[str, bool]:
    return {c["stage"]: c["ok"] for c in checklist(metrics, [], change, expected=2 * len(metrics))}


def test_the_loop_checklist_passes_a_working_loop_and_names_each_broken_stage():
    good = [step(kl=0.0), step(step=2)]
    assert all(verdicts(good).values())
    assert not verdicts([step(kl=0.0), step(step=2, loss=math.nan)])["numerical stability"]
    broken = verdicts([step(**{"status/passed": 0, "status/wrong_answer": 0, "status/no_code": 2})])
    assert not broken["code extraction"] and not broken["test execution"]
    assert not verdicts([step(internal_errors=1)])["test execution"]
    assert not verdicts([step(kl=0.0), step(step=2, kl=0.0)])["KL penalty"]  # the policy never moved
    assert not verdicts(good, change=0.0)["backpropagation"]
    assert not verdicts([step(completions=1)])["rollout"]  # a completion missing
    assert not verdicts([step(reward_mean=1.5, reward_max=1.5)])["reward computation"]


def test_outcomes_are_counted_as_the_original_counts_them():
    attempts = [{"status": s, "tokens": t} for s, t in
                [("passed", 10), ("wrong_answer", 12), ("syntax_error", 14), ("format_error", 24)]]  # fmt: skip
    assert outcome_counts(attempts) == {
        "accuracy": 0.25,
        "correct": 1,
        "partial": 2,
        "failed": 1,
        "mean_tokens": 15,
    }


def test_the_sweep_crosses_every_loss_with_every_budget_and_adds_the_graduated_reward():
    names = [a[0] for a in arms(SCALES["cpu"])]
    assert names[:9] == [f"{loss}-{b}" for loss in ("grpo", "dr_grpo", "hybrid") for b in (12, 24, 48)]
    assert names[9:] == ["grpo-48-graduated", "dr_grpo-48-graduated"]


def test_the_hybrid_s_reference_scales_its_alpha():
    per_token = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    mask = per_token.clone()
    # longest completion 4; reference 8 -> alpha 0.5; grpo = 1, dr_grpo = 6 / (2 x 8) = 0.375
    got = AGGREGATIONS["hybrid"](per_token, mask, max_completion_length=8, hybrid_reference_tokens=8)
    assert got.item() == pytest.approx(0.5 * 0.375 + 0.5 * 1.0)
    with pytest.raises(Exception, match="hybrid_reference_tokens must be > 0"):
        AGGREGATIONS["hybrid"](per_token, mask, max_completion_length=8, hybrid_reference_tokens=0)


def test_loop_validation_writes_the_run_directory_and_resumes(tmp_path: Path, capsys):
    out = tmp_path / "lv"
    code = main(["experiment", "loop-validation", "--smoke", "--out", str(out)])
    printed = capsys.readouterr().out
    run = out / "s0"
    for name in ("config.json", "training_log.txt", "metrics.jsonl", "checklist.json", "samples.jsonl"):
        assert (run / name).is_file(), name
    checks = json.loads((run / "checklist.json").read_text())
    assert [c["stage"] for c in checks][:3] == ["rollout", "code extraction", "test execution"]
    assert code == (0 if all(c["ok"] for c in checks) else 1)  # a failed stage fails the command
    assert "| rollout |" in printed and "step 1 |" in (run / "training_log.txt").read_text()
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    before = (run / "metrics.jsonl").stat().st_mtime_ns
    assert main(["experiment", "loop-validation", "--smoke", "--out", str(out)]) == code
    assert (run / "metrics.jsonl").stat().st_mtime_ns == before  # read back, not run again

    # The gpu scale's path (a model by name or directory, no SFT, LoRA), on a local directory here.
    gpu = tmp_path / "gpu"
    model = out / "sft-s0" / "final_model"
    main(
        [
            "experiment",
            "loop-validation",
            "--smoke",
            "--scale",
            "gpu",
            "--model",
            str(model),
            "--out",
            str(gpu),
        ]
    )
    config = json.loads((gpu / "s0" / "config.json").read_text())
    assert config["model"] == str(model) and config["finetune"] == "lora"
    assert not (gpu / "sft-s0").exists()


def test_token_budget_sweep_fills_the_original_s_table(tmp_path: Path, capsys):
    out = tmp_path / "tb"
    assert main(["experiment", "token-budget-sweep", "--smoke", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert len(results) == 3 + 11  # zero-shot at each budget, and every run
    for budget in (8, 12, 16):
        row = results[f"s0/grpo-{budget}"]
        assert row["correct"] + row["partial"] + row["failed"] == 4
        assert row["mean_tokens"] <= budget
    header = "| loss | max tokens | zero-shot accuracy | trained accuracy | improvement | correct | partial | failed |"
    assert header in printed and "Dr. GRPO (graduated reward)" in printed
    assert (out / "report.md").read_text().count("| hybrid |") == 3


def test_hard_problems_measures_every_task_before_and_after(tmp_path: Path, capsys):
    out = tmp_path / "hp"
    assert main(["experiment", "hard-problems", "--smoke", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    tasks = {"edit_distance", "coin_change", "lcs", "knapsack_01", "house_robber", "max_subarray"}
    for arm in ("base", "grpo", "distill-sft", "distill", "distill-more-sft"):
        assert set(results[f"s0/{arm}"]["accuracy"]) == tasks, arm
    sft = json.loads((out / "s0" / "sft" / "config.json").read_text())
    assert "edit_distance" not in sft["tasks"] and "lcs" in sft["tasks"]
    grpo = json.loads((out / "s0" / "grpo" / "config.json").read_text())
    assert grpo["tasks"] == ["edit_distance", "coin_change"] and grpo["rewards"] == "auto"
    assert "| edit_distance | no |" in printed and "## The goals" in printed
    # The distillation's checkpoints are tried oldest first, up to the first that reaches the
    # task (or the final model); GRPO starts from the one chosen.
    start = results["s0/distill-start"]
    steps = [step for step, _ in start["reach"]]
    assert steps == sorted(set(steps)) and steps[-1] == start["step"] and steps[0] == 1
    reach = HARD_SCALES["cpu"].reach
    assert all(rate < reach for _, rate in start["reach"][:-1])
    assert start["reach"][-1][1] >= reach or start["step"] == 2
    distill = json.loads((out / "s0" / "distill" / "config.json").read_text())
    assert distill["model"] == str(out / start["model"]) and (out / start["model"] / "axiom_rl.json").exists()
    assert "## Where the distillation stopped" in printed


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["experiment", "self-play"], "Invalid value for 'NAME'"),
        (["experiment", "loop-validation", "--seeds", "0,x"], "seeds are integers"),
        (["experiment", "loop-validation", "--seeds", "1,1"], "distinct seeds"),
        (["experiment", "loop-validation", "--model", "Qwen/Qwen3-1.7B"], "--model is the gpu scale's"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path, capsys):
    assert main([*argv, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_a_results_file_that_is_not_one_is_refused_and_kept(tmp_path: Path, capsys):
    (tmp_path / "results.json").write_text("[1, 2")
    assert main(["experiment", "token-budget-sweep", "--smoke", "--out", str(tmp_path)]) == 2
    assert "is not a results file" in capsys.readouterr().err
    assert (tmp_path / "results.json").read_text() == "[1, 2"
    file = tmp_path / "file"
    file.write_text("x")
    assert main(["experiment", "loop-validation", "--out", str(file)]) == 2


def test_a_grpo_run_stopped_by_a_signal_is_an_interruption_not_a_result(tmp_path: Path):
    """Ctrl-C or SIGTERM makes the trainer finish its step and return; the recipe must not record
    that as the arm's result (its resume would then evaluate a final model that is not there)."""
    import os
    import signal

    from axiom_rl.recipes.common import grpo_model

    def interrupt(step: int, total: int, row: dict) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    settings = {"model": "tiny", "tiny_size": "micro", "tasks": ["countdown"], "steps": 3, "prompts_per_step": 2,
                "num_generations": 2, "max_completion_length": 8, "save_every": 0}  # fmt: skip
    with pytest.raises(KeyboardInterrupt, match="stopped at step 1"):
        grpo_model(tmp_path / "run", settings, progress=interrupt)
    assert not (tmp_path / "run" / "final_model").exists()


def test_distillation_checkpoints_are_listed_with_the_leading_zeros_in_one_item():
    from axiom_rl.recipes.hard_problems import _checked

    assert _checked([[2, 0.0], [4, 0.0], [6, 0.0125], [8, 0.1]]) == "0% at steps 2-4, step 6: 1%, step 8: 10%"
    assert _checked([[2, 0.0], [4, 0.05]]) == "step 2: 0%, step 4: 5%"
    assert _checked([[5, 0.2]]) == "step 5: 20%"
