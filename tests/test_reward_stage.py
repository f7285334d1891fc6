"""The reward stage: components scoring a whole batch, outcome rewards as rewards.py gives them,
and step rewards that reach the loss as per-token advantages in a real CPU run."""

from __future__ import annotations

import random

import pytest
import torch

from axiom_rl.algorithms import LOSSES, compute_advantages, step_advantages
from axiom_rl.algorithms.losses import clipped_surrogate_loss
from axiom_rl.config import TrainConfig
from axiom_rl.errors import UserError
from axiom_rl.models.tiny import build_char_tokenizer
from axiom_rl.reward_stage import (
    COMPONENTS,
    ComponentScores,
    RewardComponent,
    RewardStage,
    StepRewards,
    register_component,
)
from axiom_rl.rewards import compute_reward, parse_reward_specs
from axiom_rl.tasks import Task, generate_problems, register_task
from axiom_rl.tasks.registry import TASKS
from axiom_rl.train import grpo as grpo_module
from axiom_rl.train.grpo import token_ends, train
from axiom_rl.types import PASSED, RUNTIME_ERROR, WRONG_ANSWER, Problem, Verdict


class Vowels(Task):
    """Reward varies for random text: how many of the first 8 characters are vowels."""

    name = "test_vowels"
    category = "test"
    description = "Write vowels."

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        return Problem(
            id=f"v-{rng.randint(0, 10**9)}", task=self.name, difficulty=difficulty, prompt="aeiou\n"
        )

    def score(self, problem: Problem, completion: str, sandbox=None, limits=None) -> Verdict:
        n = min(8, sum(c in "aeiou" for c in completion))
        return Verdict(PASSED if n == 8 else WRONG_ANSWER, n, 8)


class VowelSteps(RewardComponent):
    """A step is 4 characters; it earns 1 if it holds a vowel. The row's value: the mean."""

    name = "test_vowel_steps"
    calls = 0

    def score(self, problems, completions, verdicts) -> ComponentScores:
        VowelSteps.calls += 1
        rows, steps = [], []
        for text in completions:
            ends = tuple(range(4, len(text) + 1, 4))
            values = tuple(float(any(c in "aeiou" for c in text[e - 4 : e])) for e in ends)
            rows.append(sum(values) / len(values) if values else 0.0)
            steps.append(StepRewards(ends, values) if ends else None)
        return ComponentScores(rows, steps)


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_task(Vowels)
    register_component("test_vowel_steps")(VowelSteps)
    yield
    TASKS.pop("test_vowels", None)
    COMPONENTS.pop("test_vowel_steps", None)


def test_outcome_rewards_are_rewards_py_s_bit_for_bit():
    problems = generate_problems("countdown", 1, 3) + generate_problems("lcs", 1, 2)
    completions = [
        "<answer>1+2</answer>",
        "<think>x</think>",
        "",
        "```python\ndef lcs(a, b):\n  return 0\n```",
        "no",
    ]
    verdicts = [Verdict(WRONG_ANSWER, 0, 1), Verdict(WRONG_ANSWER, 0, 1), Verdict(RUNTIME_ERROR, 0, 1),
                Verdict(WRONG_ANSWER, 3, 8), Verdict(PASSED, 8, 8)]  # fmt: skip
    for text in (None, "code_execution:0.7,format:0.3,binary:2"):
        specs = parse_reward_specs(text)
        if text is None:
            specs = None
        else:
            problems_, completions_, verdicts_ = problems[3:], completions[3:], verdicts[3:]
        rows = (problems, completions, verdicts) if text is None else (problems_, completions_, verdicts_)
        result = RewardStage.from_specs(specs).score(*rows)
        expected = [compute_reward(p, c, v, specs) for p, c, v in zip(*rows)]
        assert result.rewards == [r for r, _ in expected]  # exactly: the same sums in the same order
        assert result.components == [c for _, c in expected]
        assert not result.has_steps


def test_a_component_scores_the_batch_once_and_its_steps_are_weighted_and_merged():
    class Halves(RewardComponent):
        name = "halves"

        def score(self, problems, completions, verdicts):
            return ComponentScores([1.0] * len(completions), [StepRewards((2, 4), (1.0, -1.0)), None])

    stage = RewardStage([(VowelSteps(), 2.0), (Halves(), 0.5)])
    VowelSteps.calls = 0
    p = Problem(id="p", task="test_vowels", difficulty=1, prompt="")
    result = stage.score([p, p], ["aXXXXbXX", "XXXX"], [Verdict(WRONG_ANSWER, 1, 8)] * 2)
    assert VowelSteps.calls == 1
    # Row 0: vowel steps at 4 (1.0) and 8 (0.0), weight 2; halves' at 2 (0.5) and 4 (-0.5).
    assert result.steps[0] == StepRewards((2, 4, 8), (0.5, 2.0 - 0.5, 0.0))
    assert result.steps[1] == StepRewards((4,), (0.0,))
    assert result.rewards == [2.0 * 0.5 + 0.5, 0.0 + 0.5]
    assert result.components[0] == {"test_vowel_steps": 0.5, "halves": 1.0}
    with pytest.raises(ValueError, match="increasing"):
        StepRewards((4, 2), (1.0, 1.0))
    with pytest.raises(UserError, match="unknown reward 'nope'"):
        parse_reward_specs("nope:1")
    assert parse_reward_specs("test_vowel_steps:1,format:0.1")[0].name == "test_vowel_steps"


