"""RMSNorm for float32 on a CPU in one pass forward and one backward: axiom-rl's own kernel
(speed/rms_norm.cpp) for the norms of Llama-family models.

transformers computes weight * (x * rsqrt(mean(x^2) + eps)) as six element-wise calls over
[tokens, hidden], and autograd differentiates them as some fifteen more; a Qwen2 layer has two
norms, run by the reference forward, the policy forward and the backward of every GRPO step. The
kernel reads a row once for its sum of squares and once to write it out, and keeps x and one
number a row for backward, where autograd keeps three [tokens, hidden] tensors.

`fuse_rms_norms(model)` gives each norm of a known class a forward that calls the kernel where it
applies (float32, a CPU, the kernel built) and transformers' own arithmetic everywhere else, so a
model moved to a GPU or cast to bf16 later runs as before. The sums run in another order than
ATen's, so values and gradients agree with transformers' to float32 rounding (tests/test_rms_norm.py),
not bit for bit: a seeded run gives other figures than without it, and the same figures run after
run. `Speed.rms_norm_kernel` off (the step benchmark's aten-norm ablation): the model's norms are
left as they are.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from . import native
from .forwards import give_forwards

# Norm classes whose forward is exactly weight * (x * rsqrt(mean(x^2) + eps)) in float32, cast back
# to the input's dtype before the weight (transformers 5.x).
RMS_NORMS = ("Qwen2RMSNorm", "Qwen3RMSNorm", "LlamaRMSNorm", "MistralRMSNorm")


@functools.cache
def _available() -> bool:
    """Whether the kernel runs here: the C++ library built, and a kernel for ATen's CPU capability."""
    return native.available() and torch.ops.axiom_rl.rms_norm_lanes() > 0


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' RMSNorm arithmetic, call by call."""
    input_dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    return weight * x.to(input_dtype)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        y, rstd = torch.ops.axiom_rl.rms_norm_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, rstd = ctx.saved_tensors
        grad_x, grad_weight = torch.ops.axiom_rl.rms_norm_backward(
            grad.contiguous(), x, weight, rstd, ctx.needs_input_grad[1]
        )
        return grad_x, grad_weight if ctx.needs_input_grad[1] else None, None


def _applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (
        x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and weight.dim() == 1
        and x.dim() >= 1
        and x.shape[-1] == weight.shape[0]
        and _available()
    )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * (x / sqrt(mean(x^2, last dimension) + eps)), differentiable in x and weight."""
    if not _applies(x, weight):
        return reference(x, weight, eps)
    x = x.contiguous()
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _RMSNorm.apply(x, weight, eps)
    return torch.ops.axiom_rl.rms_norm_forward(x, weight, eps)[0]


def _norm_forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    return rms_norm(hidden_states, self.weight, self.variance_epsilon)


def fuse_rms_norms(model: Any) -> int:
    """Give every RMSNorm of a known class in `model` the kernel's forward; returns how many (0 for
    architectures it does not know, whose norms run as before)."""
    return give_forwards(
        model,
        lambda module: (
            _norm_forward
            if type(module).__name__ in RMS_NORMS and hasattr(module, "variance_epsilon")
            else None
        ),
    )
