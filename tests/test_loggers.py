"""report_to: TensorBoard and W&B (offline) get every step's figures under sections, the run's
settings and its samples with prompts; a logger asked for and missing stops the run first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from axiom_rl.cli import main
from axiom_rl.errors import UserError
from axiom_rl.train.loggers import LOGGERS, parse_report_to, section

TINY = ["--model", "tiny", "--tiny-size", "nano", "--task", "countdown"]
GRPO = ["train", *TINY, "--steps", "3", "--prompts-per-step", "2", "--num-generations", "2",
        "--max-completion-length", "6", "--save-every", "0"]  # fmt: skip


def events(run: Path) -> tuple[dict[str, list[float]], dict[str, list[str]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    texts = {
        tag: [e.tensor_proto.string_val[0].decode() for e in acc.Tensors(tag)]
        for tag in acc.Tags()["tensors"]
    }
    return scalars, texts


def test_tensorboard_gets_the_steps_the_settings_and_the_samples(tmp_path, capsys):
    run = tmp_path / "grpo"
    assert main([*GRPO, "--report-to", "tensorboard", "--output-dir", str(run)]) == 0
    scalars, texts = events(run)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert scalars["train/reward_mean"] == pytest.approx([r["reward_mean"] for r in rows])
    assert {"reward/countdown", "time/rollout_s", "train/zero_std_frac"} <= set(scalars)
    assert any(tag.startswith("config") for tag in texts) and any(tag.startswith("samples") for tag in texts)
    config = next(v for tag, v in texts.items() if tag.startswith("config"))[0]
    assert "| max_completion_length | 6 |" in config
    samples = next(v for tag, v in texts.items() if tag.startswith("samples"))
    assert len(samples) == 3 and "countdown-" in samples[0]  # one table per step, with the problem

    sft = tmp_path / "sft"
    assert main(["sft", *TINY, "--steps", "4", "--batch-size", "2", "--warmup-steps", "1", "--report-to",
                 "tensorboard", "--output-dir", str(sft)]) == 0  # fmt: skip
    scalars, _ = events(sft)
    assert len(scalars["train/loss"]) == 4 and "train/lr" in scalars


def test_wandb_offline_gets_the_run_and_a_resume_continues_it(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "grpo"
    args = [*GRPO, "--report-to", "wandb", "--save-every", "1", "--output-dir", str(run)]
    assert main([*args]) == 0
    run_id = (run / "wandb-id.txt").read_text().strip()
    logs = list((run / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(logs) == 1
    data = logs[0].read_bytes()
    assert b"train/reward_mean" in data and b"max_completion_length" in data and b"samples" in data
    assert main([*[a if a != "3" else "4" for a in args], "--resume"]) == 0  # --steps 4
    assert (run / "wandb-id.txt").read_text().strip() == run_id
    assert len(list((run / "wandb").glob(f"offline-run-*-{run_id}"))) == 2  # the same run, continued


def test_a_logger_asked_for_and_missing_stops_the_run_before_it_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(LOGGERS, "nolog", "axiom_rl_no_such_logger")
    with pytest.raises(
        UserError, match=r"report_to nolog: axiom_rl_no_such_logger is not installed \(pip install"
    ):
        parse_report_to("tensorboard,nolog")
    assert main([*GRPO, "--report-to", "mlflow", "--output-dir", str(tmp_path / "r")]) == 2
    assert (
        "unknown report_to 'mlflow'; choose from: auto, none, tensorboard, wandb" in capsys.readouterr().err
    )
    assert not (tmp_path / "r").exists()
    assert parse_report_to("none") == [] and parse_report_to("auto") == ["tensorboard"]  # installed here
    assert [section(k) for k in ("loss", "time_update_s", "reward/format")] == ["train/loss", "time/update_s",
                                                                                "reward/format"]  # fmt: skip
