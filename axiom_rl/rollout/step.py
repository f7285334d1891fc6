"""The decode loop's token step in plain PyTorch, over a model's weights laid out once.

`Weights` holds a Qwen2-family model's current weights as the loop multiplies by them (q/k/v and
gate/up fused, LoRA folded in); `forward` runs new tokens through them, writing their keys and
values into a pre-allocated cache. The fast rollout backend (fast.py) decodes with it; the C++
step (speed/native.py) computes the same arithmetic, and checks itself against it. A packing
(speed/native.py: `rollout_linear`) may lay the weights out for a faster linear kernel; without
one the step is F.linear and torch.cat throughout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

# (linear, pack): pack(*parts) lays out the weight the parts stack into, for linear.
PackedLinear = tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]


def base_model(model: Any) -> Any:
    """The model under any peft wrapper."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def stacked(*parts: torch.Tensor) -> torch.Tensor:
    """torch.cat(parts), without a copy for a single part."""
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _effective(linear: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) of a Linear, with any active LoRA adapters folded into the weight."""
    if hasattr(linear, "base_layer"):  # a peft LoRA layer
        weight = linear.base_layer.weight
        bias = linear.base_layer.bias
        if not getattr(linear, "disable_adapters", False) and not getattr(linear, "merged", False):
            for name in linear.active_adapters:
                if name in linear.lora_A:
                    a = linear.lora_A[name].weight
                    b = linear.lora_B[name].weight
                    # weight + (b @ a) * scaling, in the product's own buffer: the same bits
                    # without the two temporaries of the weight's size
                    delta = (b @ a).to(weight.dtype)
                    weight = delta.mul_(linear.scaling[name]).add_(weight)
        return weight, bias
    return linear.weight, linear.bias


@dataclass
class _Layer:
    ln1: torch.Tensor
    wqkv: torch.Tensor  # [(h + 2 kvh) * hd, d]
    bqkv: torch.Tensor | None
    wo: torch.Tensor
    ln2: torch.Tensor
    wgu: torch.Tensor  # [2 * inter, d]
    wdown: torch.Tensor
    q_norm: torch.Tensor | None = None  # Qwen3: RMSNorm of each head's query and key, before rotary
    k_norm: torch.Tensor | None = None


class Weights:
    """The policy's current weights, in the layout the loop uses (built once per rollout)."""

    def __init__(self, model: Any, packing: PackedLinear | None = None) -> None:
        """`packing`: (linear, pack) for the linear layers (speed/native.py's rollout_linear
        chooses one for float32 on a CPU); None: F.linear over weights stacked by torch.cat."""
        base = base_model(model)
        cfg = base.config
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.theta = getattr(cfg, "rope_theta", None) or (getattr(cfg, "rope_parameters", None) or {}).get(
            "rope_theta", 10000.0
        )
        inner = base.model
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm.weight
        # `stack(*parts)` makes each weight the loop multiplies by, the fused q/k/v and gate/up from
        # their parts: a packing stacks them as it lays them out, without a torch.cat copy first.
        self.linear: Callable[..., torch.Tensor] = F.linear
        stack: Callable[..., torch.Tensor] = stacked
        if packing is not None:
            self.linear, stack = packing
        lm_head = _effective(base.lm_head)[0]
        self.vocab, self.intermediate = lm_head.shape[0], cfg.intermediate_size
        self.lm_head = stack(lm_head)
        self.layers = []
        for layer in inner.layers:
            att, mlp = layer.self_attn, layer.mlp
            (wq, bq), (wk, bk), (wv, bv) = (
                _effective(att.q_proj),
                _effective(att.k_proj),
                _effective(att.v_proj),
            )
            bqkv = torch.cat([bq, bk, bv]) if bq is not None else None
            wg, wu = _effective(mlp.gate_proj)[0], _effective(mlp.up_proj)[0]
            self.layers.append(
                _Layer(
                    layer.input_layernorm.weight,
                    stack(wq, wk, wv),
                    bqkv,
                    stack(_effective(att.o_proj)[0]),
                    layer.post_attention_layernorm.weight,
                    stack(wg, wu),
                    stack(_effective(mlp.down_proj)[0]),
                    att.q_norm.weight if hasattr(att, "q_norm") else None,
                    att.k_norm.weight if hasattr(att, "k_norm") else None,
                )
            )

    def rope(
        self, length: int, device: torch.device, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin tables [length, head_dim] for _rotate; sin's first half negated, where
        rotate_half's minus sign goes (x2 * -s is -x2 * s exactly, so nothing else changes)."""
        inv = 1.0 / (
            self.theta
            ** (torch.arange(0, self.head_dim, 2, device=device, dtype=torch.float32) / self.head_dim)
        )
        freqs = torch.outer(torch.arange(length, device=device, dtype=torch.float32), inv)
        emb = torch.cat([freqs, freqs], dim=-1)
        sin = emb.sin()
        sin[:, : self.head_dim // 2].neg_()
        return emb.cos().to(dtype), sin.to(dtype)


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), w, eps)  # one fused op
    if x.dtype in (torch.bfloat16, torch.float16):
        # Normalise in float32, round, then scale, as transformers does (one fused op for the first).
        return F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype) * w
    var = x.float().pow(2).mean(-1, keepdim=True)  # transformers normalises even float64 in float32
    return (x.float() * torch.rsqrt(var + eps)).to(x.dtype) * w


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """transformers' x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1], as one roll
    ([x2, x1]) and a sin table whose first half is negated (Weights.rope): fewer ops per layer."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * signed_sin


def _store(cache: torch.Tensor, start: int | torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """Write new keys or values [N, kvh, S, hd] into one layer's cache [N, kvh, T, hd] from slot
    `start`; return what attention reads: the slots filled so far.

    A slot held in a device tensor is the static form a captured CUDA graph needs (the same
    kernels with the same shapes every step): it writes there and returns the whole cache, whose
    unwritten slots are zero and hidden by the mask.
    """
    if isinstance(start, torch.Tensor):
        return cache.index_copy_(2, start, new)
    end = start + new.shape[2]
    cache[:, :, start:end] = new
    return cache[:, :, :end]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Attention of q [N, h, S, hd] over k, v [N, kvh, T, hd].

    `mask` is either boolean [N, 1, S, T] (prefill: SDPA) or, when decoding one token, an additive
    float bias [N, 1, 1, T] (0 or -inf). One query token is a matrix-vector product per row, where
    two grouped matmuls beat SDPA's general kernel with its mask and GQA expansion (on 2 CPU cores,
    518 vs 669 us per layer at 64 rows x 270 positions).
    """
    n, h, _, hd = q.shape
    kvh = k.shape[1]
    if mask.dtype == torch.bool:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=h != kvh)
    q = q.reshape(n, kvh, h // kvh, hd)  # the query heads that share each K/V head, side by side
    scores = torch.matmul(q, k.transpose(-1, -2)).mul_(hd**-0.5).add_(mask)  # [N, kvh, h/kvh, T]
    weights = scores.softmax(-1) if q.dtype == torch.float32 else scores.float().softmax(-1).to(q.dtype)
    return torch.matmul(weights, v).view(n, h, 1, hd)


def _qkv(
    linear: Callable[..., torch.Tensor],
    x: torch.Tensor,  # [N, S, d]
    layer: tuple[torch.Tensor | None, ...],  # ln1, wqkv, bqkv, q_norm, k_norm
    c: torch.Tensor,  # [N, 1, S, hd] rotary tables at the tokens' positions
    si: torch.Tensor,
    heads: int,
    kv_heads: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One layer's rotated queries [N, h, S, hd] and keys [N, kvh, S, hd], and its values
    [N, kvh, S, hd]: everything before the cache and attention."""
    ln1, wqkv, bqkv, q_norm, k_norm = layer
    n, s, _ = x.shape
    hd = c.shape[-1]
    qkv = linear(_rms(x, ln1, eps), wqkv, bqkv)  # [N, S, (h + 2 kvh) hd]
    qk, v = qkv.split([(heads + kv_heads) * hd, kv_heads * hd], dim=-1)
    qk = qk.view(n, s, heads + kv_heads, hd)
    if q_norm is not None:
        qk = torch.cat([_rms(qk[:, :, :heads], q_norm, eps), _rms(qk[:, :, heads:], k_norm, eps)], 2)
    qk = _rotate(qk.transpose(1, 2), c, si)  # q and k rotated together
    return qk[:, :heads], qk[:, heads:], v.view(n, s, kv_heads, hd).transpose(1, 2)


def _attention_out_and_mlp(
    linear: Callable[..., torch.Tensor],
    x: torch.Tensor,  # [N, S, d] the layer's input
    att: torch.Tensor,  # [N, h, S, hd] attention's output
    layer: tuple[torch.Tensor, ...],  # wo, ln2, wgu, wdown
    eps: float,
) -> torch.Tensor:
    """The layer's output: the residual stream after the attention's projection and the MLP."""
    wo, ln2, wgu, wdown = layer
    n, s = x.shape[:2]
    x = x + linear(att.transpose(1, 2).reshape(n, s, -1), wo)
    gate, up = linear(_rms(x, ln2, eps), wgu).chunk(2, dim=-1)
    return x + linear(F.silu(gate) * up, wdown)


def _logits(
    linear: Callable[..., torch.Tensor],
    x: torch.Tensor,
    norm: torch.Tensor,
    lm_head: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    return linear(_rms(x, norm, eps), lm_head)


class LayerOps(NamedTuple):
    """The pieces of a forward pass between its cache writes: plain functions, or (on a GPU's
    static decode step) the same functions compiled (see _compiled_ops)."""

    qkv: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = _qkv
    attend: Callable[..., torch.Tensor] = _attend
    out_and_mlp: Callable[..., torch.Tensor] = _attention_out_and_mlp
    logits: Callable[..., torch.Tensor] = _logits


def forward(
    w: Weights,
    ids: torch.Tensor,  # [N, S] new tokens
    positions: torch.Tensor,  # [N, S] rotary positions
    cache_k: torch.Tensor,  # [L, N, kvh, T, hd]
    cache_v: torch.Tensor,
    start: int | torch.Tensor,  # cache slot of ids[:, 0] (see _store)
    mask: torch.Tensor,  # see _attend: bool [N, 1, S, start + S], or a float bias when S == 1
    cos: torch.Tensor,
    sin: torch.Tensor,
    every_position: bool = False,
    ops: LayerOps = LayerOps(),
) -> torch.Tensor:
    """Logits of the last position [N, V] (every position [N, S, V] if asked); writes K/V of the
    new tokens into the cache."""
    x = F.embedding(ids, w.embed)  # [N, S, d]
    c, si = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)  # [N, 1, S, hd]
    for i, layer in enumerate(w.layers):
        before = (layer.ln1, layer.wqkv, layer.bqkv, layer.q_norm, layer.k_norm)
        q, k, v = ops.qkv(w.linear, x, before, c, si, w.heads, w.kv_heads, w.eps)
        att = ops.attend(q, _store(cache_k[i], start, k), _store(cache_v[i], start, v), mask)
        x = ops.out_and_mlp(w.linear, x, att, (layer.wo, layer.ln2, layer.wgu, layer.wdown), w.eps)
    return ops.logits(w.linear, x if every_position else x[:, -1], w.norm, w.lm_head, w.eps)
