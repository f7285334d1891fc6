"""Rewards: the seeds' constants, every component reported, composite weights."""

from __future__ import annotations

import re

import pytest

from axiom_rl.errors import UserError
from axiom_rl.rewards import REWARDS, RewardSpec, compute_reward, parse_reward_specs
from axiom_rl.tasks import generate_problems
from axiom_rl.types import PASSED, WRONG_ANSWER, Verdict

CODE = generate_problems("edit_distance", 3, 1)[0]
CD = generate_problems("countdown", 1, 1, seed=3)[0]
NUMS, TARGET = CD.metadata["numbers"], CD.metadata["target"]


def test_code_execution_follows_the_seeds_rule():
    fn = REWARDS["code_execution"]
    assert fn(CODE, "", Verdict(PASSED, 8, 8)) == 1.0
    assert fn(CODE, "", Verdict(WRONG_ANSWER, 6, 8)) == pytest.approx(0.5 * 6 / 8)
    assert fn(CODE, "", Verdict(WRONG_ANSWER, 0, 8)) == 0.0
    # both constants configurable
    assert fn(CODE, "", Verdict(PASSED, 8, 8), full=2.0) == 2.0
    assert fn(CODE, "", Verdict(WRONG_ANSWER, 4, 8), partial_scale=0.2) == pytest.approx(0.1)
    assert REWARDS["binary"](CODE, "", Verdict(WRONG_ANSWER, 7, 8)) == 0.0


def test_countdown_rewards():
    right = f"<answer>{CD.reference_solution}</answer>"
    v = Verdict(PASSED, 1, 1)
    assert REWARDS["countdown"](CD, right, v) == 1.0
    assert REWARDS["countdown"](CD, "<answer>1 + 1</answer>", v) == 0.1  # format only
    assert REWARDS["countdown"](CD, "no answer", v) == 0.0


def test_countdown_graduated_ladder():
    g = REWARDS["countdown_graduated"]
    v = Verdict(WRONG_ANSWER, 0, 1)
    a, b, c = NUMS
    assert g(CD, f"<answer>{CD.reference_solution}</answer>", v) == 1.0
    wrong_value = next(
        e for e in (f"{a} + {b} + {c}", f"{a} * {b} * {c}", f"{a} - {b} - {c}") if eval(e) != TARGET
    )
    assert g(CD, f"<answer>{wrong_value}</answer>", v) == 0.7
    assert g(CD, f"<answer>{a} + {b}</answer>", v) == 0.5  # some of the numbers, once each
    assert g(CD, f"<answer>{TARGET}</answer>", v) in (0.3, 0.5)  # echoing the target earns little
    assert g(CD, "<answer>999 + 998</answer>", v) == 0.3
    assert g(CD, "<answer>hello</answer>", v) == 0.1
    assert g(CD, "nothing", v) == 0.0


def test_format_reward():
    fmt = REWARDS["format"]
    v = Verdict(WRONG_ANSWER, 0, 1)
    assert fmt(CODE, "```python\ndef edit_distance(a, b):\n    return 0\n```", v) == 1.0
    assert fmt(CODE, "def edit_distance(a, b):\n    return 0\n", v) == 0.0
    assert fmt(CD, "<answer>1</answer>", v) == 1.0 and fmt(CD, "1", v) == 0.0
    # A definition inside a string literal, or in a block that does not parse, defines nothing.
    in_a_string = '```python\nnote = """\ndef edit_distance(a, b):\n"""\n```'
    assert fmt(CODE, in_a_string, v) == 0.0
    assert fmt(CODE, "```python\ndef edit_distance(a, b)\n    return 0\n```", v) == 0.0
    nested = "```python\nclass S:\n    def edit_distance(self, a, b):\n        return 0\n```"
    assert fmt(CODE, nested, v) == 1.0


def test_length_penalty_is_the_seeds_brevity_factor():
    v = Verdict(PASSED, 8, 8)
    lp = REWARDS["length_penalty"]
    assert lp(CODE, "x" * 100, v) == pytest.approx(1.0)  # short: no penalty
    assert lp(CODE, "x" * 400, v) == pytest.approx(0.8 + 0.2 * 0.5)
    assert lp(CODE, "x" * 10_000, v) == pytest.approx(0.8 + 0.2 * 0.02)
    with pytest.raises(UserError):
        lp(CODE, "x", v, base="length_penalty")


def test_composite_reports_every_component():
    specs = [RewardSpec("code_execution", 1.0), RewardSpec("format", 0.25)]
    completion = "```python\ndef edit_distance(a, b):\n    return 0\n```"
    total, parts = compute_reward(CODE, completion, Verdict(WRONG_ANSWER, 2, 8), specs)
    assert parts == {"code_execution": pytest.approx(0.125), "format": 1.0}
    assert total == pytest.approx(0.125 + 0.25)
    # default: each task's own reward
    assert compute_reward(CD, "none", Verdict(WRONG_ANSWER, 0, 1))[1] == {"countdown": 0.0}


def test_parse_reward_specs():
    assert parse_reward_specs("auto") is None
    assert parse_reward_specs("binary:2,format") == [RewardSpec("binary", 2.0), RewardSpec("format", 1.0)]
    with pytest.raises(UserError, match="choose from"):
        parse_reward_specs("nope")
    with pytest.raises(UserError, match="number"):
        parse_reward_specs("binary:x")
    # A reward that could only be NaN, or 0 everywhere, would teach nothing: refused up front.
    assert parse_reward_specs("binary:1,length_penalty:-0.5")[1].weight == -0.5  # a penalty is fine
    for bad, message in [
        ("binary:nan", "finite number, got 'nan'"),
        ("binary:inf", "finite number, got 'inf'"),
        ("format:0", "every reward weight in 'format:0' is 0"),
        ("binary:0,format:0.0", "is 0"),
        ("binary,binary:2", "'binary' is given twice"),
    ]:
        with pytest.raises(UserError, match=re.escape(message)):
            parse_reward_specs(bad)


# ------------------------------------------------------------------------ a user's own reward

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
    import json

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
