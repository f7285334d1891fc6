"""The training passes' rotary embedding kernel (speed/rotary.cpp, through speed/rotary.py): the
same bits as transformers' apply_rotary_pos_emb and autograd's backward, at the layouts the
attention classes pass, through a real model, and only where it is switched on."""

from __future__ import annotations

import pytest
import torch
import transformers.models.qwen2.modeling_qwen2 as modeling_qwen2
from conftest import logits_and_grads

from axiom_rl.models.tiny import build_tiny_model
from axiom_rl.speed import native, rotary

needs_kernel = pytest.mark.skipif(not native.available(), reason="no C++ library here")
ORIGINAL = modeling_qwen2.apply_rotary_pos_emb


def _inputs(batch=3, heads=4, kv_heads=2, positions=7, dim=64, cos_rows=None, seed=0):
    """q and k as the attention classes make them (a projection viewed [B, S, H, D], transposed),
    cos and sin [B or 1, S, D], and gradients for the two outputs."""
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randn(batch, positions, heads, dim, generator=gen) * 30).transpose(1, 2)
    k = (torch.randn(batch, positions, kv_heads, dim, generator=gen) * 30).transpose(1, 2)
    cos, sin = (torch.randn(cos_rows or batch, positions, dim, generator=gen) for _ in range(2))
    grads = (
        torch.randn(batch, heads, positions, dim, generator=gen),
        torch.randn(batch, kv_heads, positions, dim, generator=gen),
    )
    return q, k, cos, sin, grads


def _run(fn, q, k, cos, sin, grads):
    q, k = (t.detach().requires_grad_() for t in (q, k))
    outs = fn(q, k, cos, sin)
    torch.autograd.backward(outs, grads)
    return (*(o.detach() for o in outs), q.grad, k.grad)


@needs_kernel
@pytest.mark.parametrize(
    "shape",
    [dict(), dict(cos_rows=1), dict(batch=16, positions=63), dict(dim=128, heads=2, kv_heads=1), dict(dim=6)],
    ids=["trainer", "one cos row", "step shapes", "head size 128", "head size 6"],
)
def test_values_and_gradients_are_transformers_bits(shape):
    args = _inputs(**shape)
    got = _run(rotary.rotary(ORIGINAL), *args)
    want = _run(ORIGINAL, *args)
    for g, w in zip(got, want):
        assert g.shape == w.shape and torch.equal(g, w)
    assert got[0].stride() == want[0].stride()  # laid out as ATen's element-wise result


@needs_kernel
def test_contiguous_inputs_and_no_grad_give_the_same_bits():
    q, k, cos, sin, grads = _inputs()
    q, k = q.contiguous(), k.contiguous()
    assert all(
        map(
            torch.equal,
            _run(rotary.rotary(ORIGINAL), q, k, cos, sin, grads),
            _run(ORIGINAL, q, k, cos, sin, grads),
        )
    )
    with torch.no_grad():
        out = rotary.rotary(ORIGINAL)(q, k, cos, sin)
    assert out[0].grad_fn is None and all(map(torch.equal, out, ORIGINAL(q, k, cos, sin)))


def test_calls_it_cannot_take_go_to_the_original():
    calls = []

    def original(*args):
        calls.append(args)
        return ORIGINAL(*args)

    fused = rotary.rotary(original)
    q, k, cos, sin, _ = _inputs()
    for args in [
        (q.double(), k.double(), cos.double(), sin.double(), 1),  # not float32
        (q.transpose(1, 2), k.transpose(1, 2), cos, sin, 2),  # another layout
        (q, k, cos[:, :, :32], sin[:, :, :32], 1),  # partial rotary: ATen's broadcasting error, as before
    ]:
        try:
            want = ORIGINAL(*args)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                fused(*args)
            continue
        assert all(map(torch.equal, fused(*args), want))
    assert len(calls) == 3


@needs_kernel
def test_a_tiny_qwen2_gives_the_same_bits_and_the_module_is_left_alone():
    model, tokenizer = build_tiny_model("tiny", seed=0)
    twin, _ = build_tiny_model("tiny", seed=0)
    assert rotary.fuse_rotary(model) == model.config.num_hidden_layers
    assert rotary.fuse_rotary(model) == 0  # already switched: left alone
    assert modeling_qwen2.apply_rotary_pos_emb is ORIGINAL  # other models keep transformers' own
    assert "forward" not in vars(twin.model.layers[0].self_attn)
    (got, got_grads), (want, want_grads) = logits_and_grads((model, twin), tokenizer)
    assert torch.equal(got, want)
    assert all(torch.equal(got_grads[name], grad) for name, grad in want_grads.items())
    batch = tokenizer(["12+7=", "a longer prompt: 3*4=", "x"], return_tensors="pt", padding=True)
    generated = [
        net.generate(**batch, max_new_tokens=5, do_sample=False) for net in (model, twin)
    ]  # with a cache, one position a step
    assert torch.equal(*generated)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """A stand-in with other arithmetic than transformers' (the name the check looks up)."""
    return q * cos, k * sin


class OtherAttention(torch.nn.Module):
    def forward(self, q, k, cos, sin):
        return apply_rotary_pos_emb(q, k, cos, sin)


def test_a_class_whose_kernel_bits_differ_is_left_alone(monkeypatch):
    """The check before switching refuses a class whose function computes otherwise, with a warning."""
    if native.available():
        with pytest.warns(UserWarning, match="differs"):
            assert rotary._forward_for(OtherAttention) is None
    monkeypatch.setattr(rotary, "ATTENTIONS", ("OtherAttention",))
    assert rotary.fuse_rotary(torch.nn.Sequential(OtherAttention())) == 0


def test_the_trainers_models_have_their_attention_switched():
    from axiom_rl.models.load import load_policy

    policy = load_policy("tiny", tiny_size="nano", finetune="full", dtype="fp32", device="cpu")
    for net in (policy.model, policy.reference):
        layers = [m for m in net.modules() if type(m).__name__ in rotary.ATTENTIONS]
        assert layers and all(("forward" in vars(m)) == native.available() for m in layers)
