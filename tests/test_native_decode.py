"""The C++ decode step (speed/native.py, decode_step.cpp) computes the Python step's logits:
bit for bit with ATen's calls, to float32 rounding with its own kernels, with each
library for the linear layers (its own kernel, oneDNN, PyTorch's); a rollout samples the same
tokens with either step; its linear kernel agrees with F.linear, with the same bits on AVX2 and
AVX-512 and with any number of threads; a machine that cannot build it decodes in Python and
says so."""

from __future__ import annotations

import json
import os
import shutil
import string
import subprocess
import sys

import pytest
import torch
from test_fast_rollout import TEXTS, model64, other_architecture

from axiom_rl.errors import UserError
from axiom_rl.models.tiny import build_tiny_model
from axiom_rl.rollout import fast
from axiom_rl.rollout import step as python_step
from axiom_rl.speed import Speed, cpu_matmul, native, replay

needs_compiler = pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "c++")) is None,
    reason="no C++ compiler on PATH: the C++ decode step cannot be built on this machine",
)


def panel_kernel() -> bool:
    """Whether decode_step.cpp's linear kernel runs here (built, and an x86-64 CPU with AVX2 and FMA)."""
    return native.op() is not None and torch.ops.axiom_rl.panel_kernel()


def skip_without_panel_kernel() -> None:
    if not panel_kernel():
        pytest.skip("the C++ step's linear kernel does not run here (no build, or no AVX2 and FMA)")


@pytest.fixture(params=["panels", "onednn", "default"])
def linear_library(request, monkeypatch):
    """What runs the rollout's float32 linear layers: decode_step.cpp's own kernel or oneDNN
    (weights packed per rollout for either), or PyTorch's own F.linear."""
    if request.param != "default" and not cpu_matmul.onednn_available():
        pytest.skip("this PyTorch build has no oneDNN, so the rollout keeps F.linear")
    if request.param == "panels":
        skip_without_panel_kernel()
    monkeypatch.setenv(cpu_matmul.ENV, "default" if request.param == "default" else "onednn")
    cpu_matmul.backend.cache_clear()
    yield request.param
    cpu_matmul.backend.cache_clear()


def speed_of(linear_library: str = "panels", own_kernels: bool = True) -> Speed:
    """The decode loop's settings for a fixture's choices: the C++ step's own linear kernel only
    for "panels" (else oneDNN's or F.linear, as the environment chose), its own loops or ATen's."""
    return Speed(decode_linear_kernel=linear_library == "panels", decode_own_kernels=own_kernels)


LINEAR_OF = {
    "panels": native.linear_panels,
    "onednn": cpu_matmul.linear_packed,
    "default": torch.nn.functional.linear,
}


def float32_model(arch: str, seed: int):
    model, tok = model64(seed) if arch == "qwen2" else other_architecture(arch, seed)
    return model.float(), tok


@pytest.fixture(params=[False, True], ids=["aten-ops", "own-kernels"])
def own_kernels(request):
    """The C++ step with its own attention and element-wise loops, or with ATen's calls."""
    return request.param


@needs_compiler
@pytest.mark.parametrize("arch", ["qwen2", "llama"])  # q/k/v biases, and none
def test_the_cpp_step_computes_the_python_step_s_logits(arch, linear_library, own_kernels):
    """With ATen's calls, the same bits; with the step's own kernels, the same to float32 rounding."""
    model, _ = float32_model(arch, seed=1)
    with torch.inference_mode():
        w = fast.weights_for(model, speed_of(linear_library, own_kernels))
        assert w.linear is LINEAR_OF[linear_library]
        step = native.step_for(w, own_kernels)
        assert step is not None
        n, prompt, new = 5, 7, 6
        total = prompt + new
        gen = torch.Generator().manual_seed(2)
        caches = torch.randn((2, len(w.layers), n, w.kv_heads, total, w.head_dim), generator=gen)
        python_k, python_v = caches[0].clone(), caches[1].clone()
        native_k, native_v = caches[0].clone(), caches[1].clone()
        allowed = torch.zeros((n, total))
        allowed[1, :3] = float("-inf")  # rows with left padding
        allowed[4, :6] = float("-inf")
        cos, sin = w.rope(total, torch.device("cpu"), torch.float32)
        positions = torch.tensor([[7], [4], [7], [7], [1]])
        tokens = torch.randint(0, w.embed.shape[0], (n, 1), generator=gen)
        same = torch.equal if not own_kernels else lambda a, b: torch.allclose(a, b, rtol=1e-5, atol=1e-6)
        for slot in range(prompt, total):
            mask = allowed[:, : slot + 1].view(n, 1, 1, slot + 1)
            expected = python_step.forward(w, tokens, positions, python_k, python_v, slot, mask, cos, sin)
            got = step(tokens, positions, native_k, native_v, slot, mask, cos, sin)
            assert same(got, expected), f"slot {slot}: {(got - expected).abs().max().item():.3g}"
            assert same(native_k, python_k) and same(native_v, python_v)
            assert torch.equal(got.argmax(-1), expected.argmax(-1))
            tokens, positions = expected.argmax(-1, keepdim=True), positions + 1
            python_k.copy_(native_k)  # each slot from the same caches, so that differences do not add up
            python_v.copy_(native_v)


