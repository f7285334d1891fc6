"""Less activation memory in training, for the same numbers: a gated MLP that keeps two tensors
fewer for backward.

A Llama-family MLP computes down(silu(gate(x)) * up(x)). Under autograd, silu keeps `gate` and
the product keeps `silu(gate)` and `up`: three [tokens, intermediate] tensors per layer, plus the
product that `down` keeps, four in all. `silu_mul_down` keeps `gate` and `up` only and
recomputes `silu(gate)` and the product in backward (two element-wise passes), so a layer holds
two such tensors fewer at the step's peak: with 64 rows x 280 tokens and an intermediate size of
688, 98 MB a layer. Where `down` is not a plain bias-free Linear (a LoRA layer wraps it),
`silu_mul` keeps `gate` and `up` for the product alone and `down` keeps its input: one fewer.

Forward and backward compute what autograd computes, each value rounded alike, so values and
gradients are identical bit for bit (tests/test_models.py checks this on a real model); seeded
runs do not change. On a float32 CPU, silu(gate) * up and its backward run in one pass each
(speed/silu_mul.cpp, in the C++ library that speed/native.py builds): five and fourteen
streams over [tokens, intermediate] tensors become three and six. Those kernels follow ATen's own
to the bit (the same exp, the same split over threads); they are checked against ATen's calls
when first loaded, and where they are not available or differ, ATen's calls run.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from . import cpu_matmul, replay
from .forwards import give_forwards

# MLP classes whose forward is exactly down_proj(act_fn(gate_proj(x)) * up_proj(x)) (transformers 5.x).
GATED_MLPS = ("Qwen2MLP", "Qwen3MLP", "LlamaMLP", "MistralMLP")


@functools.cache
def _fused_available() -> bool:
    """Whether the fused kernels run on this machine: False where ATen's calls run instead (no C++
    library, no kernel for ATen's CPU capability, or kernels whose bits differ from ATen's, with a
    warning, once). The library picks the kernel that follows ATen's silu (`silu_kernel`)."""
    from . import native

    if native.op() is None or not torch.ops.axiom_rl.silu_kernel():
        return False
    if differs := _differs_from_aten():
        warnings.warn(
            f"the fused SiLU kernels' {differs} differs from ATen's here; using ATen's calls", stacklevel=2
        )
        return False
    return True


def _differs_from_aten() -> str:
    """Where the fused kernels' bits differ from ATen's calls ("forward", "backward"), or "". At
    a size inside ATen's grain (one chunk) and above it (a chunk per thread), neither a whole number
    of vector pairs, with values wide enough for exp to under- and overflow."""
    gen = torch.Generator().manual_seed(0)
    for shape in ((3, 37), (3, 22_001)):
        gate, up, grad = (torch.randn(shape, generator=gen) * 30 for _ in range(3))
        silu = F.silu(gate)
        if not torch.equal(torch.ops.axiom_rl.silu_mul(gate, up), silu * up):
            return "forward"
        grad_gate, grad_up, product = torch.ops.axiom_rl.silu_mul_backward(grad, gate, up, True)
        expected = (torch.ops.aten.silu_backward(grad * up, gate), grad * silu, silu * up)
        if not all(map(torch.equal, (grad_gate, grad_up, product), expected)):
            return "backward"
    return ""


def _fused(fused: bool, *tensors: torch.Tensor) -> bool:
    """Whether the fused kernels compute for these tensors (else ATen's calls, the same bits):
    asked for (`fused`: Speed.fused_silu), and float32 on a CPU, alike in shape."""
    first = tensors[0]
    return (
        fused
        and all(
            t.device.type == "cpu"
            and t.dtype == torch.float32
            and t.is_contiguous()
            and t.shape == first.shape
            for t in tensors
        )
        and _fused_available()
    )


def silu_times(gate: torch.Tensor, up: torch.Tensor, fused: bool = True) -> torch.Tensor:
    """silu(gate) * up (no autograd)."""
    return torch.ops.axiom_rl.silu_mul(gate, up) if _fused(fused, gate, up) else F.silu(gate) * up


