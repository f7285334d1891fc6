"""The training passes' attention kernel (speed/attention.cpp, through speed/attention.py): its
outputs and gradients against a float64 reference for every mask the trainer's passes make, its
agreement with SDPA through a real model, its determinism, and the calls it leaves to SDPA."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import logits_and_grads, under_avx2

from axiom_rl.models.tiny import build_tiny_model
from axiom_rl.speed import attention, native

needs_kernel = pytest.mark.skipif(
    not attention.has_kernel(64), reason="no attention kernel here (no AVX2 or AVX-512, or no C++ library)"
)


def _reference(q, k, v, mask, causal, scale):
    """The attention in float64 with explicit probabilities: [B, S, H, D]."""
    q, k, v = (t.double() for t in (q, k, v))
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = q @ k.transpose(-1, -2) * scale
    s, sk = q.shape[2], k.shape[2]
    allowed = mask if mask is not None else torch.ones(s, sk, dtype=torch.bool)
    if mask is None and causal:
        allowed = torch.ones(s, sk, dtype=torch.bool).tril()
    scores = scores.masked_fill(~allowed, -math.inf)
    weights = torch.softmax(scores, -1).nan_to_num(0.0)  # rows with no key: zeros, as SDPA's flash kernel
    return (weights @ v).transpose(1, 2)


def _prompt_and_completion_mask(batch, s, prompt, padded_rows=()):
    """What the trainer's completion pass attends: every prompt key (but a row's left padding)
    and the completion's keys up to the query's own."""
    allowed = torch.ones(batch, s, prompt + s, dtype=torch.bool)
    allowed[:, :, prompt:] = torch.ones(s, s, dtype=torch.bool).tril()
    for row, pad in padded_rows:
        allowed[row, :, :pad] = False
    return allowed[:, None]


def _run(q, k, v, mask, causal, scale, grad):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = attention.attention(q, k, v, mask, causal, scale)
    out.backward(grad)
    return out.detach(), q.grad, k.grad, v.grad


CASES = {
    # batch, heads, kv heads, queries, keys, head size, mask
    "completion pass, left-padded prompts": (5, 4, 2, 37, 37 + 11, 64, "prompt"),
    "prompt pass, causal, no mask": (3, 4, 2, 21, 21, 64, "causal"),
    "one query over a cache, no mask": (4, 4, 2, 1, 30, 64, "none"),
    "many heads per K/V head, head size 16": (2, 8, 1, 9, 9 + 5, 16, "prompt"),
    "as many K/V heads as query heads, head size 128": (2, 3, 3, 17, 17 + 4, 128, "prompt"),
    "a mask shared by the batch": (3, 2, 2, 12, 12, 32, "shared"),
    "rows with no key at all": (2, 2, 1, 6, 6, 32, "empty rows"),
}


def _inputs(case):
    b, h, kvh, s, sk, d, kind = CASES[case]
    gen = torch.Generator().manual_seed(len(case))
    # q as the attention layer gives it: a transposed view of [B, S, H, D]
    q = torch.randn(b, s, h, d, generator=gen).transpose(1, 2)
    k, v = (torch.randn(b, kvh, sk, d, generator=gen) for _ in range(2))
    grad = torch.randn(b, s, h, d, generator=gen)
    mask, causal = None, False
    if kind == "prompt":
        mask = _prompt_and_completion_mask(b, s, sk - s, padded_rows=[(1, 3)])
    elif kind == "causal":
        causal = True
    elif kind == "shared":
        mask = torch.rand(1, 1, s, sk, generator=gen) > 0.3
        mask[..., 0] = True
    elif kind == "empty rows":
        mask = torch.ones(s, sk, dtype=torch.bool).tril().expand(b, 1, s, sk).clone()
        mask[:, :, :2] = False  # the first two queries, left padding, see nothing
    return q, k, v, mask, causal, d**-0.5, grad


@needs_kernel
@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_and_gradients_match_a_float64_reference(case):
    q, k, v, mask, causal, scale, grad = _inputs(case)
    if not attention.has_kernel(q.shape[-1]):
        pytest.skip(f"no kernel for head size {q.shape[-1]} on this CPU")
    out, grad_q, grad_k, grad_v = _run(q, k, v, mask, causal, scale, grad)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    expected = _reference(qd, kd, vd, mask, causal, scale)
    expected.backward(grad.double())
    for got, want in ((out, expected.detach()), (grad_q, qd.grad), (grad_k, kd.grad), (grad_v, vd.grad)):
        assert got.shape == want.shape and got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=2e-5)
    if CASES[case][-1] == "empty rows":
        assert torch.all(out[:, :2] == 0) and torch.all(grad_q[:, :, :2] == 0)


@needs_kernel
def test_results_are_the_same_bits_run_after_run_and_with_one_thread():
    q, k, v, mask, causal, scale, grad = _inputs("completion pass, left-padded prompts")
    first = _run(q, k, v, mask, causal, scale, grad)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = _run(q, k, v, mask, causal, scale, grad)
    finally:
        torch.set_num_threads(before)
    again = _run(q, k, v, mask, causal, scale, grad)
    for a, b, c in zip(first, single, again):
        assert torch.equal(a, b) and torch.equal(a, c)


@needs_kernel
def test_no_grad_calls_give_the_same_output_without_saving_anything():
    q, k, v, mask, causal, scale, grad = _inputs("completion pass, left-padded prompts")
    with torch.no_grad():
        out = attention.attention(q, k, v, mask, causal, scale)
    assert out.grad_fn is None
    assert torch.equal(out, _run(q, k, v, mask, causal, scale, grad)[0])


@needs_kernel
def test_the_op_refuses_inputs_it_cannot_compute():
    q, k, v, mask, _, scale, _ = _inputs("completion pass, left-padded prompts")
    with pytest.raises(RuntimeError, match="boolean mask"):
        torch.ops.axiom_rl.attention_forward(q, k, v, mask[:, :, :, :-1], False, scale)
    with pytest.raises(RuntimeError, match="head size"):
        torch.ops.axiom_rl.attention_forward(q[..., :24], k[..., :24], v[..., :24], None, True, scale)
    with pytest.raises(RuntimeError, match="multiple of the K/V heads"):
        torch.ops.axiom_rl.attention_forward(q[:, :3], k, v, mask, False, scale)


def _twins(seed=0):
    """A tiny Qwen2 on the kernel and the same model on SDPA."""
    model, tokenizer = build_tiny_model("tiny", seed=seed)
    twin, _ = build_tiny_model("tiny", seed=seed)
    assert model.config._attn_implementation == "sdpa"
    assert attention.use_for(model)
    assert model.config._attn_implementation == attention.NAME
    assert twin.config._attn_implementation == "sdpa"
    return model, twin, tokenizer


@needs_kernel
def test_a_model_on_the_kernel_trains_as_on_sdpa_to_float_rounding():
    """Left-padded prompts (the mask SDPA's mask function builds), forward and backward."""
    model, twin, tokenizer = _twins()
    (got, got_grads), (want, want_grads) = logits_and_grads((model, twin), tokenizer)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for name, grad in want_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


@needs_kernel
def test_generation_with_a_cache_runs_on_the_kernel(tmp_path):
    """transformers' own generate (one query over the cache a step) agrees with SDPA's logits, and
    the choice of kernel is not saved with the model."""
    model, twin, tokenizer = _twins(seed=1)
    prompt = tokenizer(["7+8=", "hello"], return_tensors="pt", padding=True)
    kwargs = dict(max_new_tokens=6, do_sample=False, output_logits=True, return_dict_in_generate=True)
    got, want = (net.generate(**prompt, **kwargs) for net in (model, twin))
    torch.testing.assert_close(torch.stack(got.logits), torch.stack(want.logits), rtol=1e-4, atol=1e-4)
    model.save_pretrained(tmp_path)
    assert attention.NAME not in json.dumps(json.loads((tmp_path / "config.json").read_text()))


@needs_kernel
def test_calls_the_kernel_cannot_take_go_to_sdpa_unchanged():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    model, _, _ = _twins()
    layer = model.model.layers[0].self_attn
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 5, 64, generator=gen)
    k, v = (torch.randn(2, 2, 5, 64, generator=gen) for _ in range(2))
    float_mask = torch.zeros(2, 1, 5, 5).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), -math.inf)
    for args, kwargs in [
        ((q, k, v, float_mask), {}),  # an additive float mask
        ((q.bfloat16(), k.bfloat16(), v.bfloat16(), None), {}),  # not float32
        ((q[..., :24], k[..., :24], v[..., :24], None), {}),  # no kernel for the head size
    ]:
        got = attention.attention_forward(layer, *args, **kwargs)[0]
        want = sdpa_attention_forward(layer, *args, **kwargs)[0]
        assert torch.equal(got, want)
    # A model loaded with the kernel off (Speed.attention_kernel) keeps SDPA; on, it is switched.
    from axiom_rl.speed import Speed
    from axiom_rl.speed.install import install_speed_ups

    for on in (False, True):
        model, _ = build_tiny_model("nano")
        install_speed_ups(model, Speed(attention_kernel=on), torch.device("cpu"))
        assert model.config._attn_implementation == (attention.NAME if on else "sdpa")