def one_step_inputs(w, n=3, slot=5):
    """Arguments of a decode step at `slot` for weights `w`: ids, positions, caches, mask, tables."""
    gen = torch.Generator().manual_seed(4)
    cache_k, cache_v = torch.randn((2, len(w.layers), n, w.kv_heads, slot + 1, w.head_dim), generator=gen)
    cos, sin = w.rope(slot + 1, torch.device("cpu"), torch.float32)
    ids = torch.randint(0, w.embed.shape[0], (n, 1), generator=gen)
    return ids, torch.full((n, 1), slot), cache_k, cache_v, slot, torch.zeros((n, 1, 1, slot + 1)), cos, sin


@needs_compiler
def test_the_step_s_own_kernels_refuse_a_token_or_position_out_of_range():
    """They index the embedding and the rotary tables themselves (no ATen call checks it for them)."""
    model, _ = float32_model("qwen2", seed=1)
    with torch.inference_mode():
        w = fast.weights_for(model)
        step = native._bind(native.op(), w, own_kernels=True)
        ids, positions, *rest = one_step_inputs(w)
        with pytest.raises(RuntimeError, match=f"token id {w.embed.shape[0]} out of range"):
            step(torch.full_like(ids, w.embed.shape[0]), positions, *rest)
        with pytest.raises(RuntimeError, match="position 6 beyond the rotary tables"):
            step(ids, positions + 1, *rest)


@needs_compiler
@pytest.mark.parametrize("own_kernels", [True, False], ids=["own-kernels", "aten-ops"])
def test_rows_of_one_prompt_read_its_slots_from_the_first_row_with_the_same_bits(own_kernels):
    """A rollout's G rows of a prompt hold the same first slots (the prompt's keys and values,
    copied to each): the step's attention kernel reads them from each run's first row, and gives
    the bits it gives reading every row's own. Garbage in the other rows' copies shows it reads
    no other (ATen's calls read each row's own copy, which then differ)."""
    model, _ = float32_model("qwen2", seed=1)
    with torch.inference_mode():
        w = fast.weights_for(model)
        step = native._bind(native.op(), w, own_kernels=own_kernels)
        g, prompts, prompt_slots, slot = 3, 2, 4, 6
        ids, positions, cache_k, cache_v, _, mask, cos, sin = one_step_inputs(w, n=g * prompts, slot=slot)
        for cache in (cache_k, cache_v):  # each prompt's slots copied to its rows
            view = cache.view(len(w.layers), prompts, g, w.kv_heads, slot + 1, w.head_dim)
            view[:, :, 1:, :, :prompt_slots] = view[:, :, :1, :, :prompt_slots]
        copied = step(ids, positions, cache_k.clone(), cache_v.clone(), slot, mask, cos, sin)
        shared = step(
            ids, positions, cache_k.clone(), cache_v.clone(), slot, mask, cos, sin,
            rows_per_prompt=g, prompt_slots=prompt_slots,
        )  # fmt: skip
        assert torch.equal(shared, copied)
        for cache in (cache_k, cache_v):  # the other rows' copies spoiled
            cache.view(len(w.layers), prompts, g, w.kv_heads, slot + 1, w.head_dim)[
                :, :, 1:, :, :prompt_slots
            ] = 1e3
        spoiled = step(
            ids, positions, cache_k.clone(), cache_v.clone(), slot, mask, cos, sin,
            rows_per_prompt=g, prompt_slots=prompt_slots,
        )  # fmt: skip
        assert torch.equal(spoiled, copied) == own_kernels
        assert torch.equal(spoiled[::g], copied[::g])  # each prompt's first row reads its own either way
        with pytest.raises(RuntimeError, match="rows_per_prompt must divide the rows"):
            step(ids, positions, cache_k, cache_v, slot, mask, cos, sin, rows_per_prompt=4, prompt_slots=2)
        past_the_prompt = {"rows_per_prompt": g, "prompt_slots": slot + 1}  # would share the slot written
        with pytest.raises(RuntimeError, match="come before the slot written"):
            step(ids, positions, cache_k, cache_v, slot, mask, cos, sin, **past_the_prompt)


