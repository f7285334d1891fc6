"""One GRPO training step: axiom-rl against TRL's GRPOTrainer, at identical work.

Both sides train the same local model directory (a random Qwen2, saved with save_pretrained, with
axiom-rl's byte-level tokenizer), on the same prompts, with the same prompts per step, group
size, completion length (generation forced to full length, so both do the same work), beta, loss
type ("grpo"), dtype and fine-tuning mode (full vs full, LoRA vs LoRA). Each side runs in its own
subprocess (so peak memory is its own), alternating A B A B, for --steps steps after --warmup.

Gradient checkpointing is off on both sides unless --gradient-checkpointing turns it on for both
(TRL's GRPOConfig turns it on by default: recomputation trades time for memory, not the same work).

Printed per configuration: seconds per step (median, range), completion tokens per second, peak
RSS (or peak CUDA memory; median and range over rounds, one process each), the split of a step
(generation / reference and old log-probs / forward / backward), the ratio axiom-rl : TRL, and
two floors, each side's step time given as a multiple of both. The compute floor is the FLOPs
axiom-rl itself computes (from the model shape and token counts: on a CPU each group's prompt
once per pass and the first update's linear layers over the completions replayed from the
rollout, so not computed) over the matmul throughput measured on this device (before the first
round and after each, the best taken: a shared host's busy moment is not what it allows); the
textbook floor is the usual step's FLOPs (every row its own sequence, nothing replayed) at the
same rate. Also the time the step's linear layers alone take with each matmul timed at its real
shape (decode steps are a few rows times a weight, where the BLAS runs below the large-matmul
rate), and on a GPU generation against its memory floor (the weights and KV cache each decode
step reads, at the measured copy bandwidth). On a CPU in float32 both use the faster of two
matmul libraries PyTorch ships, its BLAS (MKL) and oneDNN, each measured here: on AMD processors
MKL runs its AVX2 code, and oneDNN can be twice as fast (axiom-rl calls oneDNN there; TRL,
through PyTorch, MKL).

    python benchmarks/grpo_step.py                       # the issue's configurations, CPU
    python benchmarks/grpo_step.py --config full --rounds 3 --steps 5
    python benchmarks/grpo_step.py --device cuda --config gpu-0.5b   # a 0.5B-sized Qwen2, bf16
    python benchmarks/grpo_step.py --trl-same-allocator  # TRL with axiom-rl's CPU malloc settings too
    python benchmarks/grpo_step.py --same-settings       # and its float32 linear layers through oneDNN too
    python benchmarks/grpo_step.py --config full --ablations  # axiom-rl with one speed-up off at a time
    python benchmarks/grpo_step.py --config full --ablations hf-generate  # only that one

--ablations adds axiom-rl runs, in the same rotation, each with one of its speed-ups turned off
(ABLATIONS below): what each is worth, measured in the same invocation as the rest.

On the CPU, axiom-rl's trainer keeps freed memory mapped (glibc mallopt; see
axiom_rl/speed/host_memory.py); TRL as users run it does not. --trl-same-allocator gives TRL's
process the same settings, to show how much of the difference is that alone. --same-settings
gives TRL both of the settings axiom-rl applies beside its trainer: the malloc settings and, where
axiom-rl routes its own (x86 CPUs that are not Intel's), float32 linear layers through oneDNN in
the training passes (TRL's policy and reference networks; not its generation, where unpacked
oneDNN calls are slower, as axiom-rl's own decode loop does not use them). What is left of the
ratio is the trainer's own work.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Setup:
    name: str
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 688
    prompts: int = 4
    generations: int = 4
    completion: int = 64
    beta: float = 0.04
    finetune: str = "full"
    dtype: str = "fp32"
    lr: float = 1e-5
    gradient_checkpointing: bool = False  # TRL's GRPOConfig defaults to True: set on both sides alike
    micro_batches: int = 1  # gradient accumulation over the step's rows, alike on both sides (memory)


CONFIGS = {
    "full": Setup("full fine-tuning, fp32, 4x4, 64 tokens, beta 0.04"),
    "lora": Setup("LoRA r16, fp32, 4x4, 64 tokens, beta 0.04", finetune="lora"),
    "rollout-heavy": Setup("rollout-heavy: full, 8x8, 256 tokens", prompts=8, generations=8, completion=256),
    # Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads / 2 KV, intermediate 4864).
    # Its training passes go in 2 micro-batches of 32 rows on both sides: one batch of 64 x ~570
    # tokens would hold ~50 GB of activations, too close to an 80 GB card.
    "gpu-0.5b": Setup(
        "0.5B-sized Qwen2, bf16, full, 8x8, 512 tokens, 2 micro-batches",
        *(896, 24, 14, 2, 4864, 8, 8, 512),
        dtype="bf16",
        micro_batches=2,
    ),
}


# axiom-rl with one speed-up turned off: name -> (what is off, TrainConfig overrides: a setting of
# the run's `speed` section, as a user turns it off, or another option).
ABLATIONS = {
    "hf-generate": ("transformers generate instead of the decode loop", {"rollout_backend": "hf"}),
    "default-malloc": (
        "glibc's default malloc settings, not keep_freed_memory",
        {"speed": {"keep_freed_memory": False}},
    ),
    "unfused-adamw": (
        "PyTorch's default (per-tensor) AdamW instead of the fused one",
        {"speed": {"fused_adamw": False}},
    ),
    "autograd-mlp": (
        "autograd's gated MLP, keeping silu(gate) and the product down_proj reads",
        {"speed": {"lean_mlp": False}},
    ),
    "unshared-prompts": (
        "every row's prompt run in the training passes, not each group's once",
        {"speed": {"share_prompt_passes": False}},
    ),
    # Not a speed-up there: the default on a GPU is every row's prompt (Speed.share_prompt_passes).
    "shared-prompts": (
        "each group's prompt run once in the training passes, as on a CPU (GPU only)",
        {"speed": {"share_prompt_passes": True}},
    ),
    "eager-decode": (
        "the decode step launched op by op, not replayed as a CUDA graph (GPU only)",
        {"speed": {"static_decode": False}},
    ),
    "uncompiled-decode": (
        "the CUDA graph of the decode step's plain ops, not of their compiled kernels (GPU only)",
        {"speed": {"compile_decode": False}},
    ),
    "python-decode": (
        "the decode step's calls made from Python, not from the C++ step (CPU only)",
        {"speed": {"decode_step": False}},
    ),
    "aten-ops": (
        "the C++ step's attention and element-wise work in ATen's calls, not its own loops (CPU only)",
        {"speed": {"decode_own_kernels": False}},
    ),
    "onednn-linear": (
        "the rollout's linear layers in the library that trains (oneDNN; MKL on Intel CPUs), not the C++ step's "
        "kernel (CPU only)",
        {"speed": {"decode_linear_kernel": False}},
    ),
    "column-split-decode": (
        "the C++ step's kernels each splitting their work by columns, not the rows split between the threads "
        "(CPU only)",
        {"speed": {"decode_split_rows": False}},
    ),
    "aten-silu": (
        "the training passes' SiLU and product in ATen's calls, not the fused kernels (CPU only)",
        {"speed": {"fused_silu": False}},
    ),
    "sdpa-attention": (
        "the training passes' attention in PyTorch's SDPA, not axiom-rl's kernel (CPU only)",
        {"speed": {"attention_kernel": False}},
    ),
    "aten-norm": (
        "the training passes' RMSNorm in transformers' ATen calls, not axiom-rl's kernel (CPU only)",
        {"speed": {"rms_norm_kernel": False}},
    ),
    "aten-rope": (
        "the training passes' rotary embedding in transformers' ATen calls, not axiom-rl's kernel (CPU only)",
        {"speed": {"rotary_kernel": False}},
    ),
    "default-matmul": (
        "PyTorch's own BLAS (MKL) for float32 linear layers, not oneDNN (CPU only)",
        {"speed": {"onednn_linear": False}},
    ),
    "no-replay": (
        "the policy's forward computes its linear layers, not replaying the rollout's outputs (CPU only)",
        {"speed": {"replay_linear_outputs": False}},
    ),
    "unpacked-reference": (
        "the frozen reference's weights laid out by oneDNN on every call, not once at load (CPU only)",
        {"speed": {"pack_reference": False}},
    ),
}
# Where an ablation changes anything; `--ablations` alone runs those of the device.
ABLATION_DEVICE = {
    "default-malloc": "cpu",  # host memory settings, for CPU training
    "default-matmul": "cpu",
    "unshared-prompts": "cpu",
    "shared-prompts": "cuda",
    "eager-decode": "cuda",
    "uncompiled-decode": "cuda",
    "python-decode": "cpu",
    "aten-ops": "cpu",
    "onednn-linear": "cpu",
    "column-split-decode": "cpu",
    "aten-silu": "cpu",
    "sdpa-attention": "cpu",
    "aten-norm": "cpu",
    "aten-rope": "cpu",
    "no-replay": "cpu",
    "unpacked-reference": "cpu",
}


def ablation_applies(name: str, device: str) -> bool:
    return ABLATION_DEVICE.get(name, device) == device


def switch_off(ablation: str | None) -> dict:
    """The TrainConfig overrides of an ablation (nothing is patched: each is a setting)."""
    return {} if ablation is None else dict(ABLATIONS[ablation][1])


# ------------------------------------------------------------------------------ shared set-up


@functools.cache
def vocab_size() -> int:
    """The benchmark model's vocabulary: axiom-rl's byte-level tokenizer."""
    from axiom_rl.models.tiny import build_char_tokenizer

    return len(build_char_tokenizer())


def build_model_dir(setup: Setup, path: Path) -> int:
    """A random Qwen2 of this shape and the byte-level tokenizer, saved; returns parameters."""
    import torch
    from transformers import Qwen2ForCausalLM

    from axiom_rl.models.tiny import TinySize, build_char_tokenizer, tiny_config

    tok = build_char_tokenizer()
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        tiny_config(
            TinySize(setup.hidden, setup.layers, setup.heads, setup.kv_heads, setup.intermediate),
            vocab_size=vocab_size(),
        )
    )
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def prompts(n: int) -> list[str]:
    from axiom_rl.tasks import generate_problems, get_task

    task = get_task("countdown")
    return [
        task.render(p, "compact") + task.response_prefix(p, "compact")
        for p in generate_problems("countdown", 1, n, seed=123)
    ]


# Setup.dtype -> the name of the torch dtype (getattr(torch, name); transformers' `dtype` argument).
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def best_seconds(fn: Callable[[], object], device: str, runs: int) -> float:
    """The fastest of `runs` timed calls of `fn`, after one untimed warm-up call (on a GPU, each
    call is timed to completion)."""
    import torch

    times = []
    for i in range(runs + 1):
        if device != "cpu":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device != "cpu":
            torch.cuda.synchronize()
        if i:
            times.append(time.perf_counter() - t0)
    return min(times)


def kernel_seconds(fn: Callable[[], object], device: str, runs: int) -> float:
    """Like best_seconds, but on a GPU the time of the kernel alone: 20 calls captured in a CUDA
    graph and replayed, so no launch or synchronisation is counted (small matmuls take a few
    microseconds, less than launching them)."""
    if device == "cpu":
        return best_seconds(fn, device, runs)
    import torch

    from axiom_rl.rollout.fast import capture_cuda_graph

    reps = 20
    graph, _ = capture_cuda_graph(lambda: [fn() for _ in range(reps)], torch.device(device))
    return best_seconds(graph.replay, device, runs) / reps


def onednn_applies(device: str, dtype: str) -> bool:
    """Whether oneDNN is a second matmul library here: float32 on a CPU whose PyTorch has it
    (axiom-rl calls it where MKL is the slower one: axiom_rl/speed/cpu_matmul.py)."""
    from axiom_rl.speed import cpu_matmul

    return device == "cpu" and dtype == "fp32" and cpu_matmul.onednn_available()


def matmul_flops(device: str, dtype: str) -> dict[str, float]:
    """FLOP/s of a large square matmul on this device, by library: PyTorch's own ("torch": MKL on
    x86) and, where onednn_applies, oneDNN's. The best of 7 after a warm-up each: the floor is what
    the hardware allows, not what a noisy moment gave, so it takes the faster library."""
    import torch
    import torch.nn.functional as F

    from axiom_rl.speed import cpu_matmul

    dt = getattr(torch, TORCH_DTYPES[dtype])
    size = 1024 if device == "cpu" else 8192
    a = torch.randn(size, size, device=device, dtype=dt)
    b = torch.randn(size, size, device=device, dtype=dt)
    rates = {"torch": 2 * size**3 / best_seconds(lambda: F.linear(a, b).sum().item(), device, runs=7)}
    if onednn_applies(device, dtype):
        packed = cpu_matmul.pack(b)
        fn = lambda: cpu_matmul.linear_packed(a, packed).sum().item()  # noqa: E731
        rates["onednn"] = 2 * size**3 / best_seconds(fn, device, runs=7)
    return rates


def memory_bandwidth(device: str) -> float:
    """Bytes/s of a large device-to-device copy, counting bytes read and written (best of 7)."""
    import torch

    n = 2**30 if device != "cpu" else 2**28  # bytes per buffer
    a = torch.empty(n, dtype=torch.uint8, device=device).random_()
    b = torch.empty_like(a)
    return 2 * n / best_seconds(lambda: b.copy_(a), device, runs=7)


# Bytes per element of each Setup.dtype.
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def step_work(
    setup: Setup, prompt_len: int, *, prompts_once: bool = True, replayed: bool = False
) -> dict[str, tuple[float, float]]:
    """Work of one step by phase -- generation (prefill and decode), reference forward, policy
    forward, backward -- as (FLOPs, bytes of memory the phase must at least read).

    Linear layers cost 2 x params x tokens per forward (the backward twice that); attention adds
    4 x layers x hidden x context per token. Logits are only needed for completion positions.
    `prompts_once`: generation prefills each prompt once and the training passes run each group's
    prompt once with every row's completion on top of it (as axiom-rl runs them on a CPU);
    without it every row is its own sequence in every phase (the textbook step, and TRL's).
    `replayed`: the policy forward's linear layers over the completion tokens are not computed but
    taken from the rollout (axiom-rl on a CPU in float32: speed/replay.py), so they are not counted.
    Bytes: every pass reads the weights once; every decode step reads them again and the KV cache
    written so far (which is what bounds decoding on a GPU). Activations and the optimizer are
    left out.
    """
    d, L = setup.hidden, setup.layers
    kv = setup.kv_heads * (d // setup.heads)
    per_layer = d * (d + 2 * kv) + d * d + 3 * d * setup.intermediate  # q,k,v,o + gate,up,down
    vocab = vocab_size()
    body = L * per_layer
    rows, p, t = setup.prompts * setup.generations, prompt_len, setup.completion
    size = DTYPE_BYTES[setup.dtype]
    weights = (body + d * vocab) * size
    sequences = setup.prompts if prompts_once else rows  # prompt passes

    def attention(tokens: int, context: float) -> float:
        return 4 * L * d * context * tokens

    prefill = 2 * body * sequences * p + attention(sequences * p, p / 2)
    decode = rows * t * (2 * (body + d * vocab)) + attention(rows * t, p + t / 2)
    kv_read = t * L * rows * 2 * kv * (p + t / 2) * size  # K and V of every position so far, per step
    # The training passes run the same tokens as generation.
    fwd = prefill + decode
    policy = fwd - (2 * body * rows * t if replayed else 0.0)
    return {
        "prefill": (prefill, weights),
        "decode": (decode, t * weights + kv_read),
        "reference": (fwd, weights) if setup.beta else (0.0, 0.0),
        "forward": (policy, weights),
        "backward": (2 * fwd, 2 * weights),
    }


def axiom_work(setup: Setup, prompt_len: int, device: str) -> dict[str, tuple[float, float]]:
    """What axiom-rl itself must compute in a step with its defaults on `device`: on a CPU each
    group's prompt once per pass (Speed.share_prompt_passes), and in float32 the first update's
    linear layers over the completions replayed from the rollout; on a GPU every row's prompt in
    the training passes and no replay (generation prefills each prompt once on both)."""
    cpu = device == "cpu"
    work = step_work(setup, prompt_len, prompts_once=cpu, replayed=cpu and setup.dtype == "fp32")
    if not cpu:
        work["prefill"] = step_work(setup, prompt_len)["prefill"]
    return work


def step_flops(work: dict[str, tuple[float, float]]) -> float:
    """Training FLOPs of one step: rollout, reference forward, policy forward and backward."""
    return sum(flops for flops, _ in work.values())


def floor_seconds(work: dict[str, tuple[float, float]], rate: float, bandwidth: float | None) -> float:
    """The fastest a step doing `work` can be: each phase at the measured matmul rate or, when
    `bandwidth` is given (on a GPU), no faster than reading its bytes at that rate either --
    whichever is slower. Decode steps are alike, so taking the larger of the decode phase's two
    totals is taking it per step."""
    return sum(max(flops / rate, bytes_ / bandwidth if bandwidth else 0.0) for flops, bytes_ in work.values())


def matmul_timer(dtype: str, device: str) -> Callable[[int, int, int, str], float]:
    """Seconds of one matmul of the given shape and kind on `device` (best of 5, each shape timed
    once): "fwd" [m, k] x [n, k]^T as F.linear; "dx" the input's gradient [m, n] x [n, k]; "dw"
    the weight's gradient [n, m] x [m, k]. Where onednn_applies, the faster of PyTorch's BLAS and
    oneDNN, oneDNN given its operands already laid out (packed weights, transposes made)."""
    import torch
    import torch.nn.functional as F

    from axiom_rl.speed import cpu_matmul

    dt = getattr(torch, TORCH_DTYPES[dtype])
    onednn = onednn_applies(device, dtype)
    cache: dict[tuple[int, int, int, str], float] = {}

    def timed(m: int, k: int, n: int, kind: str = "fwd") -> float:
        key = (m, k, n, kind)
        if key not in cache:
            if kind == "fwd":
                a, b = torch.randn(m, k, device=device, dtype=dt), torch.randn(n, k, device=device, dtype=dt)
                fn = lambda: F.linear(a, b)  # noqa: E731
                x, w = a, b  # oneDNN: F.linear(x, w)
            elif kind == "dx":
                a, b = torch.randn(m, n, device=device, dtype=dt), torch.randn(n, k, device=device, dtype=dt)
                fn = lambda: a @ b  # noqa: E731
                x, w = a, b.t().contiguous()
            else:
                a, b = torch.randn(m, n, device=device, dtype=dt), torch.randn(m, k, device=device, dtype=dt)
                fn = lambda: a.t() @ b  # noqa: E731
                x, w = a.t().contiguous(), b.t().contiguous()
            cache[key] = kernel_seconds(fn, device, runs=5)
            if onednn:
                packed = cpu_matmul.pack(w)
                cache[key] = min(
                    cache[key], best_seconds(lambda: cpu_matmul.linear_packed(x, packed), device, 5)
                )
        return cache[key]

    return timed


def matmul_bound(
    setup: Setup,
    prompt_len: int,
    device: str,
    time_matmul: Callable[[int, int, int, str], float] | None = None,
    replayed: bool = False,
) -> dict[str, float]:
    """Seconds one step spends in its linear layers alone, each matmul timed at its real shape with
    this machine's matmul libraries (best of 5): generation (prefill, then one token per row per step: M is
    the number of rows), the reference and policy forwards, and the backward (the input and the
    weight gradient of each). Attention and everything elementwise are left out, so no step that
    calls these libraries can be faster. The compute floor assumes the rate of a large square
    matmul for all of them; at decode shapes (a few rows times a weight) they run at about half of it.
    `time_matmul(m, k, n, kind)` times one shape (default: on `device`, once per shape).
    `replayed`: the policy forward's linear layers over the completions come from the rollout
    (speed/replay.py), so only its logits are multiplied there.
    """
    d = setup.hidden
    hd = d // setup.heads
    layer = [
        (d, (setup.heads + 2 * setup.kv_heads) * hd),
        (d, d),
        (d, 2 * setup.intermediate),
        (setup.intermediate, d),
    ]
    vocab = vocab_size()
    timed = time_matmul or matmul_timer(setup.dtype, device)

    def forward(m: int, logits_rows: int) -> float:
        return setup.layers * sum(timed(m, k, n) for k, n in layer) + timed(logits_rows, d, vocab)

    def backward(m: int, logits_rows: int) -> float:
        shapes = [(m, k, n) for k, n in layer] * setup.layers + [(logits_rows, d, vocab)]
        return sum(timed(*shape, "dx") + timed(*shape, "dw") for shape in shapes)

    rows, t = setup.prompts * setup.generations, setup.completion
    gen = forward(setup.prompts * prompt_len, setup.prompts) + (t - 1) * forward(rows, rows)
    # The training passes run micro-batch by micro-batch; in each, every group's prompt once
    # (logits at its last position), then every row's completion on top of it.
    parts = setup.micro_batches
    prompt_rows, completion_rows = setup.prompts * prompt_len // parts, rows * t // parts
    groups = setup.prompts // parts
    fwd = parts * (forward(prompt_rows, groups) + forward(completion_rows, completion_rows))
    policy = fwd
    if replayed:
        policy = parts * (forward(prompt_rows, groups) + timed(completion_rows, d, vocab))
    bwd = parts * (backward(prompt_rows, groups) + backward(completion_rows, completion_rows))
    return {"generation": gen, "reference": fwd if setup.beta else 0.0, "forward": policy, "backward": bwd}


@dataclass
class Machine:
    """What the hardware allows, as measured once: matmul FLOP/s by library, memory bandwidth
    (on a GPU; None on a CPU), and the step's linear layers alone by phase (matmul_bound)."""

    rates: dict[str, float]
    bandwidth: float | None
    bound: dict[str, float]


