"""A fast rollout backend for Qwen2-architecture models (and Qwen3, Llama and Mistral, which
compute nearly the same): axiom-rl's own decode loop.

What transformers' `generate` pays per token -- cache objects, mask building, logits processors,
output dataclasses, Python per layer of indirection -- is most of the time of a small model on a
CPU. This loop runs the same arithmetic with nothing else:

- each prompt is prefilled once, then its KV cache is copied to its G rows (generate prefills
  every row, G times the work);
- one pre-allocated KV cache [layers, rows, kv heads, prompt + completion, head dim]; attention
  reads a view of its filled part, with a mask for the left padding;
- rotary tables computed once; q/k/v and gate/up projections fused into one matmul each;
- sampling (temperature, top-p) on the device with the global torch RNG, so seeds decide it
  (beside the C++ step, the same calls made from C++: native.sample_next);
- LoRA adapters are folded into temporary effective weights for the rollout (W + scale * B A),
  so an adapted model decodes as fast as a plain one;
- in float32 on a CPU the weights are packed once per rollout: for the C++ step's own linear
  kernel, which both steps and the prefill call (native.py), or where it does not run, for oneDNN
  on CPUs where oneDNN's matmuls beat MKL's (speed/cpu_matmul.py);
- in float32 on a CPU the decode step runs as one C++ call (decode_step.cpp, built once by
  native.py): attention and the element-wise work between the linear layers in loops of its
  own, without the interpreter's or ATen's cost around each of some 30 calls a layer, so the
  logits agree with the Python step's to float32 rounding (with Speed.decode_own_kernels off it makes
  the Python step's ATen calls, and computes the same bits);
- the C++ step computes only the rows still going: from the step after a row's last token it is
  left out (_Decoding), which samples the same tokens in a fraction of the time where completions
  end at different lengths;
- on a CUDA device the decode step runs with static shapes, its pieces between cache writes
  compiled (torch.compile), captured once per rollout as a CUDA graph and replayed per token (see
  _StaticDecode): there, launching kernels is the cost.

It reads the model's own parameters, so it always samples from the current policy. `supports`
says which models it handles (standard Qwen2, Qwen3, Llama and Mistral causal LMs, with or
without LoRA); the trainer falls back to `hf` for anything else. tests/test_fast_rollout.py
checks its log-probs against the transformers forward pass.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch

from ..speed import Speed, cpu_matmul, native, replay
from . import OnFinished, Rollout, decode_completion, encode_prompts, trim_completion
from .step import LayerOps, Weights, base_model, forward

T = TypeVar("T")


# Causal LMs whose decoder computes what Qwen2's does, given the configuration checks in supports():
# RMSNorm, grouped-query attention with rotary embeddings on halves, a gated SiLU MLP, and the same
# module names. Qwen2 has biases on q, k and v; Llama and Mistral none (or biases this loop does
# not add, on o_proj and the MLP, which supports() refuses); Qwen3 none, and an RMSNorm of each
# head's query and key before the rotary embedding.
ARCHITECTURES = ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM")


def supports(model: Any) -> bool:
    base = base_model(model)
    if type(base).__name__ not in ARCHITECTURES:
        return False
    cfg = base.config
    rope = getattr(cfg, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    sliding = getattr(cfg, "use_sliding_window", False)  # Qwen2's switch
    if type(base).__name__ == "MistralForCausalLM":  # Mistral has a window unless it is None
        sliding = getattr(cfg, "sliding_window", None) is not None
    return (
        not sliding
        and getattr(cfg, "hidden_act", "silu") == "silu"
        and rope_type == "default"
        and getattr(cfg, "attention_dropout", 0.0) == 0.0
        and not getattr(cfg, "attention_bias", False)  # Llama's would be on o_proj too
        and not getattr(cfg, "mlp_bias", False)
        and getattr(cfg, "pretraining_tp", 1) <= 1
    )


def weights_for(model: Any, speed: Speed | None = None) -> Weights:
    """The policy's current weights for a rollout. Float32 weights on a CPU are laid out once per
    rollout, not on every call: for the C++ step's own kernel where it runs, else for oneDNN where
    oneDNN runs the model's matmuls (native.rollout_linear, under `speed`'s decode_linear_kernel
    and onednn_linear); elsewhere F.linear."""
    speed = speed or Speed()
    embed = base_model(model).model.embed_tokens.weight
    packing = None
    if embed.device.type == "cpu" and embed.dtype == torch.float32:
        onednn = speed.onednn_linear and cpu_matmul.applies(embed)
        packing = native.rollout_linear(onednn, kernel=speed.decode_linear_kernel)
    return Weights(model, packing)


def _rows_of_each_prompt(cache: torch.Tensor, g: int, filled: int) -> torch.Tensor:
    """A prefill's cache [L, B, kvh, T, hd] for G rows of each prompt, [L, B*G, kvh, T, hd]: only its
    first `filled` slots (the prompts) are copied; the rest hold nothing yet, and decoding writes
    each before anything reads it. (repeat_interleave copied every slot, three quarters of them
    unwritten at the step benchmark's sizes.)"""
    layers, b, heads, total, hd = cache.shape
    rows = cache.new_empty((layers, b * g, heads, total, hd))
    rows.view(layers, b, g, heads, total, hd)[..., :filled, :].copy_(cache[:, :, None, :, :filled])
    return rows


def _sample(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """One token per row, on the device: inverse-CDF sampling draws one uniform number per row
    (torch.multinomial draws one per vocabulary entry)."""
    if temperature <= 0:
        return logits.argmax(-1)
    logits = logits.float()
    probs = torch.softmax(logits if temperature == 1.0 else logits / temperature, dim=-1)  # x / 1 == x
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > top_p  # keep the smallest prefix reaching top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    cdf = probs.cumsum(-1)
    u = torch.rand((probs.shape[0], 1), device=probs.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u).squeeze(-1).clamp_(max=probs.shape[-1] - 1)


@torch.no_grad()
def teacher_forced_logits(model: Any, ids: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Logits [N, S, V] of left-padded sequences through this loop's arithmetic (for tests: they
    must equal the transformers forward pass)."""
    w = weights_for(model)
    n, s = ids.shape
    positions = (real.long().cumsum(-1) - 1).clamp(min=0)
    cos, sin = w.rope(s, ids.device, w.embed.dtype)
    shape = (len(w.layers), n, w.kv_heads, s, w.head_dim)
    cache_k = torch.empty(shape, device=ids.device, dtype=w.embed.dtype)
    cache_v = torch.empty_like(cache_k)
    causal = torch.ones((s, s), dtype=torch.bool, device=ids.device).tril()
    mask = (causal.unsqueeze(0) & real.unsqueeze(1)).unsqueeze(1) | torch.eye(
        s, dtype=torch.bool, device=ids.device
    )
    return forward(w, ids, positions, cache_k, cache_v, 0, mask, cos, sin, every_position=True)


@functools.cache
def _side_stream(device: torch.device) -> torch.cuda.Stream:
    """One side stream per device for every capture: cuBLAS keeps a workspace per stream it has
    run on, so a new stream per capture would hold a new workspace each time."""
    return torch.cuda.Stream(device)


def capture_cuda_graph(fn: Callable[[], T], device: torch.device) -> tuple[torch.cuda.CUDAGraph, T]:
    """Capture `fn` as a CUDA graph on `device`; returns the graph and fn's output, whose
    tensors each `graph.replay()` refills in place.

    fn runs once on a side stream first, as capture requires (lazy initialisation such as
    cuBLAS handles happens outside it), and capture runs with `device` current, since it uses
    the current device's streams (a launcher may leave another device current).
    """
    with torch.cuda.device(device):
        side = _side_stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
    return graph, out


# On a GPU, the static decode step's pieces between cache writes are compiled (torch.compile,
# Inductor's fused kernels) before capture: a graph replay of the plain ops runs some 40 small
# kernels a layer, and for a 0.5B model at 64 rows those are most of a token's time (H100: 2.67 ms
# a token plain, 1.54 ms compiled). Not bit for bit: fused element-wise work rounds once where the
# plain ops round at each step. Speed.compile_decode off: the plain ops (tests; the step
# benchmark's uncompiled-decode).
# The static step's cache length is rounded up to this many slots, so that rollouts whose prompts
# differ by a few tokens share one shape: no recompile of the compiled step (each costs seconds).
STATIC_CACHE_SLOTS = 64


@functools.cache
def _compiled_ops() -> LayerOps:
    """LayerOps compiled, once per process. One compiled function serves every layer (their
    weights are its inputs, alike in shape), so compiling takes seconds, not a model's depth in
    them; the cache writes stay outside, where they write in place. Shapes that change between
    rollouts (prompt lengths) recompile once, then as dynamic shapes (torch.compile's default)."""
    plain = LayerOps()
    return LayerOps(*(torch.compile(fn, fullgraph=True) for fn in plain))


@contextlib.contextmanager
def compiler_warnings_quiet() -> Iterator[None]:
    """Around a first compile, no warnings: torch's own modules and compiler warn as they go (a
    deprecation as Inductor imports torch.utils.mkldnn, dynamo reading .grad of non-leaf
    tensors, Inductor's advice to take TF32 for float32 matmuls, which the decode step keeps at
    float32's precision). None is the caller's to act on, and under a filter that turns warnings
    into errors (a test's) each would fail the compile."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class _StaticDecode:
    """The decode step -- every layer, one token per row -- with static shapes, captured once per
    rollout as a CUDA graph on a CUDA device and replayed for each token.

    Eager, a step launches some 40 kernels per layer from Python, and for a small model on a GPU
    those launches are the step: a 0.5B-sized Qwen2 at 64 rows took 16.8 ms per token eagerly on
    an H100, where reading its weights takes 0.25 ms. A replay is one launch. Shapes are static:
    the token, position and cache slot are device tensors each call fills, attention reads the
    whole cache (its unwritten slots zeroed and masked), and the logits land in one buffer. The
    replayed kernels are Inductor's fused ones where `compile` (2.67 -> 1.54 ms a token in
    that case). Off a GPU (tests) the same static step runs eagerly, with the plain ops.
    """

    def __init__(
        self,
        w: Weights,
        cache_k: torch.Tensor,
        cache_v: torch.Tensor,
        allowed: torch.Tensor,  # [N, T] additive attention bias, updated in place by the caller
        cos: torch.Tensor,
        sin: torch.Tensor,
        first_slot: int,
        compile: bool = True,
    ) -> None:
        n, total = allowed.shape
        device = allowed.device
        cache_k[:, :, :, first_slot:].zero_()  # never-written memory may hold NaN, which a mask cannot hide
        cache_v[:, :, :, first_slot:].zero_()
        self.tokens = torch.zeros((n, 1), dtype=torch.long, device=device)
        self.positions = torch.zeros((n, 1), dtype=torch.long, device=device)
        # Capture's warm-up run writes this slot, which the first real step overwrites before reading it.
        self.slot = torch.full((1,), first_slot, dtype=torch.long, device=device)
        self.inputs = (w, cache_k, cache_v, allowed.view(n, 1, 1, total), cos, sin)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.ops = LayerOps()
        self.compile_failed = False  # the backend then tries no more compiles (each costs seconds)
        if device.type != "cuda":
            return
        if compile:
            self.ops = _compiled_ops()
            try:  # compiles on capture's warm-up run, the first time for these shapes
                with compiler_warnings_quiet():
                    self.graph, self.logits = capture_cuda_graph(self.step, device)
            except Exception as e:  # no Triton, a compiler error: the plain ops, from now on
                self.compile_failed = True  # (each try would cost seconds of tracing, every rollout)
                cause = getattr(e, "inner_exception", None) or e  # what Inductor's wrapper says failed
                warnings.warn(
                    f"decode step not compiled: torch.compile failed ({native.first_line(cause)}); "
                    "decoding with the plain ops",
                    stacklevel=3,
                )
                self.ops = LayerOps()
        if self.graph is None:
            try:
                self.graph, self.logits = capture_cuda_graph(self.step, device)
            except RuntimeError as e:  # an op this build cannot capture: the same step, eagerly
                warnings.warn(f"decoding without a CUDA graph: capture failed ({e})", stacklevel=3)

    def step(self) -> torch.Tensor:
        w, cache_k, cache_v, mask, cos, sin = self.inputs
        return forward(
            w, self.tokens, self.positions, cache_k, cache_v, self.slot, mask, cos, sin, ops=self.ops
        )

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, slot: int) -> torch.Tensor:
        """Logits [N, V] after `tokens` [N] at `positions` [N], cached at `slot` (on a GPU, in a
        buffer the next call overwrites)."""
        self.tokens.copy_(tokens.view(-1, 1))
        self.positions.copy_(positions.view(-1, 1))
        self.slot.fill_(slot)
        if self.graph is None:
            return self.step()
        self.graph.replay()
        return self.logits


class FastBackend:
    name = "fast"

    def __init__(self, min_new_tokens: int = 0, speed: Speed | None = None) -> None:
        self.min_new_tokens = min_new_tokens  # > 0 forces length (benchmarks: identical work)
        # "auto": the static decode step (a CUDA graph) on a CUDA device where speed.static_decode,
        # the eager one elsewhere (in C++ for float32 on a CPU where it builds and
        # speed.decode_step: native.py); "static", "eager" or "python" (the eager step in Python
        # only) everywhere: tests compare them on one device.
        self.decode = "auto"
        # Which of the decode loop's speed-ups run (axiom_rl.speed): the C++ step and its kernels,
        # finished rows left out of it (drop_finished_rows), the compiled static step on a GPU.
        self.speed = speed or Speed()
        self.compile_failed = False  # a compile of the static step failed: plain ops from then on
        # The rows the decode step computed in the last rollout, summed over its token steps (the
        # work drop_finished saves; benchmarks and tests read it).
        self.last_row_steps = 0
        # Keep what the linear layers compute for each fed-back token (Rollout.linear_outputs),
        # where the C++ step runs: the trainer sets it when its first pass can replay them.
        self.record_linear_outputs = False
        self._spare_record: replay.LinearOutputs | None = None

    def recycle(self, record: replay.LinearOutputs | None) -> None:
        """Hand back a rollout's record once nothing reads it any more: the next rollout of the
        same shape writes into it (speed/replay.allocate)."""
        self._spare_record = record

    @torch.inference_mode()
    def generate(
        self,
        model: Any,
        tokenizer: Any,
        prompts: Sequence[str],
        num_generations: int,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        stop_strings: Sequence[str],
        max_prompt_length: int,
        on_finished: OnFinished | None = None,
    ) -> Rollout:
        w = weights_for(model, self.speed)
        device, dtype = w.embed.device, w.embed.dtype
        prompt_ids, truncated = encode_prompts(tokenizer, prompts, max_prompt_length)
        b, g = len(prompt_ids), num_generations
        p = max(len(r) for r in prompt_ids)
        static = self.decode == "static" or (
            self.decode == "auto" and device.type == "cuda" and self.speed.static_decode
        )
        total = p + max_new_tokens
        if static:  # prompts a few tokens longer or shorter than the last rollout's keep its shape
            total = -(-total // STATIC_CACHE_SLOTS) * STATIC_CACHE_SLOTS
        pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
        ids = torch.full((b, p), pad, dtype=torch.long)
        real = torch.zeros((b, p), dtype=torch.bool)
        for i, row in enumerate(prompt_ids):
            ids[i, p - len(row) :] = torch.tensor(row, dtype=torch.long)
            real[i, p - len(row) :] = True
        ids, real = ids.to(device), real.to(device)
        positions = (real.long().cumsum(-1) - 1).clamp(min=0)  # [B, P] counted from each prompt's start
        cos, sin = w.rope(total, device, dtype)
        layers = len(w.layers)
        cache_k = torch.empty((layers, b, w.kv_heads, total, w.head_dim), device=device, dtype=dtype)
        cache_v = torch.empty_like(cache_k)
        causal = torch.ones((p, p), dtype=torch.bool, device=device).tril()
        prefill_mask = (causal.unsqueeze(0) & real.unsqueeze(1)).unsqueeze(1)  # [B, 1, P, P]
        # Fully padded query rows (padding before the prompt) attend to themselves: harmless, never read.
        prefill_mask |= torch.eye(p, dtype=torch.bool, device=device).view(1, 1, p, p)
        logits = forward(w, ids, positions, cache_k, cache_v, 0, prefill_mask, cos, sin)  # [B, V]
        # Each prompt's cache, logits and positions are shared by its G rows from here on.
        cache_k, cache_v = (_rows_of_each_prompt(cache, g, p) for cache in (cache_k, cache_v))
        logits = logits.repeat_interleave(g, dim=0)
        n = b * g
        # Additive attention bias over cache slots: 0 where a row may attend, -inf elsewhere.
        allowed = torch.full((n, total), float("-inf"), dtype=dtype, device=device)
        allowed[:, :p].masked_fill_(real.repeat_interleave(g, dim=0), 0.0)
        next_pos = positions[:, -1].repeat_interleave(g) + 1  # [N]
        out = torch.full((n, max_new_tokens), pad, dtype=torch.long, device=device)
        done = torch.zeros(n, dtype=torch.bool, device=device)
        stop_check = _StopCheck(tokenizer, stop_strings)
        reported = [False] * n  # rows handed to on_finished
        static_step = (
            _StaticDecode(
                w,
                cache_k,
                cache_v,
                allowed,
                cos,
                sin,
                p,
                compile=self.speed.compile_decode and not self.compile_failed,
            )
            if static and max_new_tokens > 1
            else None
        )
        if static_step is not None and static_step.compile_failed:
            self.compile_failed = True
        # The eager token step: one C++ call where native.py has one for this model, else forward.
        use_native = static_step is None and self.decode != "python" and self.speed.decode_step
        native_step = (
            native.step_for(w, self.speed.decode_own_kernels, self.speed.decode_split_rows)
            if use_native
            else None
        )
        if native_step is not None:  # each prompt's G rows hold its p slots: read once for the G
            native_step = functools.partial(native_step, rows_per_prompt=g, prompt_slots=p)
        eager_step = native_step or functools.partial(forward, w)
        record = self._record(w, n, max_new_tokens - 1) if native_step is not None else None
        record_tensors = record.flat() if record is not None else []
        never = pad if pad is not None and pad != eos else None  # padding is never a token to generate
        # The C++ step leaves out rows that have finished (_Decoding); the static step keeps its
        # shapes, and the Python step computes every row.
        unit = native.split_unit(w, self.speed.decode_split_rows, self.speed.decode_own_kernels)
        rows = _Decoding(n, unit if native_step is not None else 1)
        drop_finished = self.speed.drop_finished_rows and native_step is not None
        ended = 0  # rows that have finished, fed padding from the next step on
        self.last_row_steps = 0
        steps = 0
        for t in range(max_new_tokens):
            blocked = eos if t < self.min_new_tokens else None  # forced length: EOS cannot be sampled yet
            if native_step is not None:  # the same calls in C++, writing out[:, t] too
                tokens = native.sample_next(logits, never, blocked, temperature, top_p, out, t, rows.computed)
            else:
                for token in (never, blocked):
                    if token is not None:
                        logits[:, token] = float("-inf")
                tokens = _sample(logits, temperature, top_p)  # [N]
                out[:, t] = tokens
            if t > self.min_new_tokens:  # no row is done before then
                tokens = torch.where(done, torch.full_like(tokens, pad), tokens)
                out[:, t] = tokens
            steps = t + 1
            if drop_finished and ended and (keeping := rows.to_keep(done, ended)) is not None:
                rows.keep(keeping)
            if t >= self.min_new_tokens:
                done |= tokens == eos
                if stop_check.active:
                    done |= stop_check(out, t, done)
                if on_finished is not None:
                    self._report_finished(out, t, done, reported, tokenizer, stop_strings, on_finished)
            # No row can be done before min_new_tokens: skip reading `done` back (a device sync) until then.
            if t >= self.min_new_tokens:
                ended = int(done.sum())
            if t + 1 == max_new_tokens or ended == n:
                break
            allowed[:, p + t] = 0.0
            self.last_row_steps += rows.count
            if static_step is not None:
                logits = static_step(tokens, next_pos, p + t)
            else:
                mask = allowed[:, : p + t + 1].view(n, 1, 1, p + t + 1)
                args = (tokens.unsqueeze(1), next_pos.unsqueeze(1), cache_k, cache_v, p + t, mask, cos, sin)
                extra: dict[str, Any] = {} if rows.computed is None else {"rows": rows.computed}
                if record is not None:
                    extra.update(record=record_tensors, record_at=t)
                    record.steps = t + 1
                logits = eager_step(*args, **extra)
            next_pos = next_pos + 1
        if record is not None:
            record.fed = out[:, : record.steps].clone()
        sampled = out[:, :steps].tolist()
        rows_prompt, rows_completion, texts, finished = [], [], [], []
        for i, tokens in enumerate(sampled):
            kept, stopped = trim_completion(tokens, tokenizer, stop_strings)
            rows_prompt.append(prompt_ids[i // g])
            rows_completion.append(kept)
            texts.append(decode_completion(tokenizer, kept))
            finished.append(stopped)
            if on_finished is not None and not reported[i]:
                on_finished(i, texts[-1])
        return Rollout(rows_prompt, rows_completion, texts, finished, truncated, record)

    @staticmethod
    def _report_finished(
        out: torch.Tensor,
        t: int,
        done: torch.Tensor,
        reported: list[bool],
        tokenizer: Any,
        stop_strings: Sequence[str],
        on_finished: OnFinished,
    ) -> None:
        """Hand the rows that ended at step t to on_finished, while the others decode on, and mark
        them in `reported`. Their text is final: a done row only gets padding from here on, which
        trimming drops."""
        for i, ended in enumerate(done.tolist()):
            if ended and not reported[i]:
                kept, _ = trim_completion(out[i, : t + 1].tolist(), tokenizer, stop_strings)
                on_finished(i, decode_completion(tokenizer, kept))
                reported[i] = True

    def _record(self, w: Weights, rows: int, steps: int) -> replay.LinearOutputs | None:
        if not self.record_linear_outputs:
            return None
        hidden, q, kv = w.embed.shape[1], w.heads * w.head_dim, w.kv_heads * w.head_dim
        widths = replay.record_widths(q, kv, hidden, w.intermediate)
        with torch.inference_mode(False):  # the training pass keeps some of them for backward
            spare, self._spare_record = self._spare_record, None
            return replay.allocate(rows, steps, len(w.layers), widths, w.vocab, w.embed.device, reuse=spare)


class _Decoding:
    """Which rows the C++ decode step computes, once it leaves out rows that have finished.

    A row that has finished (EOS or a stop string) is fed padding to the end of the rollout, and
    nothing reads what the step computes for it from then on; a rollout lasts as long as its
    longest row. Where completions end at different lengths, the step then spends much of its
    work on finished rows: on a CPU its time is close to proportional to its rows (at the step
    benchmark's rollout-heavy shape, 16, 32 and 64 rows took 283, 547 and 1,143 ms for 256 tokens).
    So from the step after a row's last token, the loop hands the step only the rows still going
    (`rows`), plus as many finished ones as make their number a multiple of `unit`, the row count
    the C++ step splits between its threads (native.split_unit). The step reads and writes those
    rows where the batch holds them (their caches, mask and record stay in place: nothing is
    copied) and returns their logits alone, from which native.sample_next samples those rows.

    Every row still going gets the same bits where the C++ step's own linear kernel runs (x86-64
    with AVX2 and FMA): it, the attention and the element-wise work compute each row alone,
    whatever rows share the step, and so does sampling. Elsewhere oneDNN or the BLAS may sum a row
    in another order for another number of rows, so a seed's tokens may differ from those of a run
    that kept every row, as they would on another machine.

    Sampling still draws a number for every row of the batch and uses those of the rows computed,
    so the generator moves as before and each row gets its old draw. A finished row's record
    (speed/replay.py) is not written after its last token: the training pass meets only padding
    there, and the record's buffers hold zeros or an earlier rollout's values, never garbage.
    """

    def __init__(self, n: int, unit: int) -> None:
        self.n, self.unit = n, unit
        self.computed: torch.Tensor | None = None  # the batch's rows the step computes; None: all n

    @property
    def count(self) -> int:
        """How many rows the step computes."""
        return self.n if self.computed is None else len(self.computed)

    def to_keep(self, done: torch.Tensor, ended: int) -> torch.Tensor | None:
        """The batch's rows to compute from this step on, given the rows `done` [N] that have
        finished (`ended` of them, fed padding from this step on), in increasing order; None where
        that leaves out none of those computed now."""
        going = self.n - ended
        keep = min(self.count, -(-going // self.unit) * self.unit)
        if going == 0 or keep == self.count:
            return None
        computed = (
            torch.ones_like(done)
            if self.computed is None
            else torch.zeros_like(done).index_fill_(0, self.computed, True)
        )
        finished = (computed & done).nonzero().squeeze(1)[: keep - going]  # to make up whole shares
        return torch.cat([(~done).nonzero().squeeze(1), finished]).sort().values

    def keep(self, rows: torch.Tensor) -> None:
        """Compute only `rows` of the batch from now on."""
        self.computed = rows


class _StopCheck:
    """Which rows just completed a stop string. Cheap: only rows whose newest token could end
    one (its text holds the last character of a stop string) decode their tail."""

    def __init__(self, tokenizer: Any, stop_strings: Sequence[str]) -> None:
        self.tokenizer, self.stops = tokenizer, list(stop_strings)
        self.active = bool(self.stops)
        if self.active:
            last_chars = {s[-1] for s in self.stops}
            vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
            self.enders = {
                i
                for i, tok in enumerate(vocab)
                if tok and any(ch in tokenizer.convert_tokens_to_string([tok]) for ch in last_chars)
            }
            self.window = max(len(s) for s in self.stops)

    def __call__(self, out: torch.Tensor, t: int, done: torch.Tensor) -> torch.Tensor:
        hit = torch.zeros_like(done)
        newest = out[:, t].tolist()
        for row, tok in enumerate(newest):
            if tok in self.enders and not bool(done[row]):
                tail = self.tokenizer.decode(out[row, max(0, t - self.window + 1) : t + 1].tolist())
                hit[row] = any(s in tail for s in self.stops)
        return hit