@needs_compiler
@pytest.mark.parametrize(
    "n,rows_per_prompt", [(8, 4), (8, 8), (16, 2), (6, 3)]
)  # whole runs to a thread; single rows of one run; many runs; too few rows to split (the control)
def test_the_step_splits_its_rows_between_the_threads_with_the_same_bits(n, rows_per_prompt):
    """With two threads the step gives each a share of the rows through the whole step (where the
    rows split into shares of 4): its logits, the keys and values it caches and what it records
    for the training pass are the bits of every kernel splitting its own work by columns, and of
    one thread. Rows of one prompt still read the prompt's slots from their run's first row. (The
    split runs with the step's own linear kernel only.)"""
    skip_without_panel_kernel()
    model, _ = float32_model("qwen2", seed=3)
    threads = torch.get_num_threads()
    results = []
    try:
        with torch.inference_mode():
            w = fast.weights_for(model)
            ids, positions, cache_k, cache_v, slot, mask, cos, sin = one_step_inputs(w, n=n)
            mask[1, ..., :2] = float("-inf")  # left padding in one row
            positions = (positions - torch.arange(n).view(n, 1)).clamp(min=0)  # rows of other lengths
            prompt_slots = 3
            for cache in (cache_k, cache_v):  # each prompt's slots copied to its rows
                view = cache.view(
                    len(w.layers), n // rows_per_prompt, rows_per_prompt, w.kv_heads, slot + 1, -1
                )
                view[:, :, 1:, :, :prompt_slots] = view[:, :, :1, :, :prompt_slots]
            q, kv = w.heads * w.head_dim, w.kv_heads * w.head_dim
            widths = replay.record_widths(q, kv, w.embed.shape[1], w.intermediate)
            for split, count in ((True, 2), (False, 2), (True, 1)):
                torch.set_num_threads(count)
                record = replay.allocate(n, 2, len(w.layers), widths, w.vocab, torch.device("cpu"))
                assert record is not None and record.logits is not None
                k, v = cache_k.clone(), cache_v.clone()
                logits = native._bind(native.op(), w, own_kernels=True, split_rows=split)(
                    ids, positions, k, v, slot, mask, cos, sin, record=record.flat(), record_at=1,
                    rows_per_prompt=rows_per_prompt, prompt_slots=prompt_slots,
                )  # fmt: skip
                results.append([logits, k, v, *(t[:, 1] for t in record.flat())])
    finally:
        torch.set_num_threads(threads)
    assert results[0][0].isfinite().all() and not torch.equal(results[0][1], cache_k)  # it stepped
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other))


@needs_compiler
def test_a_head_size_without_kernels_decodes_with_aten_s_calls_bit_for_bit():
    """Head size 24: the step falls back to the Python step's ATen calls, own kernels or not."""
    model, _ = other_architecture("llama", seed=2, hidden_size=96)
    with torch.inference_mode():
        w = fast.weights_for(model.float())
        assert w.head_dim == 24
        ids, positions, cache_k, cache_v, slot, mask, cos, sin = one_step_inputs(w)
        python_k, python_v = cache_k.clone(), cache_v.clone()
        expected = python_step.forward(w, ids, positions, python_k, python_v, slot, mask, cos, sin)
        got = native._bind(native.op(), w, own_kernels=True)(
            ids, positions, cache_k, cache_v, slot, mask, cos, sin
        )
        assert torch.equal(got, expected)
        assert torch.equal(cache_k, python_k) and torch.equal(cache_v, python_v)