def measure_machine(setup: Setup, prompt_len: float, device: str) -> Machine:
    # The CPU floor is FLOPs alone; a GPU's decode is bound by memory.
    return Machine(
        matmul_flops(device, setup.dtype),
        memory_bandwidth(device) if device != "cpu" else None,
        matmul_bound(setup, round(prompt_len), device, replayed=device == "cpu" and setup.dtype == "fp32"),
    )


def fastest(measured: list[Machine]) -> Machine:
    """The best of several measurements: each library's highest rate, the highest bandwidth, each
    phase's shortest bound. The host is shared, and one measurement taken while something else ran
    reads slow: a floor computed from it would flatter every step time held against it."""
    rates = {lib: max(m.rates[lib] for m in measured) for lib in measured[0].rates}
    widths = [m.bandwidth for m in measured if m.bandwidth is not None]
    bound = {phase: min(m.bound[phase] for m in measured) for phase in measured[0].bound}
    return Machine(rates, max(widths) if widths else None, bound)


# Below this ratio of slowest to fastest matmul measurement in one invocation, the run says that
# the host was busy: on the project's shared 2-core VMs a quiet run's measurements agree within
# about 10% (199-215 GFLOP/s), a busy one's differed twofold (111-216).
BUSY_HOST_RATIO = 0.85


