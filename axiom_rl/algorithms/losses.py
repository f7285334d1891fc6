"""Policy losses: f(logprobs, old_logprobs, ref_logprobs, advantages, mask, **params) -> (loss, metrics).

Shapes: logprobs, old_logprobs, ref_logprobs, mask: [B*G, T] (log-probs of the sampled
completion tokens; mask 1 on completion tokens); advantages: [B*G] (one per completion, the same
for all its tokens) or [B*G, T] (one per token: process supervision, where a token's advantage
comes from the steps it belongs to; DeepSeekMath's process-supervised GRPO). A [B*G] advantage is
exactly the [B*G, T] one repeated along T. `ref_logprobs` may be None when beta == 0. Losses
never see a model, so every variant is testable on plain tensors.

All variants share the clipped surrogate of PPO (Schulman et al. 2017) as GRPO uses it:

    ratio_t  = exp(logprobs_t - old_logprobs_t)                       (token level), or
    ratio    = exp(mean_t(logprobs_t - old_logprobs_t))               (sequence level, GSPO)
    loss_t   = -min(ratio_t * A, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A)
               [dual clip c: for A < 0, loss_t = min(loss_t, -c * A)]  (Ye et al. 2020)
             + beta * KL_t(pi_theta || pi_ref)                         (kl.py: k1, k2, k3)

and differ in how per-token losses are aggregated (aggregate.py) and where the ratio lives:

    grpo     per-sequence token mean, then mean over sequences          DeepSeekMath
    dr_grpo  token sum / (sequences x max_completion_length)           Dr. GRPO
    dapo     token sum / tokens in the generation batch; use with      DAPO
             clip_eps_high > clip_eps ("clip-higher", e.g. 0.2 / 0.28)
    bnpo     token sum / tokens in this micro-batch                    TRL's bnpo
    hybrid   alpha * dr_grpo + (1 - alpha) * grpo                      the original experiments
    gspo     sequence-level ratio, clipped per sequence, grpo          GSPO (Zheng et al. 2025);
             aggregation; use a small clip_eps (3e-4 / 4e-4)

One loss is not a clipped surrogate:

    dgro     -A log pi_theta(y) + beta_2 (log pi_theta(y) - log pi_old(y))^2 per sequence,
             mean over sequences (+ beta * the sequence's KL to pi_ref)   DGRO (Su et al. 2025)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from ..errors import UserError
from .aggregate import AGGREGATIONS, HYBRID_REFERENCE_TOKENS, SPLIT_FREE, masked_mean
from .kl import KL_ESTIMATORS

LossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
LOSSES: dict[str, LossFn] = {}
# The keyword options each built-in loss takes (policy_loss refuses others by name); a loss
# registered from outside gets whatever it is given.
LOSS_OPTIONS: dict[str, frozenset[str]] = {}
# The losses whose value does not depend on which rows share a micro-batch (their aggregation is in
# SPLIT_FREE): a loss registered from outside is not assumed to be one.
REGROUPABLE: set[str] = set()


def regroupable(loss_type: str) -> bool:
    """May gradient accumulation put the batch's rows into micro-batches in any grouping (rows of
    similar lengths together) without changing the loss `loss_type` sums to?"""
    return loss_type in REGROUPABLE


def register_loss(name: str) -> Callable[[LossFn], LossFn]:
    def deco(fn: LossFn) -> LossFn:
        LOSSES[name] = fn
        LOSS_OPTIONS.pop(name, None)
        REGROUPABLE.discard(name)  # a loss of one's own, even under a built-in name: not assumed
        return fn

    return deco


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy [N, T] of logits [N, T, V]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def per_token_advantages(advantages: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    """Advantages shaped to multiply per-token terms [B*G, T]: [B*G] becomes [B*G, 1] (broadcast
    along the tokens), [B*G, T] stays."""
    if advantages.dim() == 1 and advantages.shape[0] == logprobs.shape[0]:
        return advantages.unsqueeze(-1).to(logprobs.dtype)
    if advantages.shape == logprobs.shape:
        return advantages.to(logprobs.dtype)
    raise ValueError(
        f"advantages must be [B*G] = [{logprobs.shape[0]}] or [B*G, T] = {list(logprobs.shape)}, "
        f"got {list(advantages.shape)}"
    )


def check_kl(kl_estimator: str, beta: float, ref_logprobs: torch.Tensor | None) -> None:
    """A known KL estimator, and reference log-probs wherever the KL term counts (beta != 0)."""
    if kl_estimator not in KL_ESTIMATORS:
        raise UserError(
            f"unknown KL estimator {kl_estimator!r}; choose from: {', '.join(sorted(KL_ESTIMATORS))}"
        )
    if beta != 0.0 and ref_logprobs is None:
        raise ValueError("beta != 0 needs ref_logprobs")


def clipped_surrogate_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    aggregation: str = "grpo",
    importance_sampling: str = "token",
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    dual_clip: float | None = None,
    beta: float = 0.04,
    kl_estimator: str = "k3",
    kl_bias_correction: bool = False,
    max_completion_length: int | None = None,
    num_items: float | torch.Tensor | None = None,
    num_sequences: int | None = None,
    hybrid_alpha: float | None = None,
    hybrid_reference_tokens: float = HYBRID_REFERENCE_TOKENS,
    longest_completion: float | None = None,
    logits: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The shared body of every loss in LOSSES (see the module docstring).

    old_logprobs None means on-policy (mu = 1): the ratio is 1 with the gradient of logprobs.
    kl_bias_correction multiplies the KL estimate by the importance ratio, which makes it
    unbiased when the samples came from the old policy (DeepSeek-V3.2; TRL's
    `use_bias_correction_kl`, on by default in TRL 1.13). Off by default here, as in DeepSeekMath;
    note that it changes the gradient even at ratio 1.
    """
    if aggregation not in AGGREGATIONS:
        raise UserError(
            f"unknown aggregation {aggregation!r}; choose from: {', '.join(sorted(AGGREGATIONS))}"
        )
    check_kl(kl_estimator, beta, ref_logprobs)
    if importance_sampling not in ("token", "sequence"):
        raise UserError(f"importance_sampling must be 'token' or 'sequence', got {importance_sampling!r}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise UserError(f"dual_clip must be > 1, got {dual_clip}")
    mask = mask.to(logprobs.dtype)  # [B*G, T]
    eps_low = clip_eps
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    old = logprobs.detach() if old_logprobs is None else old_logprobs
    log_ratio = logprobs - old  # [B*G, T]
    if importance_sampling == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)  # [B*G, 1]
    ratio = torch.exp(log_ratio)  # [B*G, T] or [B*G, 1]
    adv = per_token_advantages(advantages, logprobs)  # [B*G, 1] or [B*G, T]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv
    per_token = -torch.min(unclipped, clipped)  # [B*G, T] or [B*G, 1]
    if dual_clip is not None:
        per_token = torch.where(adv < 0, torch.minimum(per_token, -dual_clip * adv), per_token)
    per_token = per_token.expand_as(logprobs)  # [B*G, T]
    kl = None
    if beta != 0.0:
        kl = KL_ESTIMATORS[kl_estimator](logprobs, ref_logprobs)  # [B*G, T]
        if kl_bias_correction:
            kl = kl * ratio
        per_token = per_token + beta * kl
    loss = AGGREGATIONS[aggregation](
        per_token,
        mask,
        max_completion_length=max_completion_length,
        num_items=num_items,
        num_sequences=num_sequences,
        hybrid_alpha=hybrid_alpha,
        hybrid_reference_tokens=hybrid_reference_tokens,
        longest_completion=longest_completion,
    )

    with torch.no_grad():
        r = ratio.detach().expand_as(logprobs)
        low = ((r < 1 - eps_low) & (adv < 0)).to(mask.dtype)
        high = ((r > 1 + eps_high) & (adv > 0)).to(mask.dtype)
        metrics = {
            "clip_frac_low": float(masked_mean(low, mask)),
            "clip_frac_high": float(masked_mean(high, mask)),
            "clip_frac": float(masked_mean(low + high, mask)),
            **ratio_kl_entropy_metrics(r, kl, logits, mask),
        }
    return loss, metrics


