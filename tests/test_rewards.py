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