def matmul_attention(q, keys, values, mask, scale):
    """python_step._attend's grouped matmuls, at [N, kvh, G, hd] queries."""
    scores = torch.matmul(q, keys.transpose(-1, -2)).mul_(scale).add_(mask)
    return torch.matmul(scores.softmax(-1), values)


@needs_compiler
@pytest.mark.parametrize("head_dim", [16, 32, 64, 128])
@pytest.mark.parametrize("groups", [1, 2, 7])  # query heads per K/V head (Qwen2-0.5B: 7)
def test_the_attention_kernel_agrees_with_the_matmuls_whatever_the_threads(head_dim, groups):
    assert native.op() is not None
    kernel = torch.ops.axiom_rl.attend_one_token
    gen = torch.Generator().manual_seed(head_dim + groups)
    # 32 (row, K/V head) pairs over 280 slots: enough work that two threads split it (the
    # kernel keeps small work on one thread)
    n, kv_heads, slots, used = 16, 2, 300, 280
    cache_k, cache_v = torch.randn((2, 3, n, kv_heads, slots, head_dim), generator=gen)  # [layer, ...] each
    keys, values = cache_k[1, :, :, :used], cache_v[1, :, :, :used]  # strided: a slice of the cache
    q = torch.randn((n, kv_heads, groups, head_dim), generator=gen)
    allowed = torch.zeros((n, slots))
    allowed[2, :5] = float("-inf")  # left padding
    allowed[5, : used - 1] = float("-inf")  # one slot left
    mask = allowed[:, :used].view(n, 1, 1, used)  # a strided view, as the loop passes it
    scale = head_dim**-0.5
    expected = matmul_attention(q, keys, values, mask, scale)
    threads = torch.get_num_threads()
    try:
        results = []
        for count in (1, 2):
            torch.set_num_threads(count)
            results.append(kernel(q, keys, values, mask, scale))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(results[0], results[1])  # each (row, K/V head) summed by one thread, in one order
    assert torch.allclose(results[0], expected, rtol=1e-5, atol=1e-6), (results[0] - expected).abs().max()
    only_slot = values[5, :, used - 1 : used].expand(kv_heads, groups, head_dim)
    assert torch.allclose(results[0][5], only_slot)


def attention_in_the_kernel_s_order(q, keys, values, mask, scale):
    """The attention kernel's arithmetic, one float32 operation at a time in the order
    decode_step.cpp writes it (each product rounded, then added: it is built without
    contraction): a score's 16 partial sums over the head, folded in halves; ATen's softmax over
    [pairs, G, T]; each output the sum of probability x value, slot after slot."""
    n, kv_heads, groups, hd = q.shape
    slots = keys.shape[2]
    acc = q[..., None, 0:16] * keys[:, :, None, :, 0:16]  # [N, kvh, G, T, 16]
    for d in range(16, hd, 16):
        acc = acc + q[..., None, d : d + 16] * keys[:, :, None, :, d : d + 16]
    s8 = acc[..., :8] + acc[..., 8:]
    s4 = s8[..., :4] + s8[..., 4:]
    dot = (s4[..., 0] + s4[..., 2]) + (s4[..., 1] + s4[..., 3])
    scores = dot * scale + mask.view(n, 1, 1, slots)
    probs = scores.reshape(n * kv_heads, groups, slots).softmax(-1).view(n, kv_heads, groups, slots)
    out = torch.zeros((n, kv_heads, groups, hd))
    for t in range(slots):
        out = out + probs[..., t, None] * values[:, :, None, t]
    return out


