"""Speed settings: every speed-up a named setting of the run, saved in its config.json, and a run
with all of them on computing what plain PyTorch and transformers compute."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from pathlib import Path

import pytest

from axiom_rl.cli import main
from axiom_rl.config import TrainConfig
from axiom_rl.errors import UserError
from axiom_rl.speed import Speed, parse_speed_option
from axiom_rl.tasks import Task, register_task
from axiom_rl.tasks.registry import TASKS
from axiom_rl.train.grpo import train
from axiom_rl.types import PASSED, WRONG_ANSWER, Problem, Verdict

PACKAGE = Path(__file__).resolve().parents[1] / "axiom_rl"


class Lowercase(Task):
    """Reward varies even for random text: how many of its characters are lowercase letters."""

    name = "test_speed_lowercase"
    category = "test"
    description = "Write lowercase letters."

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        return Problem(id=f"s{rng.randint(0, 10**9)}", task=self.name, difficulty=difficulty, prompt=f"a{rng.randint(0, 10**9)}\n")  # fmt: skip

    def score(self, problem: Problem, completion: str, sandbox=None, limits=None) -> Verdict:
        n = min(8, sum(c.islower() for c in completion))
        return Verdict(PASSED if n == 8 else WRONG_ANSWER, n, 8)


@pytest.fixture(scope="module", autouse=True)
def task():
    register_task(Lowercase)
    yield
    TASKS.pop(Lowercase.name, None)


@pytest.mark.slow
def test_a_few_steps_give_the_same_numbers_plain_and_with_every_speed_up(tmp_path):
    """The same seed, four steps with gradient accumulation, both ways: the C++ decode step, its
    kernels, the replayed linear outputs, the shared prompt passes, length bucketing and the
    training passes' kernels against plain PyTorch and transformers. Tolerance: the same sampled
    tokens, and losses and gradient norms within 1e-4 relative (the kernels sum in other orders:
    float32 rounding, about 1e-7 here)."""
    runs = {}
    for name, speed in (("plain", {"preset": "plain"}), ("fast", {})):
        cfg = TrainConfig(
            model="tiny", tiny_size="nano", tasks=[Lowercase.name], steps=4, prompts_per_step=2, num_generations=4,
            max_completion_length=16, lr=1e-3, save_every=0, gradient_accumulation_steps=2, speed=speed,
            output_dir=str(tmp_path / name),
        )  # fmt: skip
        result = train(cfg, say=lambda m: None)
        samples = [
            json.loads(line)["completion"]
            for line in (tmp_path / name / "samples.jsonl").read_text().splitlines()
        ]
        runs[name] = (result.metrics, samples)
    (plain, plain_samples), (fast, fast_samples) = runs["plain"], runs["fast"]
    assert fast_samples == plain_samples
    assert any(r["grad_norm"] > 0 for r in plain)  # real updates were compared
    for a, b in zip(plain, fast, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-7)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
        assert b["reward_mean"] == a["reward_mean"]
    saved = {name: json.loads((tmp_path / name / "config.json").read_text())["speed"] for name in runs}
    assert saved["plain"] == Speed.plain().as_dict() and not any(saved["plain"].values())
    assert saved["fast"] == Speed.for_device("cpu").as_dict() and all(saved["fast"].values())


def test_settings_resolve_per_device_then_by_name_with_clear_errors():
    cpu, cuda = Speed.resolve({}, "cpu"), Speed.resolve(None, "cuda")
    assert cpu.attention_kernel and cpu.share_prompt_passes and cpu.keep_freed_memory
    assert not (cuda.attention_kernel or cuda.share_prompt_passes or cuda.keep_freed_memory)
    assert cuda.compile_decode and cuda.static_decode
    assert Speed.resolve({"preset": "plain", "attention_kernel": True}, "cpu") == dataclasses.replace(
        Speed.plain(), attention_kernel=True
    )
    assert Speed.resolve({"share_prompt_passes": True}, "cuda").share_prompt_passes
    # What train() saves resolves to itself on any device.
    assert Speed.resolve(cpu.as_dict(), "cuda") == cpu
    for spec, message in (
        ({"preset": "fast"}, "speed preset must be 'auto' or 'plain', got 'fast'"),
        (
            {"attention": False},
            "unknown speed setting 'attention'; the settings are: preset, attention_kernel",
        ),
        ({"lean_mlp": "no"}, "speed setting lean_mlp must be true or false, got 'no'"),
    ):
        with pytest.raises(UserError, match=re.escape(message)):
            Speed.resolve(spec, "cpu")


def test_the_command_line_takes_a_preset_and_settings(tmp_path, capsys):
    assert parse_speed_option("plain") == {"preset": "plain"}
    assert parse_speed_option("auto,attention_kernel=off, lean_mlp=on") == {
        "preset": "auto", "attention_kernel": False, "lean_mlp": True,
    }  # fmt: skip
    with pytest.raises(UserError, match="--speed lean_mlp=maybe: give on or off"):
        parse_speed_option("lean_mlp=maybe")
    run = tmp_path / "run"
    args = ["train", "--model", "tiny", "--tiny-size", "nano", "--task", Lowercase.name, "--steps", "1",
            "--prompts-per-step", "1", "--num-generations", "2", "--max-completion-length", "4"]  # fmt: skip
    assert main([*args, "--speed", "plain,bucket_lengths=on", "--output-dir", str(run)]) == 0
    saved = json.loads((run / "config.json").read_text())["speed"]
    assert saved == dataclasses.replace(Speed.plain(), bucket_lengths=True).as_dict()
    capsys.readouterr()
    assert main([*args, "--speed", "turbo", "--output-dir", str(tmp_path / "refused")]) == 2
    assert "speed preset must be 'auto' or 'plain', got 'turbo'" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()


def test_no_module_level_switch_changes_numerics():
    """The check the issue states: no `global` statement and no boolean module constant in the
    package outside the sandbox (whose two are a pool singleton and a count's cache)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if "sandbox" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*global ", line) or re.match(r"[A-Z_]+(: [\w |]+)? = (True|False|None)\b", line):
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert not found, found


def test_the_speed_machinery_sits_apart_and_imports_no_rollout_backend():
    """axiom_rl/speed holds the kernels, replay, matmul routing, memory settings and the C++ step;
    of the rollout it reads only the plain token step (rollout/step.py), which imports nothing of
    axiom-rl: the rollout backend imports the speed package, never the other way round."""
    imports = re.compile(r"^\s*from (\.\.?[\w.]*|axiom_rl[\w.]*) import ([\w, ]+)", re.M)
    for path in (PACKAGE / "speed").glob("*.py"):
        for source, names in imports.findall(path.read_text()):
            if "rollout" in source:
                assert source.endswith("rollout.step") or names.strip() == "step", (path.name, source, names)
    step = (PACKAGE / "rollout" / "step.py").read_text()
    assert not re.search(r"^\s*from \.", step, re.M) and "axiom_rl" not in step
    models = {p.name for p in (PACKAGE / "models").glob("*.py")}
    assert models == {"__init__.py", "card.py", "load.py", "tiny.py"}
