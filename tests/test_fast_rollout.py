"""The fast decode loop computes what the transformers model computes (checked in float64)."""

from __future__ import annotations

import json
import string
import subprocess
import sys
import warnings

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from axiom_rl.models.load import apply_lora
from axiom_rl.models.tiny import TinySize, build_char_tokenizer, build_tiny_model, tiny_config
from axiom_rl.rollout import fast
from axiom_rl.rollout.fast import FastBackend, _StopCheck, supports, teacher_forced_logits
from axiom_rl.rollout.hf import HFBackend
from axiom_rl.speed import Speed
from axiom_rl.train.batch import build_batch

GQA = TinySize(64, 2, 4, 2, 128)  # 4 query heads sharing 2 key/value heads


def model64(seed=0, size=GQA):
    tok = build_char_tokenizer()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        from transformers import Qwen2ForCausalLM

        model = Qwen2ForCausalLM(tiny_config(size, vocab_size=len(tok))).double().eval()
    return model, tok


def other_architecture(arch: str, seed: int = 0, **overrides):
    """A float64 model of another architecture the loop computes the same way as Qwen2 (GQA,
    untied head unless asked), with the byte-level tokenizer."""
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    tok = build_char_tokenizer()
    config_class, model_class = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "mistral": (MistralConfig, MistralForCausalLM),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    }[arch]
    kwargs = dict(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False, pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    if arch == "mistral":
        kwargs["sliding_window"] = None
    kwargs.update(overrides)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = model_class(config_class(**kwargs)).double().eval()
    return model, tok


ARCHITECTURES = [
    pytest.param(lambda seed: model64(seed), id="qwen2"),
    pytest.param(lambda seed: other_architecture("llama", seed), id="llama"),
    pytest.param(lambda seed: other_architecture("llama", seed, tie_word_embeddings=True), id="llama-tied"),
    pytest.param(lambda seed: other_architecture("mistral", seed), id="mistral"),
    # heads of 32 against hidden 64 / 4 heads: q_proj's width is not the hidden size
    pytest.param(lambda seed: other_architecture("qwen3", seed, head_dim=32), id="qwen3"),
]


def hf_logits(model, ids, real):
    positions = (real.long().cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=real.long(), position_ids=positions).logits


def ragged(tok, texts):
    rows = tok(texts, add_special_tokens=False)["input_ids"]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tok.pad_token_id)
    real = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
        real[i, width - len(r) :] = True
    return ids, real


TEXTS = ["3 5 7 -> 22\n<answer>", "12 -> 1\n<a", "hello world, a longer prompt than the others"]


def test_supports_qwen2_qwen3_llama_and_mistral_with_or_without_lora_and_nothing_else():
    model, _ = build_tiny_model("nano")
    assert supports(model)
    assert supports(apply_lora(model, 4, 8, 0.0, "all-linear"))
    assert all(supports(other_architecture(arch)[0]) for arch in ("llama", "mistral", "qwen3"))
    assert not supports(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50)))
    # What the loop does not compute: biases where Qwen2 has none, a sliding window, scaled rotary.
    assert not supports(other_architecture("llama", attention_bias=True)[0])
    assert not supports(other_architecture("llama", mlp_bias=True)[0])
    assert not supports(other_architecture("mistral", sliding_window=16)[0])
    yarn = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    assert not supports(other_architecture("llama", rope_parameters=yarn)[0])


@pytest.mark.parametrize("build", ARCHITECTURES)
def test_teacher_forced_logits_equal_the_transformers_forward(build):
    model, tok = build(0)
    ids, real = ragged(tok, TEXTS)
    ours = teacher_forced_logits(model, ids, real)
    theirs = hf_logits(model, ids, real)
    assert torch.allclose(ours[real], theirs[real], atol=1e-9)


@pytest.mark.parametrize("build", ARCHITECTURES)
def test_bfloat16_logits_stay_close_to_the_transformers_forward(build):
    model, tok = build(0)
    model = model.to(torch.bfloat16)
    ids, real = ragged(tok, TEXTS)
    ours, theirs = teacher_forced_logits(model, ids, real)[real], hf_logits(model, ids, real)[real]
    assert (ours.float() - theirs.float()).abs().max() < 0.02  # bfloat16 rounding, not a different model


@pytest.mark.parametrize("build", ARCHITECTURES)
def test_lora_is_folded_into_the_weights_exactly(build):
    model, tok = build(1)
    peft_model = apply_lora(model, 4, 8, 0.0, "all-linear")
    with torch.no_grad():  # non-zero adapters, so the fold matters
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.05)
    ids, real = ragged(tok, TEXTS)
    assert torch.allclose(
        teacher_forced_logits(peft_model, ids, real)[real], hf_logits(peft_model, ids, real)[real], atol=1e-9
    )
    with peft_model.disable_adapter():  # the reference: adapters off
        assert torch.allclose(
            teacher_forced_logits(peft_model, ids, real)[real],
            hf_logits(peft_model, ids, real)[real],
            atol=1e-9,
        )


