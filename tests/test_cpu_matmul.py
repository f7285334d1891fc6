"""float32 linear layers through oneDNN (speed/cpu_matmul.py): the same values and gradients as
F.linear up to float32 rounding, checked against float64; the choice of library; the decode loop
and a training model routed through it."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from axiom_rl.errors import UserError
from axiom_rl.models.tiny import build_tiny_model
from axiom_rl.rollout.fast import teacher_forced_logits
from axiom_rl.speed import cpu_matmul


def _relative_error(value: torch.Tensor, exact: torch.Tensor) -> float:
    return float((value.double() - exact).abs().max() / exact.abs().max())


@pytest.mark.parametrize("shape", [(37, 64), (3, 5, 64)])
def test_linear_values_and_gradients_match_float64(matmul_backend, shape):
    torch.manual_seed(0)
    x = torch.randn(*shape, requires_grad=True)
    w = torch.randn(48, 64, requires_grad=True)
    b = torch.randn(48, requires_grad=True)
    y = cpu_matmul.linear(x, w, b)
    grad = torch.randn_like(y)
    y.backward(grad)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    y64 = F.linear(x64, w64, b64)
    y64.backward(grad.double())
    assert y.dtype == torch.float32 and y.shape == y64.shape
    for ours, exact in ((y, y64), (x.grad, x64.grad), (w.grad, w64.grad), (b.grad, b64.grad)):
        assert _relative_error(ours.detach(), exact.detach()) < 1e-5  # float32 rounding (2^-23 = 1.2e-7)
    assert (type(y.grad_fn).__name__ == "_LinearBackward") == (
        matmul_backend == "onednn"
    )  # the library asked for


@pytest.mark.skipif(not cpu_matmul.onednn_available(), reason="this PyTorch build has no oneDNN")
@pytest.mark.parametrize(
    "rows, outputs, inputs", [(1008, 688, 256), (88, 256, 688), (5, 259, 256), (7, 33, 17)]
)
def test_input_gradient_reads_the_transposed_view_for_the_same_values(monkeypatch, rows, outputs, inputs):
    """input_grad hands oneDNN the weight's transpose as a view; oneDNN lays it out itself, and the
    gradient must be what a contiguous transposed copy gives: bit for bit where oneDNN runs the
    same kernel for both (this project's 2-core Zen 4 hosts, so their seeded runs kept their
    figures), within float32 rounding where it does not (a 16-core Xeon gave other bits)."""
    monkeypatch.setenv(cpu_matmul.ENV, "onednn")
    cpu_matmul.backend.cache_clear()
    try:
        gen = torch.Generator().manual_seed(rows)
        grad, weight = torch.randn(rows, outputs, generator=gen), torch.randn(outputs, inputs, generator=gen)
        got = cpu_matmul.input_grad(grad, weight)
        copied = cpu_matmul._onednn(grad, weight.t().contiguous(), None)
        assert torch.equal(got, copied) or _relative_error(got, copied.double()) < 1e-5
        assert _relative_error(got, grad.double() @ weight.double()) < 1e-5
    finally:
        cpu_matmul.backend.cache_clear()


def test_frozen_weights_and_inputs_get_no_gradient(matmul_backend):
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(6, 8)  # frozen (a reference model, a LoRA base layer)
    cpu_matmul.linear(x, w).sum().backward()
    assert x.grad is not None and w.grad is None
    w.requires_grad_()
    cpu_matmul.linear(x.detach(), w).sum().backward()
    assert w.grad is not None


def test_only_float32_on_the_cpu_goes_through_onednn(matmul_backend):
    onednn = matmul_backend == "onednn"
    assert cpu_matmul.applies(torch.ones(2, 2)) == onednn
    assert not cpu_matmul.applies(torch.ones(2, 2, dtype=torch.float64))
    assert not cpu_matmul.applies(torch.ones(2, 2, dtype=torch.bfloat16))
    x, w = torch.randn(3, 8, dtype=torch.bfloat16), torch.randn(5, 8, dtype=torch.bfloat16)
    assert torch.equal(cpu_matmul.linear(x, w), F.linear(x, w))


def test_the_library_is_chosen_by_vendor_or_the_environment(monkeypatch):
    import platform

    monkeypatch.setenv(cpu_matmul.ENV, "mkl")
    cpu_matmul.backend.cache_clear()
    with pytest.raises(UserError, match="use one of onednn, default"):
        cpu_matmul.backend()
    monkeypatch.delenv(cpu_matmul.ENV)
    cpu_matmul.backend.cache_clear()
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    not_intel = cpu_matmul.cpu_vendor() not in ("GenuineIntel", "")
    expected = "onednn" if x86 and not_intel and cpu_matmul.onednn_available() else "default"
    assert cpu_matmul.backend() == expected
    cpu_matmul.backend.cache_clear()


def test_a_routed_model_trains_like_the_plain_one(matmul_backend):
    model = build_tiny_model("micro", seed=1)[0].train()
    routed = copy.deepcopy(model)
    count = cpu_matmul.route_linear_layers(routed)
    linears = sum(type(m) is torch.nn.Linear for m in model.modules())
    assert count == (linears if matmul_backend == "onednn" else 0)
    assert cpu_matmul.route_linear_layers(routed) == 0  # already routed: left as it is
    exact = copy.deepcopy(model).double()
    ids = torch.randint(0, 60, (3, 19))
    results = []
    for net in (model, routed, exact):
        logits = net(input_ids=ids).logits
        logits.log_softmax(-1).mean().backward()
        results.append((logits.detach(), {n: p.grad for n, p in net.named_parameters()}))
    (plain, plain_grads), (ours, our_grads), (f64, f64_grads) = results
    # as close to float64 as the plain float32 model is (a few times its error, not a different model)
    assert _relative_error(ours, f64) < 4 * _relative_error(plain, f64) + 1e-6
    for name, g in our_grads.items():
        assert (
            _relative_error(g, f64_grads[name])
            < 4 * _relative_error(plain_grads[name], f64_grads[name]) + 1e-5
        )


def test_the_frozen_reference_packed_once_gives_the_same_log_probs_bit_for_bit(matmul_backend):
    """Full fine-tuning's reference has its weights laid out for oneDNN at load, in place of the
    plain ones; its log-probs are the policy's (the same weights, unpacked) to the bit."""
    from axiom_rl.models.load import load_policy
    from axiom_rl.train.batch import build_batch, completion_logprobs

    policy = load_policy("tiny", tiny_size="micro", finetune="full", dtype="fp32", device="cpu", seed=3)
    linears = [m for m in policy.reference.modules() if type(m) is torch.nn.Linear]
    packed = [m for m in linears if cpu_matmul.packed(m)]
    assert len(packed) == (len(linears) if matmul_backend == "onednn" else 0)
    assert all(m.weight is None for m in packed)  # no second copy of the weights
    assert not any(cpu_matmul.packed(m) for m in policy.model.modules())  # the trained model keeps its own
    gen = torch.Generator().manual_seed(0)
    prompts = [row for row in torch.randint(3, 60, (3, 9), generator=gen).tolist() for _ in range(2)]
    completions = torch.randint(3, 60, (6, 12), generator=gen).tolist()
    batch = build_batch(prompts, completions, policy.tokenizer.pad_token_id, policy.device)
    with torch.no_grad():
        for share in (True, False):
            ours = completion_logprobs(policy.reference, batch, share_prompts=share)[0]
            plain = completion_logprobs(policy.model.eval(), batch, share_prompts=share)[0]
            assert torch.equal(ours, plain), share