@needs_compiler
@pytest.mark.parametrize("head_dim", [16, 64, 128])
@pytest.mark.parametrize("groups", [2, 7])  # an odd count leaves the values loop one head alone
def test_the_attention_kernel_sums_in_its_written_order_bit_for_bit(head_dim, groups):
    """A rollout's tokens, and so a seeded run's figures, follow from these bits: the kernel's
    vector code must keep the order its comments give."""
    assert native.op() is not None
    gen = torch.Generator().manual_seed(7 * head_dim + groups)
    n, kv_heads, slots, used = 5, 2, 48, 41
    cache_k, cache_v = torch.randn((2, n, kv_heads, slots, head_dim), generator=gen)
    keys, values = cache_k[:, :, :used], cache_v[:, :, :used]
    q = torch.randn((n, kv_heads, groups, head_dim), generator=gen)
    allowed = torch.zeros((n, slots))
    allowed[1, :6] = float("-inf")
    mask = allowed[:, :used].view(n, 1, 1, used)
    scale = head_dim**-0.5
    result = torch.ops.axiom_rl.attend_one_token(q, keys, values, mask, scale)
    assert torch.equal(result, attention_in_the_kernel_s_order(q, keys, values, mask, scale))


@needs_compiler
def test_the_attention_kernel_refuses_what_it_does_not_cover():
    assert native.op() is not None
    kernel = torch.ops.axiom_rl.attend_one_token
    q, kv, mask = torch.randn(2, 1, 2, 8), torch.randn(2, 1, 5, 8), torch.zeros(2, 1, 1, 5)
    with pytest.raises(RuntimeError, match="no kernel for head size 8"):
        kernel(q, kv, kv, mask, 0.5)
    with pytest.raises(RuntimeError, match="float32 only"):
        kernel(q.double(), kv.double(), kv.double(), mask.double(), 0.5)