@pytest.mark.parametrize("build", ARCHITECTURES)
def test_greedy_decoding_matches_transformers_generate(build):
    model, tok = build(2)
    args = (model, tok, TEXTS, 2, 12, 0.0, 1.0, [], 512)
    fast, slow = FastBackend().generate(*args), HFBackend().generate(*args)
    assert fast.completion_ids == slow.completion_ids and fast.texts == slow.texts


def test_left_padding_does_not_change_a_prompt_s_completion():
    model, tok = model64(seed=3)
    together = FastBackend().generate(model, tok, TEXTS, 1, 10, 0.0, 1.0, [], 512)
    for i, text in enumerate(TEXTS):
        alone = FastBackend().generate(model, tok, [text], 1, 10, 0.0, 1.0, [], 512)
        assert alone.completion_ids[0] == together.completion_ids[i]


def test_sampling_is_seeded_and_rows_of_a_prompt_differ():
    model, tok = build_tiny_model("nano", seed=4)
    torch.manual_seed(7)
    a = FastBackend().generate(model, tok, TEXTS[:2], 4, 16, 1.0, 0.9, [], 512)
    torch.manual_seed(7)
    b = FastBackend().generate(model, tok, TEXTS[:2], 4, 16, 1.0, 0.9, [], 512)
    assert a.completion_ids == b.completion_ids
    assert len({tuple(c) for c in a.completion_ids[:4]}) > 1
    assert a.prompt_ids[0] == a.prompt_ids[3] != a.prompt_ids[4]


def test_forced_length_and_log_probs_of_the_samples():
    model, tok = build_tiny_model("nano", seed=5)
    torch.manual_seed(0)
    rollout = FastBackend(min_new_tokens=16).generate(model, tok, TEXTS, 2, 16, 1.0, 1.0, [], 512)
    assert all(len(c) == 16 and tok.eos_token_id not in c for c in rollout.completion_ids)
    batch = build_batch(rollout.prompt_ids, rollout.completion_ids, tok.pad_token_id, torch.device("cpu"))
    assert batch.completion_mask.sum() == 6 * 16


@pytest.mark.parametrize("backend", [FastBackend, HFBackend])
def test_each_row_is_reported_once_with_its_final_text_and_early_rows_before_the_rest(backend):
    """on_finished (the trainer's overlap_verification): every row once, with the text the rollout
    returns; the fast backend reports a row that stops early while the others still decode."""
    model, tok = build_tiny_model("nano", seed=6)
    reported: list[tuple[int, str]] = []
    torch.manual_seed(3)
    # every letter a stop string: rows of a random model stop at different lengths
    rollout = backend().generate(
        model,
        tok,
        TEXTS,
        3,
        24,
        1.0,
        1.0,
        list(string.ascii_letters),
        512,
        on_finished=lambda i, t: reported.append((i, t)),
    )
    assert sorted(reported) == list(enumerate(rollout.texts))
    lengths = [len(rollout.completion_ids[i]) for i, _ in reported]
    assert len(set(lengths)) > 1  # some rows stopped earlier than others
    if backend is FastBackend:  # in the order the rows ended, not in row order as at the end
        assert lengths == sorted(lengths) and [i for i, _ in reported] != list(range(len(rollout.texts)))
    else:  # transformers' generate returns every row at once: reported in row order at the end
        assert [i for i, _ in reported] == list(range(len(rollout.texts)))


def decoded_both_ways(model, tok, device, compiled=True):
    """The same rollout with the static decode step (a CUDA graph on CUDA; `compiled`:
    Speed.compile_decode) and the eager one."""
    model = model.to(device)
    out = []
    for decode in ("static", "eager"):
        backend = FastBackend(speed=Speed(compile_decode=compiled))
        backend.decode = decode
        torch.manual_seed(11)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a failed CUDA graph capture warns: fail instead
            # every letter a stop string: rows of a random model stop at different lengths
            out.append(backend.generate(model, tok, TEXTS, 3, 24, 1.0, 0.9, list(string.ascii_letters), 512))
    return out


@pytest.mark.parametrize("build", ARCHITECTURES)
def test_the_static_decode_step_samples_what_the_eager_one_does(build):
    model, tok = build(6)
    static, eager = decoded_both_ways(model, tok, "cpu")
    assert static.completion_ids == eager.completion_ids and static.finished == eager.finished
    assert len({len(c) for c in static.completion_ids}) > 1  # rows stopped at different lengths


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on a GPU machine)")
@pytest.mark.parametrize("compiled", [False, True], ids=["plain", "compiled"])
@pytest.mark.parametrize("build", ARCHITECTURES)
def test_the_cuda_graph_decode_samples_what_the_eager_loop_does(build, compiled):
    """Plain, the same kernels replayed: the same bits. Compiled, fused element-wise work rounds
    differently (float32 here), so a token could differ only where a uniform draw falls within
    that rounding of the edge between two tokens, which no draw of this seed does. A failed
    compile or capture warns, which fails the test."""
    model, tok = build(6)
    static, eager = decoded_both_ways(model, tok, "cuda", compiled)
    assert static.completion_ids == eager.completion_ids and static.finished == eager.finished
    assert len({len(c) for c in static.completion_ids}) > 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on a GPU machine)")