def test_packing_leaves_shared_and_trained_weights_as_they_are(matmul_backend):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval().requires_grad_(False)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    trained = model.model.layers[0].mlp.down_proj
    trained.weight.requires_grad_(True)
    ids = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        before = model(input_ids=ids).logits
    count = cpu_matmul.pack_frozen_linear_layers(model)
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    assert count == (len(linears) - 2 if matmul_backend == "onednn" else 0)  # not lm_head, not down_proj
    assert not cpu_matmul.packed(model.lm_head) and model.lm_head.weight is model.model.embed_tokens.weight
    assert not cpu_matmul.packed(trained) and trained.weight.requires_grad
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, before)
    assert cpu_matmul.pack_frozen_linear_layers(model) == 0  # packed once


def test_the_decode_loop_with_packed_weights_computes_the_model(matmul_backend):
    """The loop packs its weights for oneDNN once per rollout; its logits stay those of the model."""
    from tests.test_fast_rollout import TEXTS, hf_logits, model64, ragged

    model, tok = model64(0)
    ids, real = ragged(tok, TEXTS)
    exact = hf_logits(model, ids, real)[real]
    ours = teacher_forced_logits(model.float(), ids, real)[real]
    assert ours.dtype == torch.float32
    assert _relative_error(ours, exact) < 1e-5


def test_a_bad_library_name_stops_the_cli_before_anything_is_written(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, cpu_matmul.ENV: "mkl"}
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "axiom_rl", "train", "--model", "tiny", "--tiny-size", "nano", "--steps", "1",
         "--output-dir", str(out)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"axiom-rl: error: {cpu_matmul.ENV}='mkl': use one of onednn, default"
    ]
    assert not out.exists()