def test_a_model_on_eager_attention_is_left_alone():
    model, _ = build_tiny_model("nano")
    model.set_attn_implementation("eager")
    assert not attention.use_for(model)
    assert model.config._attn_implementation == "eager"


def test_the_trainers_models_run_the_kernel_on_a_cpu():
    from axiom_rl.models.load import load_policy

    policy = load_policy("tiny", tiny_size="nano", finetune="full", dtype="fp32", device="cpu")
    expected = attention.NAME if native.available() else "sdpa"  # per call, SDPA where no kernel fits
    assert policy.model.config._attn_implementation == expected
    assert policy.reference.config._attn_implementation == expected
    x = torch.tensor([[5, 6, 7, 8]])
    F.cross_entropy(policy.model(x).logits[0], x[0]).backward()  # trains


@needs_kernel
def test_the_avx2_kernels_match_the_reference_too():
    """With ATen held to AVX2 (as on a CPU without AVX-512) the kernel runs 8 lanes a vector."""
    code = (
        "import torch, tests.test_attention as t\n"
        "assert torch.ops.axiom_rl.attention_lanes() == 8 if t.native.available() else True\n"
        "for case in sorted(t.CASES):\n"
        "    t.test_outputs_and_gradients_match_a_float64_reference(case)\n"
        "print('ok', torch.ops.axiom_rl.attention_lanes())\n"
    )
    assert under_avx2(code) == ["ok", "8"]
