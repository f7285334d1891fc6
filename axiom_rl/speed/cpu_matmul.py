"""float32 linear layers on x86 CPUs that are not Intel's, through oneDNN instead of MKL.

PyTorch's CPU build sends a float32 matmul to MKL, and MKL picks its kernels by CPU vendor: on
an AMD processor it runs its AVX2 code even where the core has AVX-512. oneDNN, which the same
build ships (PyTorch's own compiler backend calls it), chooses by instruction set. On the
project's machines (AMD EPYC, Zen 5, 2 cores) a 1024 x 1024 x 1024 float32 matmul ran at 210
GFLOP/s through MKL and 497 through oneDNN; at the shapes of a small model's training passes,
1.6-2.0x as fast forward and for the input's gradient (docs/benchmarks.md).

What changes: `linear` computes F.linear's forward and the input's gradient with oneDNN; the
weight's gradient stays an MKL matmul (with the transposes oneDNN needs, it gained little). The
results are float32 matmuls like MKL's, summed in a different order, so their last bits differ:
a seeded run on such a machine gives other figures than with MKL, and the same figures run
after run. On Intel CPUs, on other architectures, for other dtypes and on GPUs nothing changes.

`AXIOM_RL_CPU_MATMUL=onednn` or `=default` overrides the choice (`default`: PyTorch's own BLAS).
"""

from __future__ import annotations

import functools
import platform
from typing import Any

import torch
import torch.nn.functional as F

from ..errors import UserError, env_choice
from .forwards import give_forwards

ENV = "AXIOM_RL_CPU_MATMUL"
CHOICES = ("onednn", "default")


def cpu_vendor() -> str:
    """The CPU's vendor string (GenuineIntel, AuthenticAMD, ...), or "" where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


@functools.cache
def backend() -> str:
    """ "onednn" or "default": which library runs float32 linear layers on this machine's CPU."""
    chosen = env_choice(ENV, CHOICES)
    if chosen:
        if chosen == "onednn" and not onednn_available():
            raise UserError(f"{ENV}=onednn, but this PyTorch build has no oneDNN")
        return chosen
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    return "onednn" if x86 and cpu_vendor() not in ("GenuineIntel", "") and onednn_available() else "default"


def applies(x: torch.Tensor) -> bool:
    """Whether a linear layer on `x` goes through oneDNN."""
    return x.dtype == torch.float32 and x.device.type == "cpu" and backend() == "onednn"


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def forward_only(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear's value, through oneDNN where it applies; for code that does its own backward."""
    return _onednn(x, weight, bias) if applies(x) else F.linear(x, weight, bias)


def pack(weight: torch.Tensor) -> torch.Tensor:
    """A weight laid out once for repeated inference calls of `linear_packed` (the decode loop)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def linear_packed(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear with a weight from `pack`; no autograd."""
    return _onednn(x, packed, bias)


def input_grad(grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """grad @ weight: the gradient of F.linear's input, [..., out] -> [..., in]."""
    if applies(grad):
        # The transposed view, not a contiguous copy: oneDNN lays the weight out for its kernel
        # either way, and its reorder is faster than ATen's transposing copy. The same bits on
        # the 2-core Zen 4 hosts this project measures on; a 16-core Xeon (the lent GPU machine)
        # gave others, within float32 rounding.
        return _onednn(grad, weight.t(), None)
    return grad.matmul(weight)


def weight_grad(grad_2d: torch.Tensor, input_2d: torch.Tensor) -> torch.Tensor:
    """grad^T @ input: the gradient of F.linear's weight, from both folded to 2-D. It stays in
    PyTorch's BLAS: through oneDNN, with the transposes it needs, it gained too little."""
    return grad_2d.t().mm(input_2d)


def linear_grads(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, has_bias: bool, needed: tuple[bool, ...]
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """F.linear's backward: the gradients of its input, weight and bias, each where `needed`."""
    grad_2d = grad.reshape(-1, grad.shape[-1])
    grad_x = input_grad(grad, weight) if needed[0] else None
    grad_w = weight_grad(grad_2d, x.reshape(-1, x.shape[-1])) if needed[1] else None
    grad_b = grad_2d.sum(0) if has_bias and needed[2] else None
    return grad_x, grad_w, grad_b


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _onednn(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        return linear_grads(grad, x, weight, ctx.has_bias, ctx.needs_input_grad)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, through oneDNN where `applies(x)`; differentiable."""
    if applies(x):
        return _Linear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


def _linear_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return linear(x, self.weight, self.bias)


def _packed_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return linear_packed(x, self.packed_weight, self.bias)


def pack_frozen_linear_layers(model: Any) -> int:
    """For a network that never trains (full fine-tuning's frozen reference): lay out the weight of
    each plain float32 nn.Linear on the CPU once for oneDNN, in place of the plain weight, which
    becomes None (the same memory). Given an unpacked weight, oneDNN lays it out again on every
    call: a reference pass of the step benchmark's model makes 58 such calls, some 2 ms of its
    49 (docs/benchmarks.md). The same bits. Weights that another module shares (an output layer
    tied to the embedding), or that train, stay as they are. The packed layers compute without
    autograd, and only on the CPU: the network stays where it is. Returns how many were packed;
    0 where oneDNN does not run float32 linear layers here. Call it before `route_linear_layers`,
    which then leaves the packed layers alone."""
    if backend() != "onednn":
        return 0
    seen: set[int] = set()
    shared: set[int] = set()
    for _, parameter in model.named_parameters(remove_duplicate=False):
        (shared if id(parameter) in seen else seen).add(id(parameter))

    def forward_for(module: Any) -> Any:
        weight = getattr(module, "weight", None)
        if (
            type(module) is not torch.nn.Linear
            or weight is None
            or weight.requires_grad
            or weight.dtype != torch.float32
            or weight.device.type != "cpu"
            or id(weight) in shared
        ):
            return None
        module.packed_weight = pack(weight)
        module.weight = None
        return _packed_forward

    return give_forwards(model, forward_for)


def packed(module: Any) -> bool:
    """Whether `pack_frozen_linear_layers` packed this module's weight."""
    return getattr(module, "packed_weight", None) is not None


def route_linear_layers(model: Any) -> int:
    """Give every plain nn.Linear of `model` (peft's LoRA layers hold them too) a forward that
    calls `linear`; returns how many (0 where this machine's backend is the default). Whether
    oneDNN applies is checked per call, so a model moved to a GPU or cast to bf16 later runs F.linear."""
    if backend() != "onednn":
        return 0
    return give_forwards(model, lambda module: _linear_forward if type(module) is torch.nn.Linear else None)
