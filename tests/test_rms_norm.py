"""The training passes' RMSNorm kernel (speed/rms_norm.cpp, through speed/rms_norm.py): its
values and gradients against a float64 reference, its determinism, the calls it leaves to ATen,
and the norms of a real model switched to it."""

from __future__ import annotations

import pytest
import torch
from conftest import logits_and_grads, under_avx2

from axiom_rl.models.tiny import build_tiny_model
from axiom_rl.speed import rms_norm

needs_kernel = pytest.mark.skipif(
    not rms_norm._available(), reason="no RMSNorm kernel here (no AVX2 or AVX-512, or no C++ library)"
)

# Shapes of the trainer's passes (completion and prompt rows), one row, and last dimensions that are
# not a whole number of vectors or of the kernel's four-vector steps.
SHAPES = [(16, 63, 256), (4, 22, 256), (1, 1, 64), (3, 37), (5, 2, 100), (130, 24)]


def _inputs(shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen) * 3
    weight = torch.randn(shape[-1], generator=gen) + 1
    grad = torch.randn(shape, generator=gen)
    return x, weight, grad


def _run(x, weight, grad, eps=1e-6):
    x, weight = x.clone().requires_grad_(), weight.clone().requires_grad_()
    out = rms_norm.rms_norm(x, weight, eps)
    out.backward(grad)
    return out.detach(), x.grad, weight.grad


@needs_kernel
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_values_and_gradients_match_a_float64_reference(shape):
    x, weight, grad = _inputs(shape)
    got = _run(x, weight, grad)
    xd, wd = x.double().requires_grad_(), weight.double().requires_grad_()
    want = rms_norm.reference(xd, wd, 1e-6)
    want.backward(grad.double())
    for g, w in zip(got, (want.detach(), xd.grad, wd.grad)):
        assert g.shape == w.shape and g.dtype == torch.float32
        # float32 rounding: a few units in the last place of the largest value
        torch.testing.assert_close(g.double(), w, rtol=0, atol=4e-7 * w.abs().max().item())


@needs_kernel
def test_it_differs_from_atens_arithmetic_by_rounding_only_and_is_not_atens_call():
    x, weight, grad = _inputs((16, 63, 256))
    got = _run(x, weight, grad)
    xa, wa = x.clone().requires_grad_(), weight.clone().requires_grad_()
    out = rms_norm.reference(xa, wa, 1e-6)  # transformers' arithmetic, in float32
    out.backward(grad)
    want = (out.detach(), xa.grad, wa.grad)
    for g, w in zip(got, want):  # the weight's gradient sums 1,008 rows: its rounding grows with them
        torch.testing.assert_close(g, w, rtol=0, atol=1e-6 * w.abs().max().item())
    assert not all(torch.equal(g, w) for g, w in zip(got, want))  # the switch did switch


@needs_kernel
def test_results_are_the_same_bits_run_after_run_and_with_one_thread():
    x, weight, grad = _inputs((300, 256))  # several blocks of rows, split over the threads
    first = _run(x, weight, grad)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = _run(x, weight, grad)
    finally:
        torch.set_num_threads(before)
    again = _run(x, weight, grad)
    for a, b, c in zip(first, single, again):
        assert torch.equal(a, b) and torch.equal(a, c)


@needs_kernel
def test_no_grad_and_a_frozen_weight_compute_only_what_is_needed():
    x, weight, grad = _inputs((7, 48))
    full = _run(x, weight, grad)
    with torch.no_grad():
        out = rms_norm.rms_norm(x, weight, 1e-6)
    assert out.grad_fn is None and torch.equal(out, full[0])
    xg = x.clone().requires_grad_()
    rms_norm.rms_norm(xg, weight, 1e-6).backward(grad)  # the weight frozen (a reference model's)
    assert weight.grad is None and torch.equal(xg.grad, full[1])
    # a non-contiguous input computes as its contiguous copy
    wide = torch.cat([x, x], dim=-1)[:, :48]
    assert not wide.is_contiguous()
    with torch.no_grad():
        assert torch.equal(rms_norm.rms_norm(wide, weight, 1e-6), out)


@needs_kernel
def test_the_op_refuses_inputs_it_cannot_compute():
    x, weight, _ = _inputs((4, 32))
    with pytest.raises(RuntimeError, match="weight a contiguous float32 CPU vector"):
        torch.ops.axiom_rl.rms_norm_forward(x, weight[:16], 1e-6)
    with pytest.raises(RuntimeError, match="contiguous float32"):
        torch.ops.axiom_rl.rms_norm_forward(x.double(), weight, 1e-6)


def test_calls_it_cannot_take_run_transformers_arithmetic_bit_for_bit():
    x, weight, _ = _inputs((3, 5, 64))
    for xs, ws in [(x.bfloat16(), weight.bfloat16()), (x.double(), weight.double()), (x, weight[:32])]:
        if xs.shape[-1] != ws.shape[0]:
            with pytest.raises(RuntimeError):  # as transformers' own: the shapes do not broadcast
                rms_norm.rms_norm(xs, ws, 1e-6)
            continue
        assert torch.equal(rms_norm.rms_norm(xs, ws, 1e-6), rms_norm.reference(xs, ws, 1e-6))


def test_a_tiny_qwen2s_norms_switch_and_train_as_before_to_float_rounding():
    model, tokenizer = build_tiny_model("tiny", seed=0)
    twin, _ = build_tiny_model("tiny", seed=0)
    layers = model.config.num_hidden_layers
    assert rms_norm.fuse_rms_norms(model) == 2 * layers + 1  # two a layer, and the final norm
    assert rms_norm.fuse_rms_norms(model) == 0  # already switched: left alone
    (got, got_grads), (want, want_grads) = logits_and_grads((model, twin), tokenizer)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for name, grad in want_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)
    if rms_norm._available():
        assert not torch.equal(got, want)  # the kernel ran


def test_the_trainers_models_have_their_norms_switched():
    from axiom_rl.models.load import load_policy

    policy = load_policy("tiny", tiny_size="nano", finetune="full", dtype="fp32", device="cpu")
    for net in (policy.model, policy.reference):
        norms = [m for m in net.modules() if type(m).__name__ in rms_norm.RMS_NORMS]
        assert norms and all("forward" in vars(m) for m in norms)


@needs_kernel
def test_the_avx2_kernels_match_the_reference_too():
    """With ATen held to AVX2 (as on a CPU without AVX-512) the kernel runs 8 lanes a vector."""
    code = (
        "import torch, tests.test_rms_norm as t\n"
        "for shape in t.SHAPES:\n"
        "    t.test_values_and_gradients_match_a_float64_reference(shape)\n"
        "print('ok', torch.ops.axiom_rl.rms_norm_lanes())\n"
    )
    assert under_avx2(code) == ["ok", "8"]
