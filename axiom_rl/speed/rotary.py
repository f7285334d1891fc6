"""The rotary position embedding of Llama-family attention in one pass forward and one backward on
a float32 CPU (speed/rotary.cpp), with the same bits as transformers' and autograd's.

transformers applies RoPE as q * cos + rotate_half(q) * sin for the queries and again for the
keys: eight element-wise calls and two concatenations forward, as many backward, every one a pass
over the attention's inputs and a fresh tensor. The kernel reads and writes each once, rounding
every product and sum as ATen does, so values and gradients are identical bit for bit and a seeded
run gives the same figures with it or without it (tests/test_rotary.py).

transformers' attention classes call the module-level function `apply_rotary_pos_emb` of their
modeling file. `fuse_rotary(model)` leaves that module alone (other models in the process keep
it): it gives each attention layer of a known class its class's own forward, the same code, with
that one name bound to a function that calls the kernel where it applies (float32 on a CPU, the
layout of these classes) and the original everywhere else. It checks first that the kernel gives
the original's bits, forward and backward, and leaves a class alone where it does not.
`Speed.rotary_kernel` off: the model is left with the original.
"""

from __future__ import annotations

import functools
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch

from . import native
from .forwards import give_forwards

# Attention classes whose forward calls apply_rotary_pos_emb(q, k, cos, sin) on q and k laid out
# [batch, heads, positions, head size] and cos, sin [batch, positions, head size] (transformers 5.x).
ATTENTIONS = ("Qwen2Attention", "Qwen3Attention", "LlamaAttention", "MistralAttention")
NAME = "apply_rotary_pos_emb"


class _Rotary(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.save_for_backward(cos, sin)
        return torch.ops.axiom_rl.rotary_forward(q, k, cos, sin)

    @staticmethod
    def backward(ctx: Any, grad_q: torch.Tensor, grad_k: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        cos, sin = ctx.saved_tensors
        grad_q, grad_k = torch.ops.axiom_rl.rotary_backward(
            *(g if g.stride(-1) == 1 else g.contiguous() for g in (grad_q, grad_k)), cos, sin
        )
        return grad_q, grad_k, None, None


def _applies(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: Any
) -> bool:
    tensors = (q, k, cos, sin)
    return (
        unsqueeze_dim == 1
        and all(t.device.type == "cpu" and t.dtype == torch.float32 and t.stride(-1) == 1 for t in tensors)
        and q.dim() == k.dim() == 4
        and cos.dim() == 3
        and cos.shape == sin.shape
        and cos.stride() == sin.stride()
        and q.shape[0] == k.shape[0]
        and q.shape[2:] == k.shape[2:] == cos.shape[1:]
        and cos.shape[0] in (1, q.shape[0])
        and q.shape[-1] % 2 == 0
        and not (cos.requires_grad or sin.requires_grad)
        and native.available()
    )


def rotary(original: Callable[..., Any]) -> Callable[..., Any]:
    """apply_rotary_pos_emb's stand-in: the kernel where it applies, `original` elsewhere."""

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):  # transformers' signature
        if not _applies(q, k, cos, sin, unsqueeze_dim):
            return original(q, k, cos, sin, unsqueeze_dim)
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
            return _Rotary.apply(q, k, cos, sin)
        return torch.ops.axiom_rl.rotary_forward(q, k, cos, sin)

    return apply_rotary_pos_emb


def _differs(original: Callable[..., Any]) -> str:
    """Where the kernel's bits differ from `original`'s ("forward", "backward"), or "": at the
    layout the attention classes pass (a transposed projection), cos and sin for one batch row and
    for each, values wide enough for every rounding to show."""
    gen = torch.Generator().manual_seed(0)
    fused = rotary(original)
    for cos_rows in (1, 3):
        q = (torch.randn(3, 7, 4, 64, generator=gen) * 30).transpose(1, 2)
        k = (torch.randn(3, 7, 2, 64, generator=gen) * 30).transpose(1, 2)
        cos, sin = (torch.randn(cos_rows, 7, 64, generator=gen) for _ in range(2))
        grads = (torch.randn(3, 4, 7, 64, generator=gen), torch.randn(3, 2, 7, 64, generator=gen))
        results = []
        for fn in (fused, original):
            qq, kk = (t.detach().requires_grad_() for t in (q, k))
            outs = fn(qq, kk, cos, sin)
            torch.autograd.backward(outs, grads)
            results.append((*outs, qq.grad, kk.grad))
        (*got_out, got_gq, got_gk), (*want_out, want_gq, want_gk) = results
        if not all(map(torch.equal, got_out, want_out)):
            return "forward"
        if not (torch.equal(got_gq, want_gq) and torch.equal(got_gk, want_gk)):
            return "backward"
    return ""


@functools.cache
def _forward_for(cls: type) -> Callable[..., Any] | None:
    """`cls.forward` with apply_rotary_pos_emb bound to the kernel's stand-in, or None where the
    class does not call it or the kernel's bits differ from its (with a warning, once)."""
    forward = cls.__dict__.get("forward")
    if not isinstance(forward, types.FunctionType) or NAME not in forward.__code__.co_names:
        return None
    original = forward.__globals__.get(NAME)
    if not callable(original):
        return None
    if differs := _differs(original):
        warnings.warn(
            f"the rotary kernel's {differs} differs from {cls.__name__}'s here; not using it", stacklevel=3
        )
        return None
    # The same code over a copy of its module's names with that one replaced: the module itself,
    # and every other model that uses it, stay as they are.
    names = {**forward.__globals__, NAME: rotary(original)}
    bound = types.FunctionType(
        forward.__code__, names, forward.__name__, forward.__defaults__, forward.__closure__
    )
    bound.__kwdefaults__ = forward.__kwdefaults__
    bound.__qualname__, bound.__doc__ = forward.__qualname__, forward.__doc__
    return bound


def fuse_rotary(model: Any) -> int:
    """Give every attention layer of a known class in `model` the kernel's RoPE; returns how many
    (0 where the kernel is not built, or for architectures it does not know)."""
    if not native.available():
        return 0
    return give_forwards(
        model, lambda module: _forward_for(type(module)) if type(module).__name__ in ATTENTIONS else None
    )