@needs_compiler
@pytest.mark.parametrize(
    "rows,inputs,outputs",
    [(16, 256, 512), (5, 33, 37), (23, 64, 48), (1, 16, 3), (64, 40, 100), (0, 8, 16)],
)  # tiles of 16 rows and what is left, panels of 16 columns and a narrower last one
def test_the_linear_kernel_agrees_with_f_linear_on_every_instruction_set_and_thread_count(
    rows, inputs, outputs
):
    skip_without_panel_kernel()
    gen = torch.Generator().manual_seed(rows + inputs + outputs)
    x = torch.randn((2, rows, inputs), generator=gen)  # leading dimensions, as the step passes them
    weight, bias = torch.randn((outputs, inputs), generator=gen), torch.randn(outputs, generator=gen)
    packed = native.pack_panels(weight)
    assert packed.shape == weight.shape and not torch.equal(packed, weight)  # the same values, reordered
    assert torch.equal(packed.flatten().sort().values, weight.flatten().sort().values)
    expected = torch.nn.functional.linear(x.double(), weight.double(), bias.double())
    threads = torch.get_num_threads()
    results = []
    try:
        for isa in (1, 2):  # AVX2, AVX-512 (where this CPU has it)
            for count in (1, 2):
                torch.set_num_threads(count)
                try:
                    results.append(torch.ops.axiom_rl.linear_panels(x, packed, bias, isa))
                except RuntimeError as e:
                    assert isa == 2 and "no kernel for this CPU" in str(e)
    finally:
        torch.set_num_threads(threads)
    assert results[0].shape == (2, rows, outputs)
    assert all(torch.equal(results[0], r) for r in results[1:])
    assert torch.allclose(results[0].double(), expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(native.linear_panels(x, packed, bias), results[0])  # what a rollout calls
    # the bias added as each sum is stored: the bits of adding it to the product afterwards
    assert torch.equal(results[0], native.linear_panels(x, packed) + bias)


@needs_compiler
@pytest.mark.parametrize("outputs", [16, 3])  # a full panel (the vector tiles) and a narrow one
def test_the_linear_kernel_fuses_each_multiply_and_add(outputs):
    """Each product is added by a fused multiply-add, rounded once (as MKL's and oneDNN's
    kernels do): a product's bits below float32's precision survive its addition."""
    skip_without_panel_kernel()
    a = 1 + 2**-12  # a * a = 1 + 2**-11 + 2**-24: the last term is lost when the product is rounded
    x = torch.tensor([[1.0, a]] * 16)
    weight = torch.tensor([[-(1 + 2**-11), a]] * outputs)
    for isa in (1, 2):
        try:
            y = torch.ops.axiom_rl.linear_panels(x, native.pack_panels(weight), None, isa)
        except RuntimeError as e:
            assert isa == 2 and "no kernel for this CPU" in str(e)
            continue
        assert torch.equal(y, torch.full((16, outputs), 2.0**-24))  # not 0, a rounded product's sum


@needs_compiler
@pytest.mark.parametrize("rows", [16, 5])
def test_the_narrow_last_panel_computes_the_bits_of_a_full_panel_s_columns(rows):
    """The 3 columns past a weight's full panels (a vocabulary of 259) come out as the same 3
    columns do when they are the first of a full panel of 16: one fused multiply-add chain per
    sum, over k in order, whichever way the kernel lays them out."""
    skip_without_panel_kernel()
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn((rows, 256), generator=gen)
    weight, bias = torch.randn((19, 256), generator=gen), torch.randn(19, generator=gen)
    tail = torch.cat([weight[16:], torch.randn((13, 256), generator=gen)])  # the 3, then 13 others
    tail_bias = torch.cat([bias[16:], torch.randn(13, generator=gen)])
    for isa in (1, 2):
        try:
            narrow = torch.ops.axiom_rl.linear_panels(x, native.pack_panels(weight), bias, isa)[:, 16:]
            full = torch.ops.axiom_rl.linear_panels(x, native.pack_panels(tail), tail_bias, isa)[:, :3]
        except RuntimeError as e:
            assert isa == 2 and "no kernel for this CPU" in str(e)
            continue
        assert torch.equal(narrow, full)


@needs_compiler
def test_the_linear_kernel_refuses_what_it_does_not_cover():
    skip_without_panel_kernel()
    packed = native.pack_panels(torch.randn(4, 8))
    with pytest.raises(RuntimeError, match="x has 6 features, the weight 8"):
        native.linear_panels(torch.randn(2, 6), packed)
    with pytest.raises(RuntimeError, match="float32 only"):
        native.linear_panels(torch.randn(2, 8, dtype=torch.float64), packed)
    with pytest.raises(RuntimeError, match="the weight must come from pack_panels"):
        native.linear_panels(torch.randn(2, 4), packed.t())
    with pytest.raises(RuntimeError, match="the bias must be float32 \\[4\\]"):
        native.linear_panels(torch.randn(2, 8), packed, torch.randn(5))
    with pytest.raises(RuntimeError, match="float32 \\[N, K\\] weights with the same K"):
        native.pack_panels(torch.randn(4, 8, 2))
    with pytest.raises(RuntimeError, match="float32 \\[N, K\\] weights with the same K"):
        native.pack_panels(torch.randn(4, 8), torch.randn(4, 7))


@needs_compiler
@pytest.mark.parametrize("sizes", [(256, 128, 128), (5, 20, 3), (688, 688), (7,)])
def test_packing_parts_lays_out_what_packing_their_concatenation_does(sizes):
    """A rollout packs q, k and v (and gate and up) as they are, stacked as it goes: the same
    tensor as packing torch.cat of them, panels across the parts' seams included."""
    skip_without_panel_kernel()
    gen = torch.Generator().manual_seed(sum(sizes))
    parts = [torch.randn((n, 24), generator=gen) for n in sizes]
    parts[0] = parts[0].t().contiguous().t()  # a non-contiguous part too
    assert torch.equal(native.pack_panels(*parts), native.pack_panels(torch.cat(parts)))
    x = torch.randn((3, 24), generator=gen)
    y = native.linear_panels(x, native.pack_panels(*parts))
    assert torch.allclose(y, x @ torch.cat(parts).t(), rtol=1e-5, atol=1e-5)


@needs_compiler
@pytest.mark.parametrize("training_library", ["default", "onednn"])
def test_the_rollout_takes_the_linear_kernel_whichever_library_trains(training_library, monkeypatch):
    """MKL (an Intel CPU's default) trains or oneDNN does: a float32 rollout's weights are packed
    for the C++ step's kernel either way; without the kernel, oneDNN's packing where oneDNN
    trains, else F.linear on the plain weights."""
    if training_library == "onednn" and not cpu_matmul.onednn_available():
        pytest.skip("this PyTorch build has no oneDNN")
    monkeypatch.setenv(cpu_matmul.ENV, training_library)
    cpu_matmul.backend.cache_clear()
    try:
        model, _ = float32_model("qwen2", seed=2)
        with torch.inference_mode():
            if panel_kernel():
                assert fast.weights_for(model).linear is native.linear_panels
            w = fast.weights_for(model, Speed(decode_linear_kernel=False))
        assert w.linear is LINEAR_OF[training_library]
        if training_library == "default":  # the plain weights, not a packed copy
            assert w.lm_head.data_ptr() == model.lm_head.weight.data_ptr()
    finally:
        cpu_matmul.backend.cache_clear()


def rollout(model, tok, decode: str, seed: int = 11, speed: Speed | None = None):
    backend = fast.FastBackend(speed=speed)
    backend.decode = decode
    torch.manual_seed(seed)
    # top-p sampling, and every letter a stop string so that rows end at different lengths
    return backend.generate(model, tok, TEXTS, 3, 24, 1.0, 0.9, list(string.ascii_letters), 512)


@needs_compiler
def test_a_rollout_samples_the_same_tokens_with_the_cpp_and_the_python_step(linear_library, own_kernels):
    """With ATen's calls this holds for every seed (the same bits); with its own kernels, a token
    could differ only where a uniform draw falls within float32 rounding of the edge between two
    tokens, which no draw of this seed does."""
    model, tok = float32_model("qwen2", seed=6)
    assert native.op() is not None  # built and checked: the two rollouts below differ in their step
    speed = speed_of(linear_library, own_kernels)
    with_cpp, with_python = (
        rollout(model, tok, "eager", speed=speed),
        rollout(model, tok, "python", speed=speed),
    )
    assert with_cpp.completion_ids == with_python.completion_ids
    assert with_cpp.finished == with_python.finished
    assert len({len(c) for c in with_cpp.completion_ids}) > 1  # rows stopped at different lengths


@needs_compiler
@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 1.0), (1.3, 0.9), (0.0, 1.0)])
def test_sampling_in_cpp_draws_the_python_loop_s_tokens(temperature, top_p):
    """native.sample_next (the C++ step's loop) masks the logits, draws from the global generator
    and picks the tokens as the Python loop's masking and fast._sample do, bit for bit, and writes
    them into its column of the output."""
    assert native.op() is not None
    logits = torch.randn((64, 259), generator=torch.Generator().manual_seed(5)) * 3
    logits[3] = float("-inf")
    logits[3, 17] = 0.0  # a row with a single possible token but the two masked ones
    pad, eos, n = 0, 1, logits.shape[0]
    expected_logits, got_logits = logits.clone(), logits.clone()
    expected_out, got_out = torch.full((n, 6), -1), torch.full((n, 6), -1)
    torch.manual_seed(11)
    expected_logits[:, pad] = float("-inf")
    expected_logits[:, eos] = float("-inf")
    expected = fast._sample(expected_logits, temperature, top_p)
    expected_out[:, 4] = expected
    after_python = torch.rand(3)  # the generator where the Python loop leaves it
    torch.manual_seed(11)
    got = native.sample_next(got_logits, pad, eos, temperature, top_p, got_out, 4)
    assert torch.equal(got, expected) and torch.equal(got_out, expected_out)
    assert torch.equal(got_logits, expected_logits)  # masked in place, as the loop masks its logits
    assert torch.equal(torch.rand(3), after_python)  # the same draws, no more
    assert int(got[3]) == 17 and not bool(((got == pad) | (got == eos)).any())
    assert len(set(got.tolist())) > (1 if temperature == 0 else 10)  # (not one token for every row)


