"""Loss aggregation: how per-token losses [B*G, T] become one scalar.

This is exactly where GRPO, Dr. GRPO and DAPO differ, so it is a named choice of its own. Each
mode is f(per_token_loss, mask, **params) -> scalar; `mask` is 1 on completion tokens.

    grpo     mean over each sequence's tokens, then over sequences (DeepSeekMath, Shao et al.
             2024). A token of a short sequence weighs more than one of a long sequence: a
             length bias (long wrong answers are penalised less per token).
    dr_grpo  sum over all tokens / (number of sequences x max_completion_length) (Dr. GRPO, Liu
             et al. 2025, "Understanding R1-Zero-Like Training"). Every token weighs the same,
             whatever its sequence's length; the constant keeps the scale independent of the
             batch. The original experiments saw it collapse at 1024 tokens (the effective step shrinks as
             1/max_completion_length when completions are short).
    dapo     sum over all tokens / number of completion tokens in the whole generation batch
             (DAPO, Yu et al. 2025: "token-level policy gradient loss"). Pass `num_items`, the
             token count over all micro-batches of an accumulation window, so that micro-batches
             of different lengths weigh by their tokens; without it, the local count is used.
    bnpo     sum over tokens / tokens in this micro-batch (TRL's "bnpo"): dapo normalised
             locally; equal to dapo when there is one micro-batch.
    hybrid   alpha * dr_grpo + (1 - alpha) * grpo, alpha = min(1, max_tokens / 512) by default,
             max_tokens being the longest completion *in this batch* (the original experiments' proposal;
             `hybrid_reference_tokens` replaces the 512 for budgets of another scale).
             While completions are short, dr_grpo's constant normaliser (the budget) would make
             steps tiny -- the collapse the original experiments saw at a 1024-token budget -- so the batch leans
             on grpo; once completions grow long, it becomes dr_grpo, free of length bias.
             Pass `hybrid_alpha` to fix alpha instead. With micro-batches, pass the whole batch's
             longest completion as `longest_completion` (the trainer does): one alpha per step.

Micro-batches. With gradient accumulation each micro-batch's loss is aggregated on its own and
the results are summed, so every mode takes the *whole* batch's counts: `num_sequences` (rows in
the batch), for dapo `num_items` (its tokens), for hybrid `longest_completion`. With one
micro-batch they default to the local counts and every mode reads as above.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..errors import UserError

Aggregation = Callable[..., torch.Tensor]
AGGREGATIONS: dict[str, Aggregation] = {}
HYBRID_REFERENCE_TOKENS = 512
# The modes whose micro-batch losses add up to the whole batch's however its rows are split into
# micro-batches (given the whole batch's counts), so the trainer may group rows of similar
# lengths (train/batch.py: length bucketing). bnpo divides by each micro-batch's own tokens: which
# rows share a micro-batch changes their loss.
SPLIT_FREE = {"grpo", "dr_grpo", "dapo", "hybrid"}


def register_aggregation(name: str) -> Callable[[Aggregation], Aggregation]:
    def deco(fn: Aggregation) -> Aggregation:
        AGGREGATIONS[name] = fn
        return fn

    return deco


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over the positions where mask is 1 (0 when there are none)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


@register_aggregation("grpo")
def sequence_mean(
    per_token_loss: torch.Tensor, mask: torch.Tensor, num_sequences: int | None = None, **_: Any
) -> torch.Tensor:
    per_sequence = (per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B*G]
    return per_sequence.sum() / (num_sequences or per_token_loss.shape[0])


@register_aggregation("dr_grpo")
def constant_normalised(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    max_completion_length: int | None = None,
    num_sequences: int | None = None,
    **_: Any,
) -> torch.Tensor:
    length = max_completion_length or mask.shape[-1]
    return (per_token_loss * mask).sum() / ((num_sequences or per_token_loss.shape[0]) * length)


@register_aggregation("dapo")
def token_mean(
    per_token_loss: torch.Tensor, mask: torch.Tensor, num_items: float | torch.Tensor | None = None, **_: Any
) -> torch.Tensor:
    total = mask.sum() if num_items is None else torch.as_tensor(num_items, dtype=per_token_loss.dtype)
    return (per_token_loss * mask).sum() / total.clamp(min=1.0)


@register_aggregation("bnpo")
def local_token_mean(
    per_token_loss: torch.Tensor, mask: torch.Tensor, num_sequences: int | None = None, **_: Any
) -> torch.Tensor:
    # The micro-batch's token mean, weighted by its share of the batch's sequences (TRL divides
    # by the number of accumulation steps: the same for equal micro-batches).
    share = per_token_loss.shape[0] / (num_sequences or per_token_loss.shape[0])
    return masked_mean(per_token_loss, mask) * share


def default_hybrid_alpha(
    mask: torch.Tensor,
    longest_completion: float | None = None,
    reference_tokens: float = HYBRID_REFERENCE_TOKENS,
) -> float:
    """min(1, longest completion in the batch / reference_tokens): `longest_completion` where
    given (the whole batch's, over its micro-batches), else the longest row of `mask`. The
    reference (512 in the original experiments, whose budgets were 256-1024 tokens) scales with
    the budgets: a run whose answers are 20 tokens long passes its own."""
    if reference_tokens <= 0:
        raise UserError(f"hybrid_reference_tokens must be > 0, got {reference_tokens}")
    if longest_completion is None:
        longest_completion = float(mask.sum(-1).max()) if mask.numel() else 0.0
    return min(1.0, float(longest_completion) / reference_tokens)


@register_aggregation("hybrid")
def hybrid(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    max_completion_length: int | None = None,
    hybrid_alpha: float | None = None,
    num_sequences: int | None = None,
    longest_completion: float | None = None,
    hybrid_reference_tokens: float = HYBRID_REFERENCE_TOKENS,
    **_: Any,
) -> torch.Tensor:
    if hybrid_alpha is None:
        alpha = default_hybrid_alpha(mask, longest_completion, hybrid_reference_tokens)
    else:
        alpha = hybrid_alpha
    dr = constant_normalised(per_token_loss, mask, max_completion_length, num_sequences)
    return alpha * dr + (1 - alpha) * sequence_mean(per_token_loss, mask, num_sequences)