def busy_host_note(seen: list[float]) -> str | None:
    """A warning line when an invocation's matmul measurements (FLOP/s, one per measurement)
    disagree by more than BUSY_HOST_RATIO: something else was using the cores, so every side's step
    times read slow, and their multiples of the floor (the best measurement) read high. None when
    they agree."""
    if len(seen) < 2 or min(seen) >= BUSY_HOST_RATIO * max(seen):
        return None
    return (
        f"   note: the matmul rate varied {min(seen) / 1e9:.0f}-{max(seen) / 1e9:.0f} GFLOP/s between measurements: "
        "the host was busy during this run, so step times read slower and multiples of the floor higher "
        "than on a quiet host (the ratios between the sides, measured alternately, less so); run it again "
        "for the floor's figures"
    )


# ------------------------------------------------------------------------------ the two sides


def run_axiom(
    setup: Setup, model_dir: str, steps: int, device: str, out: Path, ablation: str | None = None
) -> dict:
    import torch

    from axiom_rl.config import TrainConfig
    from axiom_rl.train.grpo import train

    overrides = switch_off(ablation)
    stamps = []
    cfg = TrainConfig(
        model=model_dir, finetune=setup.finetune, dtype=setup.dtype, device=device, tasks=["countdown"],
        prompt_style="compact", chat_template="off", steps=steps, prompts_per_step=setup.prompts,
        num_generations=setup.generations, max_completion_length=setup.completion,
        min_completion_length=setup.completion, beta=setup.beta, loss_type="grpo", lr=setup.lr,
        temperature=1.0, output_dir=str(out), save_every=0, seed=0, gradient_checkpointing=setup.gradient_checkpointing,
        gradient_accumulation_steps=setup.micro_batches,
        **overrides,
    )  # fmt: skip
    result = train(
        cfg, progress=lambda step, total, row: stamps.append(time.perf_counter()), say=lambda m: None
    )
    rows = result.metrics
    return {
        "step_s": [b - a for a, b in zip(stamps, stamps[1:])],
        "generation_s": [r["time_rollout_s"] for r in rows[1:]],
        "reference_s": [r["time_reference_s"] for r in rows[1:]],
        "forward_s": [r["time_forward_s"] for r in rows[1:]],
        "backward_s": [r["time_backward_s"] for r in rows[1:]],
        "tokens": [r["completions"] * r["completion_len_mean"] for r in rows[1:]],
        "peak_mb": peak_memory_mb(device),
        "torch": torch.__version__,
    }


