"""Agreement with TRL's own GRPO loss on identical random inputs, for every loss type TRL also has.

TRL computes the loss inside GRPOTrainer._compute_loss, from log-probs its model produces. We
build a real GRPOTrainer on a tiny model and replace only that forward pass
(_get_per_token_logps_and_entropies) with the test's log-probs, so everything after it -- ratio,
clipping, KL, aggregation -- is TRL's code. Value and gradient must agree within 1e-6.
"""

from __future__ import annotations

import pytest
import torch
import trl  # a test dependency (pip install -e '.[test]'): this test must not skip in CI
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import nanstd

from axiom_rl.algorithms import compute_advantages, policy_loss
from axiom_rl.models.tiny import build_tiny_model

N, T = 8, 7  # 2 prompts x 4 generations, 7 completion tokens
CASES = [
    # (TRL loss_type, importance_sampling_level, our loss, beta, epsilon_high, KL bias correction)
    ("grpo", "token", "grpo", 0.04, 0.2, False),
    ("grpo", "token", "grpo", 0.04, 0.2, True),
    ("grpo", "token", "grpo", 0.0, 0.28, False),
    ("dr_grpo", "token", "dr_grpo", 0.04, 0.28, False),
    ("dr_grpo", "token", "dr_grpo", 0.04, 0.28, True),
    ("dapo", "token", "dapo", 0.04, 0.28, False),
    ("dapo", "token", "dapo", 0.0, 0.2, False),
    ("bnpo", "token", "bnpo", 0.04, 0.28, True),
    ("grpo", "sequence", "gspo", 0.04, 0.2, False),
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """TRL loads its reference model from the model's path: a local model directory."""
    path = tmp_path_factory.mktemp("tiny")
    model, tokenizer = build_tiny_model("nano")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_trainer(model_dir, tmp_path, loss_type, level, beta, eps_high, bias_correction) -> GRPOTrainer:
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=T,
        loss_type=loss_type,
        importance_sampling_level=level,
        beta=beta,
        epsilon=0.2,
        epsilon_high=eps_high,
        use_bias_correction_kl=bias_correction,
        report_to=[],
        use_cpu=True,
        logging_steps=1,
    )
    data = Dataset.from_dict({"prompt": ["1 2 -> 3\n"] * 8})
    return GRPOTrainer(
        model=str(model_dir),
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=data,
    )


def random_inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    logprobs = (torch.randn(N, T, generator=g, dtype=torch.float64) * 0.5 - 2).requires_grad_(True)
    old = (logprobs + torch.randn(N, T, generator=g, dtype=torch.float64) * 0.3).detach()
    ref = (logprobs + torch.randn(N, T, generator=g, dtype=torch.float64) * 0.3).detach()
    adv = torch.randn(N, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (N,), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long()
    return logprobs, old, ref, adv, mask


@pytest.mark.parametrize("trl_type, level, ours, beta, eps_high, bias_correction", CASES)
def test_loss_value_and_gradient_agree_with_trl(
    model_dir, tmp_path, trl_type, level, ours, beta, eps_high, bias_correction
):
    trainer = make_trainer(model_dir, tmp_path, trl_type, level, beta, eps_high, bias_correction)
    trainer.model.eval()  # evaluation mode: no gradient-accumulation rescaling inside TRL
    for seed in range(3):
        logprobs, old, ref, adv, mask = random_inputs(seed)
        trainer._get_per_token_logps_and_entropies = lambda *a, _lp=logprobs, **k: (
            _lp,
            torch.zeros_like(_lp),
            None,
        )
        inputs = {
            "prompt_ids": torch.zeros(N, 1, dtype=torch.long),
            "prompt_mask": torch.ones(N, 1, dtype=torch.long),
            "completion_ids": torch.zeros(N, T, dtype=torch.long),
            "completion_mask": mask,
            "advantages": adv,
            "old_per_token_logps": old,
            "ref_per_token_logps": ref,
            "num_items_in_batch": mask.sum(),
        }
        trl_loss = trainer._compute_loss(trainer.model, inputs)
        (trl_grad,) = torch.autograd.grad(trl_loss, logprobs)
        our_loss, _ = policy_loss(
            logprobs, old, ref if beta else None, adv, mask, loss_type=ours, clip_eps=0.2, clip_eps_high=eps_high,
            beta=beta, max_completion_length=T, num_items=mask.sum(), kl_bias_correction=bias_correction,
        )  # fmt: skip
        (our_grad,) = torch.autograd.grad(our_loss, logprobs)
        assert our_loss.item() == pytest.approx(trl_loss.item(), abs=1e-6)
        assert torch.allclose(our_grad, trl_grad, atol=1e-6)


@pytest.mark.parametrize("scale", ["group", "batch"])
def test_advantages_agree_with_trls_formula(scale):
    # TRL's _generate_and_score_completions: (r - group mean) / (nanstd(group or batch) + 1e-4)
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(6 * 4, generator=g, dtype=torch.float64).round(decimals=1)
    groups = rewards.view(-1, 4)
    mean = groups.mean(1).repeat_interleave(4)
    std = (
        nanstd(groups, dim=1).repeat_interleave(4) if scale == "group" else nanstd(rewards).expand_as(rewards)
    )
    trl_adv = (rewards - mean) / (std + 1e-4)
    ours = compute_advantages(rewards, 4, "grpo" if scale == "group" else "batch_norm")
    assert torch.allclose(ours, trl_adv, atol=1e-12)


def test_the_trl_under_test_is_the_pinned_one():
    assert trl.__version__ == "1.13.0"