def ratio_kl_entropy_metrics(
    ratio: torch.Tensor, kl: torch.Tensor | None, logits: torch.Tensor | None, mask: torch.Tensor
) -> dict[str, float]:
    """What every loss reports beside its own figures: the importance ratio's masked mean and
    extremes, the KL estimate's masked mean (0 without one) and, given logits, the entropy."""
    valid = mask.bool()
    metrics = {
        "ratio_mean": float(masked_mean(ratio, mask)),
        "ratio_min": float(ratio[valid].min()) if valid.any() else 1.0,
        "ratio_max": float(ratio[valid].max()) if valid.any() else 1.0,
        "kl": float(masked_mean(kl.detach(), mask)) if kl is not None else 0.0,
    }
    if logits is not None:
        metrics["entropy"] = float(masked_mean(entropy_from_logits(logits.detach()), mask))
    return metrics


SURROGATE_OPTIONS = frozenset(inspect.signature(clipped_surrogate_loss).parameters) - {
    "logprobs",
    "old_logprobs",
    "ref_logprobs",
    "advantages",
    "mask",
}


def _variant(name: str, doc: str, **fixed: Any) -> LossFn:
    def loss(
        logprobs: torch.Tensor,
        old_logprobs: torch.Tensor | None,
        ref_logprobs: torch.Tensor | None,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        **params: Any,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        return clipped_surrogate_loss(
            logprobs, old_logprobs, ref_logprobs, advantages, mask, **{**params, **fixed}
        )

    loss.__name__ = f"{name}_loss"
    loss.__doc__ = doc
    register_loss(name)(loss)
    LOSS_OPTIONS[name] = SURROGATE_OPTIONS - set(fixed)
    if fixed["aggregation"] in SPLIT_FREE:
        REGROUPABLE.add(name)
    return loss


_variant(
    "grpo",
    "Clipped surrogate, per-sequence token mean then mean over sequences (DeepSeekMath).",
    aggregation="grpo",
)
_variant(
    "dr_grpo",
    "Clipped surrogate, token sum / (sequences x max_completion_length) (Dr. GRPO).",
    aggregation="dr_grpo",
)
_variant(
    "dapo",
    "Clipped surrogate, token sum / generation-batch tokens; pair with clip-higher (DAPO).",
    aggregation="dapo",
)
_variant("bnpo", "Clipped surrogate, token sum / micro-batch tokens (TRL's bnpo).", aggregation="bnpo")
_variant(
    "hybrid",
    "Clipped surrogate, alpha * dr_grpo + (1 - alpha) * grpo (the original experiments' proposal).",
    aggregation="hybrid",
)
_variant(
    "gspo",
    "Sequence-level importance ratio, clipped per sequence, grpo aggregation (GSPO, Zheng et al. 2025).",
    aggregation="grpo",
    importance_sampling="sequence",
)

# What the trainer passes every loss, which a loss without a use for it ignores: the clip range
# (its own option in a training run) and the batch's counts.
_GIVEN_TO_EVERY_LOSS = frozenset(
    {"clip_eps", "clip_eps_high", "max_completion_length", "num_items", "longest_completion"}
)


def decoupled_regularised_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    beta_sampling: float = 0.1,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    num_sequences: int | None = None,
    logits: torch.Tensor | None = None,
    **given: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DGRO's loss (Su et al. 2025, arXiv 2505.12951), per completion y of the batch:

        loss(y) = -sum_t A_t log pi_theta(y_t) + beta_2 * (log pi_theta(y) - log pi_old(y))^2

    averaged over the batch's completions (`num_sequences` with micro-batches). The advantage
    carries DGRO's beta_1 (the `dgro` estimator's beta_reward: beta_1 (r - V)); beta_2
    (`beta_sampling`) holds the policy near the one that sampled, pi_old, through the squared
    log-ratio of the whole sequence, as Kimi k1.5's online mirror descent does with one
    coefficient (tau / 2) where DGRO decouples the two. log pi(y) is the sum of the token
    log-probs, so the policy term grows with a completion's length (no per-token mean).

    With one update per rollout (mu = 1, old_logprobs None) pi_old is pi_theta itself: the
    penalty is 0 with a zero gradient, and only the policy term acts; with num_iterations > 1 it
    holds the later updates to the sampler. `beta` (0 by default here) adds beta * the sequence's
    KL to the frozen reference, sum_t KL_t, for a run that also wants that leash.
    """
    refused = set(given) - _GIVEN_TO_EVERY_LOSS
    if refused:
        raise UserError(
            f"the dgro loss has no clipped ratio: {', '.join(sorted(refused))} do(es) not apply to it "
            "(it takes beta_sampling, beta and kl_estimator)"
        )
    if beta_sampling < 0:
        raise UserError(f"beta_sampling must be >= 0, got {beta_sampling}")
    check_kl(kl_estimator, beta, ref_logprobs)
    mask = mask.to(logprobs.dtype)  # [B*G, T]
    old = logprobs.detach() if old_logprobs is None else old_logprobs
    adv = per_token_advantages(advantages, logprobs)  # [B*G, 1] or [B*G, T]
    policy_term = -(adv * logprobs * mask).sum(-1)  # [B*G]: -A log pi_theta(y) for a [B*G] A
    log_ratio = ((logprobs - old) * mask).sum(-1)  # [B*G]: log pi_theta(y) - log pi_old(y)
    per_sequence = policy_term + beta_sampling * log_ratio**2
    kl = None
    if beta != 0.0:
        kl = KL_ESTIMATORS[kl_estimator](logprobs, ref_logprobs)  # [B*G, T]
        per_sequence = per_sequence + beta * (kl * mask).sum(-1)
    loss = per_sequence.sum() / (num_sequences or logprobs.shape[0])

    with torch.no_grad():
        r = torch.exp(logprobs.detach() - old).expand_as(logprobs)
        metrics = {
            "clip_frac_low": 0.0,
            "clip_frac_high": 0.0,
            "clip_frac": 0.0,
            **ratio_kl_entropy_metrics(r, kl, logits, mask),
            "sequence_log_ratio_sq": float((log_ratio.detach() ** 2).mean()),
        }
    return loss, metrics


register_loss("dgro")(decoupled_regularised_loss)
LOSS_OPTIONS["dgro"] = frozenset(
    {"beta_sampling", "beta", "kl_estimator", "num_sequences", "logits"} | _GIVEN_TO_EVERY_LOSS
)
REGROUPABLE.add("dgro")  # a sum over sequences divided by the batch's count: split-free


def loss_options(loss_type: str) -> frozenset[str] | None:
    """The keyword options the loss `loss_type` takes (None: a loss registered from outside,
    which gets whatever it is given)."""
    return LOSS_OPTIONS.get(loss_type)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str = "grpo",
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    beta: float = 0.04,
    max_completion_length: int | None = None,
    **params: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss named `loss_type` (DESIGN.md's entry point). Defaults: clip 0.2 both sides, KL
    coefficient 0.04 with the k3 estimator, grpo aggregation."""
    if loss_type not in LOSSES:
        raise UserError(f"unknown loss type {loss_type!r}; choose from: {', '.join(sorted(LOSSES))}")
    options = loss_options(loss_type)
    unknown = set() if options is None else set(params) - options
    if unknown:
        raise UserError(
            f"the {loss_type} loss does not take {', '.join(sorted(unknown))}; it takes: "
            f"{', '.join(sorted(options or ()))}"
        )
    return LOSSES[loss_type](
        logprobs,
        old_logprobs,
        ref_logprobs,
        advantages,
        mask,
        clip_eps=clip_eps,
        clip_eps_high=clip_eps_high,
        beta=beta,
        max_completion_length=max_completion_length,
        **params,
    )