def test_models_it_does_not_compute_keep_the_python_step():
    """float64 (the tests' exactness checks) and Qwen3's per-head norms stay in Python."""
    model, _ = model64(seed=0)  # float64
    assert not native.applies(fast.weights_for(model))
    qwen3, _ = other_architecture("qwen3", 0, head_dim=32)
    assert not native.applies(fast.weights_for(qwen3.float()))
    assert native.applies(fast.weights_for(model.float()))


def test_a_bad_setting_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(native.ENV, "fortran")
    with pytest.raises(UserError, match="AXIOM_RL_DECODE_STEP='fortran': use one of native, python"):
        native.op()
    monkeypatch.setenv(native.ENV, "python")
    assert native.op() is None


def test_a_bad_setting_stops_a_run_before_it_writes_anything(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, native.ENV: "fortran"}
    args = ["train", "--tiny-size", "nano", "--tasks", "countdown", "--steps", "1", "--output-dir", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "axiom_rl", *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "axiom-rl: error: AXIOM_RL_DECODE_STEP='fortran': use one of native, python"
    ]
    assert not out.exists()


ROLLOUT_IN_A_FRESH_PROCESS = """
import json, string, sys, warnings
import torch
from axiom_rl.models.tiny import build_tiny_model
from axiom_rl.rollout.fast import FastBackend
texts = json.loads(sys.argv[1])
model, tok = build_tiny_model("nano", seed=4)
torch.manual_seed(3)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    r = FastBackend().generate(model, tok, texts, 2, 12, 1.0, 1.0, [], 512)
print(json.dumps({"ids": r.completion_ids, "warnings": [str(w.message) for w in caught]}))
"""


