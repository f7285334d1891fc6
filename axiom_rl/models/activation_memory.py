"""Less activation memory in training, for the same numbers: a gated MLP that keeps two tensors
fewer for backward.

A Llama-family MLP computes down(silu(gate(x)) * up(x)). Under autograd, silu keeps `gate` and
the product keeps `silu(gate)` and `up`: three [tokens, intermediate] tensors per layer, plus the
product that `down` keeps, four in all. `silu_mul_down` keeps `gate` and `up` only and
recomputes `silu(gate)` and the product in backward (two element-wise passes), so a layer holds
two such tensors fewer at the step's peak: with 64 rows x 280 tokens and an intermediate size of
688, 98 MB a layer. Where `down` is not a plain bias-free Linear (a LoRA layer wraps it),
`silu_mul` keeps `gate` and `up` for the product alone and `down` keeps its input: one fewer.

Forward and backward run the same operations as autograd does, in the same order, so values and
gradients are identical bit for bit (tests/test_models.py checks this on a real model); seeded
runs do not change.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F

from . import cpu_matmul

# MLP classes whose forward is exactly down_proj(act_fn(gate_proj(x)) * up_proj(x)) (transformers 5.x).
GATED_MLPS = ("Qwen2MLP", "Qwen3MLP", "LlamaMLP", "MistralMLP")


class _SiluMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gate, up = ctx.saved_tensors
        # autograd's order: mul's backward (grad * other), then silu's backward on the result
        grad_gate = torch.ops.aten.silu_backward(grad * up, gate)
        grad_up = grad * F.silu(gate)
        return grad_gate, grad_up


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, keeping only gate and up for backward."""
    return _SiluMul.apply(gate, up)


class _SiluMulDown(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up, weight)
        return cpu_matmul.forward_only(F.silu(gate) * up, weight)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        gate, up, weight = ctx.saved_tensors
        silu = F.silu(gate)
        hidden = silu * up  # the product `down` read, recomputed: the same values
        # F.linear of a [..., in] input is a matmul folded to 2-D; autograd's mm backward gives the
        # input's gradient as grad @ W and, W^T being column-major, the weight's as grad^T @ input.
        grad_2d = grad.reshape(-1, grad.shape[-1])
        grad_hidden = cpu_matmul.input_grad(grad_2d, weight).view(hidden.shape)
        grad_weight = (
            cpu_matmul.weight_grad(grad_2d, hidden.reshape(-1, hidden.shape[-1]))
            if ctx.needs_input_grad[2]
            else None
        )
        # then _SiluMul's backward, as above
        grad_gate = torch.ops.aten.silu_backward(grad_hidden * up, gate)
        grad_up = grad_hidden * silu
        return grad_gate, grad_up, grad_weight


def silu_mul_down(gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """F.linear(silu(gate) * up, weight), keeping only gate, up and the weight for backward."""
    return _SiluMulDown.apply(gate, up, weight)


def _gated_mlp_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    down = self.down_proj
    if type(down) is torch.nn.Linear and down.bias is None:
        return silu_mul_down(self.gate_proj(x), self.up_proj(x), down.weight)
    return down(silu_mul(self.gate_proj(x), self.up_proj(x)))


def lean_mlp_activations(model: Any) -> int:
    """Give every SiLU-gated MLP of `model` the leaner forward; returns how many it changed
    (0 for architectures it does not know, which train as before)."""
    changed = 0
    for module in model.modules():
        if "forward" in vars(module):  # already wrapped (an accelerate hook, a user's patch): keep it
            continue
        if type(module).__name__ in GATED_MLPS and type(module.act_fn).__name__ in ("SiLUActivation", "SiLU"):
            module.forward = types.MethodType(_gated_mlp_forward, module)
            changed += 1
    return changed
