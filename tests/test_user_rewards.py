"""A user's own reward function: from a file or module named on the command line or in YAML, or
registered in Python; used in training, and refused with one line when it cannot be used.

These tests train (tiny model), so they need torch; tests/test_rewards.py stays torch-free (it runs
on every Python version pyproject.toml admits, see .ci/other-pythons)."""

from __future__ import annotations

import json
import re

import pytest

from axiom_rl.errors import UserError
from axiom_rl.rewards import REWARDS, parse_reward_specs

USER_REWARD = '''
def brevity(problem, completion, verdict):
    """1 for an answer in tags, more for a shorter completion; the user's own rule."""
    return ("<answer>" in completion) + 1.0 / (1 + len(completion))
'''


@pytest.fixture
def user_rewards(tmp_path, monkeypatch):
    """A user's reward file in a working directory of its own; REWARDS as it was afterwards."""
    (tmp_path / "my_rewards.py").write_text(USER_REWARD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = dict(REWARDS)
    yield tmp_path
    REWARDS.clear()
    REWARDS.update(before)


def _metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


TINY_RUN = ["train", "--model", "tiny", "--tiny-size", "nano", "--task", "countdown", "--steps", "3",
            "--prompts-per-step", "2", "--num-generations", "2", "--max-completion-length", "8", "--save-every", "0"]  # fmt: skip


@pytest.mark.parametrize("reference", ["my_rewards:brevity", "my_rewards.py:brevity"])
def test_a_reward_from_the_users_file_trains_from_the_command_line(user_rewards, capsys, reference):
    from axiom_rl.cli import main

    run = user_rewards / "run"
    assert main([*TINY_RUN, "--rewards", f"{reference}:1.0,format:0.5", "--output-dir", str(run)]) == 0
    rows = _metrics(run)
    assert len(rows) == 3
    for row in rows:  # the user's rule, applied and logged beside the built-in component
        assert 0.0 < row[f"reward/{reference}"] <= 2.0
        assert row["reward_mean"] == pytest.approx(
            row[f"reward/{reference}"] + 0.5 * row["reward/format"], abs=1e-5
        )


def test_a_reward_registered_in_python_trains_from_python(user_rewards):
    from axiom_rl import TrainConfig, register_reward, train_grpo

    seen = []

    @register_reward("counting_brevity")
    def counting_brevity(problem, completion, verdict):
        seen.append(problem.task)
        return 1.0 / (1 + len(completion))

    result = train_grpo(TrainConfig(model="tiny", tiny_size="nano", tasks=["countdown"], steps=3, prompts_per_step=2,
                               num_generations=2, max_completion_length=8, save_every=0, rewards="counting_brevity",
                               output_dir=str(user_rewards / "py")), say=lambda _: None)  # fmt: skip
    assert result.steps == 3 and seen == ["countdown"] * (3 * 2 * 2)  # every completion of every step
    assert all(0.0 < row["reward/counting_brevity"] <= 1.0 for row in _metrics(user_rewards / "py"))


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("missing.py:brevity", "reward 'missing.py:brevity': no such file missing.py"),
        ("my_rewards:nope", "reward 'my_rewards:nope': my_rewards has no function 'nope'"),
        ("no_such_module:fn", "importing no_such_module failed: ModuleNotFoundError"),
        ("broken:fn", "importing broken failed: ZeroDivisionError: division by zero"),
        ("wrong_args:fn", "fn must take (problem, completion, verdict)"),
        ("my_rewards:brevity:x", "reward weight must be a finite number, got 'x'"),
    ],
)
def test_a_users_reward_that_cannot_be_used_is_one_line(user_rewards, reference, message):
    (user_rewards / "broken.py").write_text("x = 1 / 0\n")
    (user_rewards / "wrong_args.py").write_text("def fn(completion):\n    return 0.0\n")
    with pytest.raises(UserError, match=re.escape(message)):
        parse_reward_specs(reference)


def test_a_users_reward_that_fails_mid_run_stops_it_with_one_line(user_rewards, capsys):
    from axiom_rl.cli import main

    (user_rewards / "flaky.py").write_text(
        "def fn(problem, completion, verdict):\n    return {}[completion]\n"
    )
    assert main([*TINY_RUN, "--rewards", "flaky:fn", "--output-dir", str(user_rewards / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "reward 'flaky:fn' failed on problem countdown" in err[0] and "KeyError" in err[0]
    )
