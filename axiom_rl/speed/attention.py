"""Attention for the training passes on a CPU: axiom-rl's own kernel (speed/attention.cpp), as
a transformers attention implementation.

ATen's CPU flash attention runs at 35-45 GFLOP/s on a GRPO step's shapes; at the step benchmark's
full configuration it took some 20 ms a step, 17 of them in backward, and at rollout-heavy's
about 0.85 s of a 5 s step (docs/benchmarks.md). The kernel reads each K/V head once for the
query heads that share it, stops every query row at its last unmasked key (so causal rows do half
the work) and recomputes the probabilities in backward from the saved log-sum-exp: about twice as
fast forward and backward at those shapes.

`use_for(model)` registers it with transformers under the name "axiom_rl_cpu" (its masks are
SDPA's) and switches a model that runs "sdpa" to it. For every call it cannot take (not float32 on
a CPU, dropout, a head size without a kernel, a float mask) it calls transformers' SDPA function
with the same arguments. Its sums run in another order than ATen's, so outputs and gradients agree
with SDPA's to float32 rounding (tests/test_attention.py), not bit for bit: a seeded run gives other
figures than with SDPA, and the same figures run after run. `Speed.attention_kernel` off (the step
benchmark's sdpa-attention ablation): the model is left with SDPA.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from . import native

NAME = "axiom_rl_cpu"


@functools.cache
def has_kernel(head_dim: int) -> bool:
    """Whether the kernel runs attention with this head size here (16-256 with AVX-512, 8-128 with
    AVX2, in powers of two times the vector width)."""
    return native.available() and bool(torch.ops.axiom_rl.attention_kernel(head_dim))


class _Attention(torch.autograd.Function):
    """softmax(q k^T * scale, masked) v: q [B, H, S, D], k and v [B, KVH, SK, D]; returns [B, S, H, D]."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        causal: bool,
        scale: float,
    ) -> torch.Tensor:
        out, lse = torch.ops.axiom_rl.attention_forward(q, k, v, mask, causal, scale)
        ctx.save_for_backward(q, k, v, mask, out, lse)
        ctx.causal, ctx.scale = causal, scale
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, mask, out, lse = ctx.saved_tensors
        grad_q, grad_k, grad_v = torch.ops.axiom_rl.attention_backward(
            grad.contiguous(), q, k, v, mask, ctx.causal, ctx.scale, out, lse
        )
        return grad_q.transpose(1, 2), grad_k, grad_v, None, None, None


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    scale: float,
) -> torch.Tensor:
    """The kernel's attention, differentiable: [B, S, H, D] from q [B, H, S, D] and k, v [B, KVH,
    SK, D]. mask: boolean [B or 1, 1, S, SK], True where a query may attend; or None, and then
    `causal` as F.scaled_dot_product_attention's is_causal (query i sees keys 0..i)."""
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    if mask is not None and mask.stride(-1) != 1:
        mask = mask.contiguous()
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return _Attention.apply(q, k, v, mask, causal, scale)
    return torch.ops.axiom_rl.attention_forward(q, k, v, mask, causal, scale)[0]


def _takes(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None, dropout: float) -> bool:
    """Whether the kernel computes this call of transformers' attention (else SDPA does)."""
    b, s, sk = query.shape[0], query.shape[2], key.shape[2]
    return (
        query.device.type == "cpu"
        and query.dtype == key.dtype == torch.float32
        and dropout == 0.0
        and query.shape[1] % key.shape[1] == 0
        and has_kernel(query.shape[-1])
        and (
            mask is None
            or (
                mask.dtype == torch.bool
                and mask.dim() == 4
                and mask.shape[0] in (1, b)
                and mask.shape[1:] == (1, s, sk)
            )
        )
    )


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface (integrations/sdpa_attention.py's arguments and result:
    [B, S, H, D], no weights), with SDPA's semantics for a missing mask."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    needs_sdpa = (
        kwargs.get("output_attentions")
        or kwargs.get("position_bias") is not None
        or kwargs.get("s_aux") is not None
    )
    if needs_sdpa or not _takes(query, key, attention_mask, dropout):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = query.shape[2] > 1 and attention_mask is None and causal
    if causal and key.shape[2] > query.shape[2]:  # as SDPA's function: an empty static cache's prefill
        key, value = key[:, :, : query.shape[2]], value[:, :, : query.shape[2]]
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return attention(query, key, value, attention_mask, causal, scale), None


@functools.cache
def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


def use_for(model: Any) -> bool:
    """Switch a transformers model (or a peft model around one) that runs SDPA attention to this
    kernel's implementation; True when switched. The choice is not saved with the model."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa" or not native.available():
        return False
    if not hasattr(model, "set_attn_implementation"):
        return False
    _register()
    model.set_attn_implementation(NAME)
    return config._attn_implementation == NAME