def route_training_passes(trainer: Any) -> int:
    """TRL's policy and reference networks' float32 linear layers through oneDNN in the training
    passes, as axiom-rl's are; generation runs them as PyTorch does, as axiom-rl's own decode
    loop does not route through them either (unpacked, oneDNN lays each weight out again on every
    call: in a decode loop of small matmuls that made TRL's generation 5-20x slower). Returns how
    many layers are routed."""
    from axiom_rl.speed import cpu_matmul

    nets = [trainer.model] + ([trainer.ref_model] if getattr(trainer, "ref_model", None) is not None else [])

    def route() -> int:
        return sum(cpu_matmul.route_linear_layers(net) for net in nets)

    def unroute() -> None:
        for net in nets:
            for module in net.modules():
                own = vars(module).get("forward")
                if getattr(own, "__func__", None) is cpu_matmul._linear_forward:
                    del module.forward

    generate = trainer._generate_single_turn

    def generate_unrouted(*args: Any, **kwargs: Any) -> Any:
        unroute()
        try:
            return generate(*args, **kwargs)
        finally:
            route()

    trainer._generate_single_turn = generate_unrouted
    return route()


def run_trl(
    setup: Setup,
    model_dir: str,
    steps: int,
    device: str,
    out: Path,
    same_allocator: bool = False,
    same_matmul: bool = False,
) -> dict:
    import torch
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from axiom_rl.rewards import compute_reward
    from axiom_rl.tasks import generate_problems, get_task

    if same_allocator:  # give TRL's process the malloc settings axiom-rl's CPU trainer applies
        from axiom_rl.speed.host_memory import keep_freed_memory

        keep_freed_memory()
    problems = generate_problems("countdown", 1, 4096, seed=123)
    task = get_task("countdown")
    by_prompt = {task.render(p, "compact") + task.response_prefix(p, "compact"): p for p in problems}

    def reward(prompts, completions, **_):
        return [
            compute_reward(by_prompt[p], c, task.score(by_prompt[p], c))[0]
            for p, c in zip(prompts, completions)
        ]

    peft_config = None
    if setup.finetune == "lora":
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
        )
    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=setup.prompts * setup.generations // setup.micro_batches,
        gradient_accumulation_steps=setup.micro_batches,  # generation still covers the whole step
        num_generations=setup.generations, max_completion_length=setup.completion,
        generation_kwargs={"min_new_tokens": setup.completion}, beta=setup.beta, loss_type="grpo",
        use_bias_correction_kl=False, learning_rate=setup.lr, max_steps=steps, logging_steps=1, report_to=[],
        use_cpu=device == "cpu", bf16=setup.dtype == "bf16", fp16=setup.dtype == "fp16", temperature=1.0,
        top_p=1.0, top_k=0, save_strategy="no", seed=0, disable_tqdm=True,
        gradient_checkpointing=setup.gradient_checkpointing,
        model_init_kwargs={"dtype": TORCH_DTYPES[setup.dtype]},
    )  # fmt: skip
    data = Dataset.from_dict({"prompt": list(by_prompt)[: setup.prompts * steps * 2]})
    trainer = GRPOTrainer(
        model=model_dir, reward_funcs=reward, args=args, train_dataset=data, peft_config=peft_config
    )
    routed = 0
    if same_matmul:  # float32 linear layers through oneDNN where axiom-rl routes its own (AMD x86)
        routed = route_training_passes(trainer)
    times = {"generation": 0.0, "reference": 0.0, "forward": 0.0, "backward": 0.0}
    per_step = []

    def timed(name_of, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                times[name_of()] += time.perf_counter() - t0

        return wrapper

    trainer._generate_single_turn = timed(lambda: "generation", trainer._generate_single_turn)
    # Log-probs without gradient are the reference (and old) passes; with gradient, the policy's forward.
    trainer._get_per_token_logps_and_entropies = timed(
        lambda: "forward" if torch.is_grad_enabled() else "reference",
        trainer._get_per_token_logps_and_entropies,
    )
    trainer.accelerator.backward = timed(lambda: "backward", trainer.accelerator.backward)
    stamps = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(time.perf_counter())
            per_step.append(dict(times))
            for k in times:
                times[k] = 0.0

    trainer.add_callback(Clock())
    trainer.train()
    return {
        "step_s": [b - a for a, b in zip(stamps, stamps[1:])],
        "generation_s": [s["generation"] for s in per_step[1:]],
        "reference_s": [s["reference"] for s in per_step[1:]],
        "forward_s": [s["forward"] for s in per_step[1:]],
        "backward_s": [s["backward"] for s in per_step[1:]],
        "tokens": [setup.prompts * setup.generations * setup.completion] * (len(per_step) - 1),
        "peak_mb": peak_memory_mb(device),
        "trl": trl.__version__,
        "trl_linear_layers_routed": routed,
    }


def peak_memory_mb(device: str) -> float:
    if device != "cpu":
        import torch

        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------------------ driver


def child(args: argparse.Namespace) -> None:
    setup = Setup(**json.loads(args.setup))
    with tempfile.TemporaryDirectory() as out:
        run = (setup, args.model_dir, args.warmup + args.steps, args.device, Path(out) / "run")
        if args.child == "trl":
            result = run_trl(
                *run,
                same_allocator=args.trl_same_allocator or args.same_settings,
                same_matmul=args.same_settings,
            )
        else:  # "axiom" or "axiom:ABLATION"
            result = run_axiom(*run, ablation=args.child.partition(":")[2] or None)
    # Drop the warm-up steps (the first step is never timed: it has no predecessor stamp).
    skip = max(0, args.warmup - 1)
    for k, v in result.items():
        if isinstance(v, list):
            result[k] = v[skip:]
    print("RESULT " + json.dumps(result))


def run_side(side: str, setup: Setup, model_dir: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", side, "--setup", json.dumps(asdict(setup)), "--model-dir", str(model_dir),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--device", args.device]  # fmt: skip
    if args.trl_same_allocator:
        cmd.append("--trl-same-allocator")
    if args.same_settings:
        cmd.append("--same-settings")
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"{side} failed:\n{proc.stderr[-3000:]}")
    return json.loads(line[len("RESULT ") :])


