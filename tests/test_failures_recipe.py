"""The failures recipe of docs/training.md, run as written there, with fewer steps and problems:
SFT, eval into a database, failures collect and profile, GRPO on the failures source, eval and
compare. A docs change that breaks a command, or a command that stops accepting what the docs
say, fails here."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from axiom_rl.cli import main

DOCS = Path(__file__).resolve().parents[1] / "docs" / "training.md"
# The recipe's sizes, cut to what a test can afford: (flag, as written, here).
SMALLER = {("--steps", "700"): "20", ("--warmup-steps", "50"): "2", ("--count", "400"): "6",
           ("--steps", "580"): "3", ("--count", "200"): "4"}  # fmt: skip


def recipe_commands() -> list[list[str]]:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("### The failures recipe", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]
    lines = [line for line in block.replace("\\\n", " ").splitlines() if line and not line.startswith("#")]
    commands = []
    for line in lines:
        words = shlex.split(line)
        assert words[0] == "axiom-rl", line
        for i in range(1, len(words) - 1):
            words[i + 1] = SMALLER.get((words[i], words[i + 1]), words[i + 1])
        commands.append(words[1:])
    return commands


@pytest.mark.slow
def test_the_failures_recipe_runs_as_documented(tmp_path, monkeypatch, capsys):
    commands = recipe_commands()
    assert [c[0] for c in commands] == [
        "sft",
        "eval",
        "failures",
        "failures",
        "train",
        "eval",
        "eval",
        "eval",
    ]
    monkeypatch.chdir(tmp_path)
    outputs = []
    for command in commands:
        code = main(command)
        out, err = capsys.readouterr()
        assert code == 0, (command, err[-2000:])
        outputs.append(out)
    recipe = tmp_path / "runs" / "recipe"
    failed = [json.loads(line) for line in (recipe / "failures.jsonl").read_text().splitlines()]
    assert failed and all(
        f["failures"]["run"] == "sft-train" and f["failures"]["pass_rate"] == 0.0 for f in failed
    )
    assert "countdown" in outputs[3] and (recipe / "profile-sft-train.png").stat().st_size > 1000
    assert json.loads((recipe / "profile-sft-train.json").read_text())
    rows = [json.loads(line) for line in (recipe / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all("zero_std_frac" in r for r in rows)
    assert any("source/replay_pass_rate" in r for r in rows)
    config = json.loads((recipe / "grpo" / "config.json").read_text())
    assert config["source"] == {"name": "failures", "file": "runs/recipe/failures.jsonl", "fresh": 0.25}
    compare = outputs[-1]
    assert all(re.search(rf"countdown\s.*\b{d}\b", compare) for d in (1, 2, 3, 4)), compare