def silu_times_backward(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, with_product: bool, fused: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(grad_gate, grad_up, and where asked the product silu(gate) * up) for silu(gate) * up."""
    if _fused(fused, grad, gate, up):
        grad_gate, grad_up, product = torch.ops.axiom_rl.silu_mul_backward(grad, gate, up, with_product)
        return grad_gate, grad_up, product if with_product else None
    silu = F.silu(gate)
    # autograd's order: mul's backward (grad * other), then silu's backward on the result
    grad_gate = torch.ops.aten.silu_backward(grad * up, gate)
    return grad_gate, grad * silu, silu * up if with_product else None


class _SiluMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor, fused: bool) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        ctx.fused = fused
        return silu_times(gate, up, fused)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        gate, up = ctx.saved_tensors
        grad_gate, grad_up, _ = silu_times_backward(grad, gate, up, with_product=False, fused=ctx.fused)
        return grad_gate, grad_up, None


def silu_mul(gate: torch.Tensor, up: torch.Tensor, fused: bool = True) -> torch.Tensor:
    """silu(gate) * up, keeping only gate and up for backward."""
    return _SiluMul.apply(gate, up, fused)


class _SiluMulDown(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, fused: bool
    ) -> torch.Tensor:
        ctx.save_for_backward(gate, up, weight)
        ctx.fused = fused
        return cpu_matmul.forward_only(silu_times(gate, up, fused), weight)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        gate, up, weight = ctx.saved_tensors
        # F.linear of a [..., in] input is a matmul folded to 2-D; autograd's mm backward gives the
        # input's gradient as grad @ W and, W^T being column-major, the weight's as grad^T @ input.
        grad_2d = grad.reshape(-1, grad.shape[-1])
        grad_hidden = cpu_matmul.input_grad(grad_2d, weight).view(gate.shape)
        # then _SiluMul's backward, which also recomputes the product `down` read (the same values)
        need_weight = ctx.needs_input_grad[2]
        grad_gate, grad_up, hidden = silu_times_backward(
            grad_hidden, gate, up, with_product=need_weight, fused=ctx.fused
        )
        grad_weight = (
            cpu_matmul.weight_grad(grad_2d, hidden.reshape(-1, hidden.shape[-1])) if need_weight else None
        )
        return grad_gate, grad_up, grad_weight, None


def silu_mul_down(
    gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, fused: bool = True
) -> torch.Tensor:
    """F.linear(silu(gate) * up, weight), keeping only gate, up and the weight for backward."""
    return _SiluMulDown.apply(gate, up, weight, fused)


class _SiluMulDownReplayed(_SiluMulDown):
    """_SiluMulDown whose value a rollout recorded (speed/replay.py): the same backward."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        gate: torch.Tensor,
        up: torch.Tensor,
        weight: torch.Tensor,
        fused: bool,
        recorded: torch.Tensor,
    ) -> torch.Tensor:
        ctx.save_for_backward(gate, up, weight)
        ctx.fused = fused
        return replay.as_output(recorded)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return (*_SiluMulDown.backward(ctx, grad), None)


def _lean_forward(self: Any, x: torch.Tensor, fused: bool) -> torch.Tensor:
    down = self.down_proj
    if type(down) is torch.nn.Linear and down.bias is None and not cpu_matmul.packed(down):
        gate, up = self.gate_proj(x), self.up_proj(x)
        if (recorded := replay.recorded_output(down, gate)) is not None:  # down's input has gate's shape
            return _SiluMulDownReplayed.apply(gate, up, down.weight, fused, recorded)
        return silu_mul_down(gate, up, down.weight, fused)
    return down(silu_mul(self.gate_proj(x), self.up_proj(x), fused))


def _gated_mlp_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    return _lean_forward(self, x, fused=True)


def _gated_mlp_forward_aten(self: Any, x: torch.Tensor) -> torch.Tensor:
    return _lean_forward(self, x, fused=False)


def lean_mlp_activations(model: Any, fused: bool = True) -> int:
    """Give every SiLU-gated MLP of `model` the leaner forward, with silu(gate) * up in the fused
    kernels where they apply (`fused`: Speed.fused_silu; else ATen's calls, the same bits);
    returns how many it changed (0 for architectures it does not know, which train as before)."""
    forward = _gated_mlp_forward if fused else _gated_mlp_forward_aten

    def forward_for(module: Any) -> Any:
        known = type(module).__name__ in GATED_MLPS
        return forward if known and type(module.act_fn).__name__ in ("SiLUActivation", "SiLU") else None

    return give_forwards(model, forward_for)
