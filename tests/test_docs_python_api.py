"""docs/python-api.md, run as written there with fewer steps and problems: the Python block (SFT,
a reward registered in Python, GRPO with it, evaluation) and the command-line block (the same
reward from a file of the user's). A docs change that breaks either fails here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"
# The document's sizes, cut to what a test can afford: (as written, here).
PYTHON_SMALLER = [("steps=300", "steps=4"), ("warmup_steps=50", "warmup_steps=1"), ("batch_size=64", "batch_size=4"),
                  ("steps=100", "steps=2"), ("prompts_per_step=16", "prompts_per_step=2"), ("count=100", "count=2")]  # fmt: skip
BASH_SMALLER = [("--steps 100", "--steps 2"), ("--prompts-per-step 16", "--prompts-per-step 2")]


def block(language: str, after: str, smaller: list[tuple[str, str]]) -> str:
    section = DOCS.read_text(encoding="utf-8").split(after, 1)[1]
    text = re.search(rf"```{language}\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]
    for written, here in smaller:
        assert written in text, written  # the document still says what is cut
        text = text.replace(written, here)
    return text


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = str(Path(sys.executable).parent)  # axiom-rl beside this Python, as the docs assume
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_python_api_document_runs_as_written(tmp_path):
    script = block("python", "## A first run from Python", PYTHON_SMALLER)
    proc = run([sys.executable, "-c", script], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^2 steps; mean reward of the last: \d\.\d\d$", proc.stdout, re.M), proc.stdout[-2000:]
    assert re.search(r"^api-before d1 \d+%$", proc.stdout, re.M) and re.search(
        r"^api-after d1 \d+%$", proc.stdout, re.M
    )
    rows = [json.loads(line) for line in (tmp_path / "runs/api-grpo/metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all("reward/right_and_short" in r for r in rows)  # the registered reward ran

    # the command-line block, from the same directory: the SFT'd base is there
    commands = block("bash", "## The same reward from the command line", BASH_SMALLER)
    proc = run(["bash", "-e", "-c", commands], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "my_rewards.py").exists()
    rows = [json.loads(line) for line in (tmp_path / "runs/cli-grpo/metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all("reward/my_rewards:right_and_short" in r for r in rows)
