"""The fused SiLU kernels (speed/silu_mul.cpp, used by speed/activation_memory.py) compute ATen's
bits: forward and backward, inside ATen's grain and split over threads, with vector tails, for
ATen's AVX-512 and AVX2 kernels; a real model trains to the same numbers with them and without."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from axiom_rl.models.tiny import build_tiny_model
from axiom_rl.speed import activation_memory

needs_kernels = pytest.mark.skipif(
    not activation_memory._fused_available(),
    reason=f"no fused kernel follows ATen's silu here (CPU capability {torch.backends.cpu.get_cpu_capability()}, "
    "or the C++ library was not built)",
)


def _aten(grad, gate, up):
    silu = F.silu(gate)
    return silu * up, torch.ops.aten.silu_backward(grad * up, gate), grad * silu


@needs_kernels
@pytest.mark.parametrize("threads", [None, 1])
@pytest.mark.parametrize("shape", [(16, 63, 688), (4, 22, 688), (7, 13, 333), (1, 1, 5), (2, 0, 8)])
def test_the_kernels_compute_atens_bits(shape, threads):
    """(16, 63, 688) splits over the threads in chunks that are whole pairs of vectors; (7, 13, 333)
    is one chunk with a tail that ATen computes with std::exp; values reach exp's under- and overflow."""
    # the kernels of ATen's own width: 16 lanes for its AVX-512 silu, 8 for its AVX2 one
    assert (
        torch.ops.axiom_rl.silu_kernel() == {"AVX512": 16, "AVX2": 8}[torch.backends.cpu.get_cpu_capability()]
    )
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(sum(shape))
        gate, up, grad = (torch.randn(shape, generator=gen) * 20 for _ in range(3))
        product, grad_gate, grad_up = _aten(grad, gate, up)
        assert torch.equal(torch.ops.axiom_rl.silu_mul(gate, up), product)
        for with_product in (True, False):
            got = torch.ops.axiom_rl.silu_mul_backward(grad, gate, up, with_product)
            assert torch.equal(got[0], grad_gate) and torch.equal(got[1], grad_up)
            assert torch.equal(got[2], product) if with_product else got[2].numel() == 0
    finally:
        torch.set_num_threads(before)


@needs_kernels
@pytest.mark.parametrize("threads", [None, 1])
@pytest.mark.parametrize("rows, inner", [(16, 688), (1, 688), (49, 688), (97, 333), (3, 48)])
def test_the_decode_steps_rows_get_atens_bits(rows, inner, threads):
    """The decode step's silu(gate) * up over the halves of [rows, 2 inner]: ATen iterates the
    strided half row by row, in chunks of the flattened elements; 49 x 688 and 97 x 333 are past
    its grain and odd, so a chunk ends inside a row."""
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        gate_up = torch.randn(rows, 2 * inner, generator=torch.Generator().manual_seed(rows)) * 20
        expected = F.silu(gate_up[:, :inner]) * gate_up[:, inner:]
        assert torch.equal(torch.ops.axiom_rl.silu_mul_rows(gate_up), expected)
    finally:
        torch.set_num_threads(before)


@needs_kernels
def test_atens_avx2_kernels_are_followed_too():
    """Under ATEN_CPU_CAPABILITY=avx2 ATen runs its AVX2 silu (vectors of 8, SLEEF's 8-lane exp): the
    check on loading passes for the AVX2 kernels, and the decode step's rows get those bits too."""
    script = (
        "import torch, warnings; warnings.simplefilter('error')\n"
        "from axiom_rl.speed import activation_memory as am\n"
        "assert torch.backends.cpu.get_cpu_capability() == 'AVX2'\n"
        "assert am._fused_available()\n"
        "x = torch.randn(49, 2 * 688) * 20\n"
        "silu = torch.nn.functional.silu\n"
        "assert torch.equal(torch.ops.axiom_rl.silu_mul_rows(x), silu(x[:, :688]) * x[:, 688:])\n"
        "print(torch.ops.axiom_rl.silu_kernel())\n"
    )
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "8"  # the AVX2 kernels' lanes


@needs_kernels
def test_other_layouts_and_dtypes_take_atens_calls():
    gate, up = torch.randn(40, 30), torch.randn(40, 30)
    assert activation_memory._fused(True, gate, up)
    assert not activation_memory._fused(True, gate.t(), up.t())  # not contiguous
    assert torch.equal(activation_memory.silu_times(gate.t(), up.t()), F.silu(gate.t()) * up.t())
    assert not activation_memory._fused(True, gate.double(), up.double())
    assert not activation_memory._fused(True, gate, up[:, :29].contiguous())
    assert not activation_memory._fused(False, gate, up)  # the setting off
    with pytest.raises(RuntimeError, match="contiguous float32"):
        torch.ops.axiom_rl.silu_mul(gate.t(), up.t())


@needs_kernels
def test_a_model_trains_to_the_same_numbers_with_the_fused_kernels_and_without():
    """A forward and backward of the lean MLP at a size that ATen splits over threads (4 x 150 tokens x
    the micro model's intermediate size), with the kernels and with ATen's calls: the same logits and
    gradients, bit for bit."""
    from axiom_rl.speed.cpu_matmul import route_linear_layers

    model = build_tiny_model("micro", seed=5)[0].train()
    route_linear_layers(model)
    ids = torch.randint(0, 60, (4, 150), generator=torch.Generator().manual_seed(0))
    results = []
    for fused in (True, False):  # Speed.fused_silu on and off
        net = copy.deepcopy(model)
        assert activation_memory.lean_mlp_activations(net, fused=fused) == model.config.num_hidden_layers
        logits = net(input_ids=ids).logits
        logits.log_softmax(-1).mean().backward()
        results.append((logits.detach(), [p.grad for p in net.parameters()]))
    (fused_logits, fused_grads), (aten_logits, aten_grads) = results
    assert 4 * 150 * model.config.intermediate_size > 32768  # over ATen's grain: split over threads
    assert torch.equal(fused_logits, aten_logits)
    assert all(torch.equal(a, b) for a, b in zip(fused_grads, aten_grads))
