"""Every GRPO and SFT run, from the command line or from Python, ends with report.md and
training.png in its directory; samples.jsonl carries each group's prompt and reference."""

from __future__ import annotations

import json
import re
from pathlib import Path

from axiom_rl.cli import main


def test_a_grpo_run_from_python_writes_its_report(tmp_path):
    from axiom_rl import TrainConfig, train_grpo

    run = tmp_path / "run"
    train_grpo(TrainConfig(model="tiny", tiny_size="nano", tasks=["countdown"], steps=12, prompts_per_step=2,
                           num_generations=2, max_completion_length=6, save_every=0, output_dir=str(run)),
               say=lambda _: None)  # fmt: skip
    report = (run / "report.md").read_text()
    assert report.startswith("# GRPO run: run\n\n12 steps.")
    assert "- model: tiny; tasks ['countdown'], difficulty 1" in report
    assert "| | steps 1-1 | steps 12-12 |" in report  # a tenth of 12 steps: one each
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    shown = re.search(r"\| accuracy \(share of completions passed\) \| (\S+) \| (\S+) \|", report)
    assert shown and float(shown.group(2)) == float(f"{metrics[-1]['accuracy']:.4g}")
    assert "![every step, with a moving average](training.png)" in report
    assert (run / "training.png").stat().st_size > 10_000
    assert "`final_model/`: the trained model" in report
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    firsts = [r for r in rows if "prompt" in r]
    assert len(firsts) == 12 * 2 and all(
        r["prompt"] and r["reference"] for r in firsts
    )  # a group's first row
    assert len(rows) == 12 * 2 * 2


def test_an_sft_run_from_the_command_line_writes_its_report(tmp_path, capsys):
    run = tmp_path / "sft"
    code = main(["sft", "--model", "tiny", "--tiny-size", "nano", "--task", "countdown", "--steps", "5",
                 "--batch-size", "4", "--warmup-steps", "1", "--output-dir", str(run)])  # fmt: skip
    assert code == 0
    assert f"report: {run / 'report.md'}" in capsys.readouterr().err
    report = (run / "report.md").read_text()
    assert (
        report.startswith("# SFT run: sft\n\n5 steps.")
        and "| loss |" in report
        and "| learning rate |" in report
    )
    assert (run / "training.png").exists()


def test_verbose_shows_the_problem_and_its_reference(tmp_path, capsys):
    code = main(["train", "--model", "tiny", "--tiny-size", "nano", "--task", "countdown", "--steps", "1",
                 "--prompts-per-step", "1", "--num-generations", "2", "--max-completion-length", "4",
                 "--verbose", "--output-dir", str(tmp_path / "v")])  # fmt: skip
    assert code == 0
    err = capsys.readouterr().err
    assert re.search(r"\[step 1\] countdown-\S+ prompt: '", err) and "[step 1] reference: '" in err
    assert len(re.findall(r"\[step 1\]   reward=", err)) == 2
    assert Path(tmp_path / "v" / "report.md").exists()
