"""Per-token estimators of KL(pi_theta || pi_ref) from log-probs of sampled tokens.

All take `logprobs` and `ref_logprobs` of shape [B*G, T] and return [B*G, T]. With
log_ratio = log pi_ref(y_t) - log pi_theta(y_t) (J. Schulman, "Approximating KL Divergence",
2020):

    k1 = -log_ratio                        unbiased, high variance, can be negative
    k2 = 0.5 * log_ratio**2                biased, low variance, >= 0 (DGRO's squared log-ratio
                                           penalty is 2 * k2)
    k3 = exp(log_ratio) - log_ratio - 1    unbiased, low variance, >= 0 (DeepSeekMath / GRPO; TRL)
"""

from __future__ import annotations

from collections.abc import Callable

import torch

KLEstimator = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KL_ESTIMATORS: dict[str, KLEstimator] = {}


def register_kl(name: str) -> Callable[[KLEstimator], KLEstimator]:
    def deco(fn: KLEstimator) -> KLEstimator:
        KL_ESTIMATORS[name] = fn
        return fn

    return deco


@register_kl("k1")
def k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return logprobs - ref_logprobs  # [B*G, T]


@register_kl("k2")
def k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return 0.5 * (ref_logprobs - logprobs) ** 2  # [B*G, T]


@register_kl("k3")
def k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    log_ratio = ref_logprobs - logprobs  # [B*G, T]
    return torch.exp(log_ratio) - log_ratio - 1