def test_a_decode_step_that_does_not_compile_runs_plain_and_says_so(monkeypatch):
    """One warning, then the plain ops for the rest of the process (no compile tried again)."""

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here\nmore detail")

    monkeypatch.setattr(fast, "_compiled_ops", lambda: fast.LayerOps(qkv=broken))
    model, tok = build_tiny_model("nano", seed=5)
    model = model.cuda()
    backend = FastBackend()
    torch.manual_seed(2)
    with pytest.warns(
        UserWarning,
        match=r"decode step not compiled: torch.compile failed \(RuntimeError: no compiler here\)",
    ):
        fell_back = backend.generate(model, tok, TEXTS, 2, 12, 1.0, 1.0, [], 512)
    torch.manual_seed(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the next rollout does not try again: no second warning
        again = backend.generate(model, tok, TEXTS, 2, 12, 1.0, 1.0, [], 512)
    torch.manual_seed(2)
    plain = FastBackend(speed=Speed(compile_decode=False)).generate(
        model, tok, TEXTS, 2, 12, 1.0, 1.0, [], 512
    )
    assert fell_back.completion_ids == again.completion_ids == plain.completion_ids


COMPILED_AND_PLAIN_PASSES = """
import contextlib, json, tempfile, warnings
from pathlib import Path
import torch
import torch._inductor.config
import torch.nn.functional as F
from axiom_rl.models.tiny import build_tiny_model
from axiom_rl.rollout import fast, step
from axiom_rl.speed import native
# torch.compile builds C++ for a CPU (a GPU's step compiles Triton kernels instead) and, as its
# extensions, leaves its library path unquoted: where torch lies under a path with a space, the
# link is made in this process against a link without spaces (native.torch_lib_without_spaces).
torch._inductor.config.compile_threads = 1
stack = contextlib.ExitStack()
stack.enter_context(native.torch_lib_without_spaces(Path(stack.enter_context(tempfile.TemporaryDirectory()))))
model, _ = build_tiny_model("nano", seed=7)
w = step.Weights(model, packing=(F.linear, lambda *parts: torch.cat(parts)))  # F.linear, as on a GPU
ids = torch.randint(3, 200, (3, 9), generator=torch.Generator().manual_seed(0))
positions = torch.arange(9).repeat(3, 1)
cos, sin = w.rope(16, ids.device, torch.float32)
shape = (len(w.layers), 3, w.kv_heads, 16, w.head_dim)
causal = torch.ones((9, 9), dtype=torch.bool).tril().view(1, 1, 9, 9).expand(3, 1, 9, 9)
bias = torch.zeros((3, 1, 1, 10))
got = []
torch.inference_mode().__enter__()  # as FastBackend.generate
for ops in (step.LayerOps(), fast._compiled_ops()):
    cache_k, cache_v = torch.zeros(shape), torch.zeros(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as a test's filter: the first compile must not fail on torch's own warnings
        with fast.compiler_warnings_quiet():
            prefill = step.forward(w, ids, positions, cache_k, cache_v, 0, causal, cos, sin, True, ops)
            decoded = step.forward(w, ids[:, :1], positions[:, -1:] + 1, cache_k, cache_v, 9, bias, cos, sin, ops=ops)
    got.append((prefill, decoded, cache_k))
print(json.dumps([float((c - p).abs().max() / p.abs().max()) for p, c in zip(*got)]))
"""


@pytest.mark.slow
def test_the_compiled_pieces_of_a_forward_pass_compute_what_the_plain_ones_do():
    """What a GPU's decode step compiles (torch.compile compiles for the CPU too), in a fresh
    process so that Inductor is first imported there: every piece compiles whole (fullgraph: no
    graph break) with warnings as errors, and gives the plain pass's logits and cache to float32
    rounding, prefill and a token step alike."""
    proc = subprocess.run(
        [sys.executable, "-c", COMPILED_AND_PLAIN_PASSES], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(errors) == 3 and max(errors) < 1e-5


def test_stop_strings_end_a_row_at_the_token_that_completes_them():
    tok = build_char_tokenizer()
    check = _StopCheck(tok, ["</answer>"])
    text = "1+2</answer>xyz"
    out = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    hits = [bool(check(out, t, torch.zeros(1, dtype=torch.bool))[0]) for t in range(out.shape[1])]
    assert hits.index(True) == len("1+2</answer>") - 1


def test_the_trainer_uses_it_and_training_still_works(tmp_path):
    from axiom_rl.config import TrainConfig
    from axiom_rl.train.grpo import train

    cfg = TrainConfig(
        tiny_size="nano",
        tasks=["countdown"],
        steps=2,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=8,
        output_dir=str(tmp_path / "r"),
        save_every=0,
    )
    result = train(cfg, say=lambda m: None)
    assert "rollout backend fast" in (tmp_path / "r/train.log").read_text()
    assert len(result.metrics) == 2