def test_token_ends_map_text_offsets_to_token_counts():
    tok = build_char_tokenizer()
    ids = tok.encode("ab\u00e9cd", add_special_tokens=False)  # the é is two bytes, two tokens
    assert len(ids) == 6
    # Offsets 2 ("ab"), 3 ("abé": up to its second byte's token), 5 (all)
    assert token_ends(tok, ids, [2, 3, 5]) == [2, 4, 6]
    assert token_ends(tok, ids, [99]) == [6]


def test_step_rewards_reach_the_loss_as_per_token_advantages(tmp_path, monkeypatch):
    """A real 3-step CPU run whose reward component gives step credit: the loss gets advantages
    [n, T], each token's the outcome advantage of its row plus the process term of its step and
    the steps after (algorithms.step_advantages). The outcome-only run's are [n]."""
    seen = []

    def recording(logprobs, old_logprobs, ref_logprobs, advantages, mask, **params):
        seen.append((advantages.detach().clone(), mask.detach().clone()))
        return clipped_surrogate_loss(logprobs, old_logprobs, ref_logprobs, advantages, mask, **params)

    monkeypatch.setitem(LOSSES, "recording", recording)
    scored_batches = []  # what the stage scored: the rollout's tokens, the step rewards, the rewards
    tok = build_char_tokenizer()
    real = grpo_module.with_step_credit

    def watched(outcome, scored, tokenizer, g, batch, groups):
        scored_batches.append(
            ([list(r) for r in scored.rollout.completion_ids], list(scored.steps), list(scored.rewards))
        )
        return real(outcome, scored, tokenizer, g, batch, groups)

    monkeypatch.setattr(grpo_module, "with_step_credit", watched)
    options = dict(
        model="tiny", tiny_size="nano", tasks=["test_vowels"], steps=3, prompts_per_step=2,
        num_generations=4, max_completion_length=12, lr=1e-3, save_every=0, loss_type="recording",
    )  # fmt: skip
    result = train(TrainConfig(**options, rewards="test_vowel_steps:1.0", output_dir=str(tmp_path / "steps")))
    trained = [(a, m) for a, m in seen if a.shape[0] == 8]  # the steps' (not the plan's check)
    assert len(trained) == 3 and all(a.dim() == 2 and a.shape == m.shape for a, m in trained)
    varies = [bool((a.max(1).values - a.min(1).values).gt(1e-6).any()) for a, _ in trained]
    assert any(varies)  # tokens of one completion get different advantages
    assert all("reward/test_vowel_steps" in row for row in result.metrics)
    # Each step's advantages, recomputed from what the stage scored (the rollout's own tokens).
    for (ids, steps, rewards), (advantages, mask) in zip(scored_batches, trained, strict=True):
        ends = [token_ends(tok, row, st.ends) if st else [] for row, st in zip(ids, steps)]
        values = [list(st.values) if st else [] for st in steps]
        outcome = compute_advantages(torch.tensor(rewards), 4, "grpo")
        expected = outcome.unsqueeze(1) + step_advantages(ends, values, 4, advantages.shape[1])
        assert torch.allclose(advantages * mask, expected.to(advantages.dtype) * mask, atol=1e-5)
    seen.clear()
    train(TrainConfig(**options, output_dir=str(tmp_path / "outcome")))
    assert all(a.dim() == 1 for a, _ in seen)


def test_the_documented_component_scores_true_equations_as_steps(tmp_path):
    """The example of docs/training.md, "Writing a reward component", run as written there: its
    steps and values on hand-checked text, linear on hostile text, and in a 2-step CPU run."""
    import re
    import time
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs" / "training.md"
    section = docs.read_text().split("### Writing a reward component", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    namespace: dict = {}
    exec(compile(code, str(docs), "exec"), namespace)
    try:
        component = namespace["TrueEquations"]()
        text = "<think>3 + 4 = 7, 7 * 2 = 15\n</think><answer>(3 + 4) * 2</answer>"
        scores = component.score([None, None], [text, "no steps"], [None, None])
        assert scores.rows == [0.5, 0.0]
        assert scores.steps[0] == StepRewards((text.index(","), text.index("\n")), (1.0, 0.0))
        assert scores.steps[1] is None
        start = time.perf_counter()
        component.score([None], ["1" * 200_000 + " + "], [None])
        assert time.perf_counter() - start < 2.0  # no rescans of a long run of digits
        result = train(TrainConfig(
            model="tiny", tiny_size="nano", tasks=["countdown"], steps=2, prompts_per_step=2,
            num_generations=4, max_completion_length=16, save_every=0,
            rewards="countdown:1.0,true_equations:0.5", output_dir=str(tmp_path / "run"),
        ))  # fmt: skip
        assert all("reward/true_equations" in row for row in result.metrics)
    finally:
        COMPONENTS.pop("true_equations", None)