def test_a_machine_that_cannot_build_it_decodes_in_python_and_says_so(tmp_path):
    """A compiler that fails (as a missing one does): the rollout still runs, with the tokens
    the Python step samples, and one warning says why; asked for the C++ step, it is an error."""
    env = {**os.environ, "CXX": "/bin/false", "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    env.pop(native.ENV, None)
    proc = subprocess.run(
        [sys.executable, "-c", ROLLOUT_IN_A_FRESH_PROCESS, json.dumps(TEXTS)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert list(tmp_path.glob("axiom_rl-*/decode_step-*/decode_step.cpp"))  # it tried to build there
    assert len(result["warnings"]) == 1 and "C++ decode step could not be built" in result["warnings"][0]

    model, tok = build_tiny_model("nano", seed=4)
    backend = fast.FastBackend()
    backend.decode = "python"
    torch.manual_seed(3)
    assert result["ids"] == backend.generate(model, tok, TEXTS, 2, 12, 1.0, 1.0, [], 512).completion_ids

    env[native.ENV] = "native"
    proc = subprocess.run(
        [sys.executable, "-c", ROLLOUT_IN_A_FRESH_PROCESS, json.dumps(TEXTS)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "AXIOM_RL_DECODE_STEP=native, but the C++ decode step could not be built" in proc.stderr


@needs_compiler
def test_a_lock_left_by_a_killed_build_does_not_hang_the_next_run():
    """torch marks a build in progress with a `lock` file that a killed build (SIGKILL, the OOM
    killer) leaves behind, and torch's next load of that directory waits on it forever. With such
    a file in this machine's build directory, a fresh process still decodes with the C++ step,
    and says that it removed the file."""
    assert native.op() is not None  # built here, or loaded from this machine's cache
    stale = native.build_directory() / "lock"
    stale.touch()
    try:
        env = {**os.environ, native.ENV: "native"}
        proc = subprocess.run(
            [sys.executable, "-c", ROLLOUT_IN_A_FRESH_PROCESS, json.dumps(TEXTS)],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        stale.unlink(missing_ok=True)  # whatever happened, later runs on this machine must not wait on it
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["warnings"] == []
    assert f"removing {stale}, left by a build that was killed" in proc.stderr


def test_the_packaged_ninja_builds_whatever_path_names_first(tmp_path, monkeypatch):
    """A system's ninja first on PATH (a shell without the venv's bin) would rebuild everything the
    packaged one built, and the other way round; the build always runs the `ninja` package's."""
    ninja = pytest.importorskip("ninja")
    fake = tmp_path / "ninja"
    fake.write_text("#!/bin/sh\necho 1.0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    assert shutil.which("ninja") == str(fake)
    native.use_packaged_ninja()
    assert shutil.which("ninja") == os.path.join(ninja.BIN_DIR, "ninja")
    path = os.environ["PATH"]
    native.use_packaged_ninja()  # already first: PATH left as it is
    assert os.environ["PATH"] == path


def test_each_installation_of_torch_builds_its_own_library(monkeypatch):
    """Two venvs name their own torch's headers in the build's commands: one directory each, or
    each rebuilds what the other built."""
    here = native.build_directory()
    monkeypatch.setattr(torch, "__file__", "/elsewhere/site-packages/torch/__init__.py")
    elsewhere = native.build_directory()
    assert here.parent == elsewhere.parent and here != elsewhere