def label_of(side: str) -> str:
    return {"axiom": "axiom-rl", "trl": "TRL"}.get(side, side.replace("axiom:", "  - "))


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description="GRPO step: axiom-rl vs TRL at identical work")
    ap.add_argument(
        "--config",
        action="append",
        choices=sorted(CONFIGS),
        help="configuration(s) to run (default: full, lora, rollout-heavy)",
    )
    ap.add_argument("--rounds", type=int, default=3, help="A/B rounds (each a fresh process per side)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per round")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per round")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="recompute activations on both sides (TRL's default)",
    )
    ap.add_argument(
        "--trl-same-allocator",
        action="store_true",
        help="apply axiom-rl's CPU malloc settings (axiom_rl/speed/host_memory.py) to TRL's process too",
    )
    ap.add_argument(
        "--same-settings",
        action="store_true",
        help="give TRL the settings axiom-rl applies to itself that are not the trainer: its CPU malloc "
        "settings and, on x86 CPUs that are not Intel's, float32 linear layers through oneDNN "
        "(axiom_rl/speed/cpu_matmul.py)",
    )
    ap.add_argument(
        "--ablations",
        nargs="*",
        choices=sorted(ABLATIONS),
        metavar="NAME",
        help="also run axiom-rl with each speed-up off in turn (all, or the ones named): "
        + ", ".join(ABLATIONS),
    )
    ap.add_argument(
        "--child", choices=["axiom", "trl", *(f"axiom:{a}" for a in ABLATIONS)], help=argparse.SUPPRESS
    )
    ap.add_argument("--setup", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    elsewhere = [a for a in args.ablations or [] if not ablation_applies(a, args.device)]
    if elsewhere:
        ap.error(
            f"--ablations {elsewhere[0]} changes nothing on {args.device}; it is for {ABLATION_DEVICE[elsewhere[0]]}"
        )
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0 or args.warmup + args.steps < 2:
        ap.error(
            "--rounds and --steps must be >= 1, --warmup >= 0, and --warmup + --steps >= 2 (a first step is never timed)"
        )
    if args.child:
        child(args)
        return

    import platform

    import torch
    import transformers
    import trl

    names = args.config or ["full", "lora", "rollout-heavy"]
    ablations = (
        [a for a in ABLATIONS if ablation_applies(a, args.device)]
        if args.ablations == []
        else args.ablations or []
    )
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores; device {args.device}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}; "
          f"{args.rounds} rounds x {args.steps} steps after {args.warmup} warm-up, alternating axiom-rl / TRL")  # fmt: skip
    allocator = (
        "the same malloc settings as axiom-rl"
        if args.trl_same_allocator or args.same_settings
        else "glibc's default malloc settings"
    )
    print(f"TRL runs with {allocator}")
    if args.same_settings:
        from axiom_rl.speed import cpu_matmul

        print(f"TRL's float32 linear layers run through {cpu_matmul.backend()}'s matmul, as axiom-rl's do")
    if args.device == "cpu":  # built here, once, not inside a timed side's first steps
        from axiom_rl.speed import native

        print(f"axiom-rl's C++ decode step: {'built' if native.op() else 'not available (Python step)'}")
    print()
    for name in names:
        setup = replace(CONFIGS[name], gradient_checkpointing=args.gradient_checkpointing)
        with tempfile.TemporaryDirectory() as tmp:
            params = build_model_dir(setup, Path(tmp))
            prompt_len = statistics.mean(len(p) for p in prompts(setup.prompts))  # one token per character
            # Measured before the first round and again after each (a few seconds each time, with
            # no side running), and the best taken: what the machine allows, not a busy moment.
            measured = [measure_machine(setup, prompt_len, args.device)]
            order = ["axiom", "trl"] + [f"axiom:{a}" for a in ablations]
            sides: dict[str, dict[str, list[float]]] = {side: {} for side in order}
            peaks: dict[str, list[float]] = {side: [] for side in order}
            for round_ in range(args.rounds):
                for side in order:
                    r = run_side(side, setup, Path(tmp), args)
                    for k in ("step_s", "generation_s", "reference_s", "forward_s", "backward_s", "tokens"):
                        sides[side].setdefault(k, []).extend(r[k])
                    peaks[side].append(r["peak_mb"])
                    # As each round ends, so that a run cut short still shows what it measured.
                    print(f"   {name} round {round_ + 1}/{args.rounds} {label_of(side)}: {med(r['step_s']):.3f} s/step "
                          f"(generation {med(r['generation_s']):.3f} s), peak {r['peak_mb']:.0f} MB", flush=True)  # fmt: skip
                measured.append(measure_machine(setup, prompt_len, args.device))
        best = fastest(measured)
        rates, bandwidth, bound = best.rates, best.bandwidth, best.bound
        rate = max(rates.values())
        own = axiom_work(setup, round(prompt_len), args.device)
        textbook = step_work(setup, round(prompt_len), prompts_once=False)
        floor = floor_seconds(own, rate, bandwidth)
        textbook_floor = floor_seconds(textbook, rate, bandwidth)
        seen = [max(m.rates.values()) for m in measured]
        checkpointing = "on" if setup.gradient_checkpointing else "off"
        print(
            f"== {name}: {setup.name}; {params / 1e6:.2f}M parameters; gradient checkpointing {checkpointing} on both sides"
        )
        memory = f", or its bytes at a measured {bandwidth / 1e9:.0f} GB/s where slower" if bandwidth else ""
        libraries = ", ".join(f"{lib} {r / 1e9:.0f}" for lib, r in rates.items())
        print(
            f"   compute floor {floor * 1e3:.0f} ms/step: the {step_flops(own) / 1e9:.1f} GFLOP axiom-rl itself computes"
            f" at a measured {rate / 1e9:.0f} GFLOP/s{memory}; the textbook step (every row its own sequence,"
            f" nothing replayed: {step_flops(textbook) / 1e9:.1f} GFLOP) {textbook_floor * 1e3:.0f} ms."
            f" Matmul GFLOP/s by library: {libraries}; the best of {len(measured)} measurements, before the first"
            f" round and after each, which gave {min(seen) / 1e9:.0f}-{max(seen) / 1e9:.0f}"
        )
        note = busy_host_note(seen)
        if note:
            print(note)
        matmuls_s = sum(bound.values())
        print(
            f"   matmuls alone at this step's shapes, each with the faster library: {matmuls_s * 1e3:.0f} ms/step"
            f" ({matmuls_s / floor:.2f}x the floor); split "
            + " / ".join(f"{v * 1e3:.0f}" for v in bound.values())
            + " ms; a step computing what axiom-rl computes with these libraries cannot go below it"
        )
        if bandwidth:
            generation_bytes = own["prefill"][1] + own["decode"][1]
            print(
                f"   generation's memory floor: weights + KV cache, {generation_bytes / 1e9:.2f} GB a rollout at"
                f" {bandwidth / 1e9:.0f} GB/s = {generation_bytes / bandwidth * 1e3:.0f} ms,"
                f" {setup.prompts * setup.generations * setup.completion / (generation_bytes / bandwidth):.0f} tokens/s"
            )
        print(
            f"   {'side':<17}{'s/step median (range)':>26}{'gen tok/s':>11}{'peak MB median (range)':>24}"
            "   split: gen / ref / fwd / bwd (ms)   x floor   x textbook"
            + ("   gen x memory floor" if bandwidth else "")
        )
        steps_med = {}
        for side in order:
            label = label_of(side)
            s = sides[side]
            steps_med[side] = med(s["step_s"])
            gen_rate = sum(s["tokens"]) / sum(s["generation_s"]) if sum(s["generation_s"]) else float("nan")
            split = " / ".join(
                f"{med(s[k]) * 1e3:.0f}" for k in ("generation_s", "reference_s", "forward_s", "backward_s")
            )
            print(
                f"   {label:<17}{steps_med[side]:>10.3f} ({min(s['step_s']):.3f}-{max(s['step_s']):.3f}){gen_rate:>11.0f}"
                f"{med(peaks[side]):>11.0f} ({min(peaks[side]):.0f}-{max(peaks[side]):.0f})   {split:<30}   "
                f"{steps_med[side] / floor:>6.2f}x{steps_med[side] / textbook_floor:>11.2f}x"
                + (f"{med(s['generation_s']) / (generation_bytes / bandwidth):>22.2f}x" if bandwidth else "")
            )
        a, b = sides["axiom"], sides["trl"]
        gen_ratio = (sum(a["tokens"]) / sum(a["generation_s"])) / (sum(b["tokens"]) / sum(b["generation_s"]))
        print(f"   axiom-rl : TRL  steps/s {steps_med['trl'] / steps_med['axiom']:.2f}x, generation tokens/s {gen_ratio:.2f}x, "
              f"peak memory {med(peaks['axiom']) / med(peaks['trl']):.2f}x\n")  # fmt: skip

        for off in ablations:
            print(f"   with {off} ({ABLATIONS[off][0]}) axiom-rl's step takes "
                  f"{steps_med[f'axiom:{off}'] / steps_med['axiom']:.2f}x as long")  # fmt: skip
        if ablations:
            print()


if __name__ == "__main__":
    main()
