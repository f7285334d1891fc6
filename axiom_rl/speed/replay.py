"""The rollout's linear-layer outputs, replayed in the first training pass over the same tokens.

With one optimizer step per rollout (GRPO's usual mu = 1), the policy's training forward runs the
weights that just sampled the completions over the very tokens the rollout fed back, one at a
time, during decoding: every linear layer computes again what it computed then. On a CPU the
rollout's C++ decode step (speed/decode_step.cpp) can copy those outputs out as it goes
(`LinearOutputs`, a few thousand values a layer a token), and the training pass over the
completions then takes them instead of multiplying again (`replaying`): each replayed layer keeps
its input and weight for backward, as F.linear does, and its backward is F.linear's. Everything
between the linear layers (norms, RoPE, attention, SiLU, the loss) still runs under autograd, so
the graph and the gradients are the usual ones. What it saves is the forward's matmuls over the
completion tokens: at the step benchmark's full configuration most of the policy's forward.

The replayed values are the rollout's, computed by its own kernels a row at a time, so they agree
with the training pass's own to float32 rounding, not bit for bit (the log-probs to about 1e-6),
and seeded runs give other figures than without it. It applies only where it is the same
computation:
- the rollout ran the C++ step in float32 on a CPU and recorded (`allocate`: within `MAX_BYTES`);
- the first optimizer step after that rollout (later ones have other weights), the completion
  pass of a batch whose prompts run once per group (train/batch.py);
- each row's completion tokens are the ones the rollout fed (`replay_map` checks them);
- a layer is a plain nn.Linear, or a peft LoRA layer that is plain LoRA around one (one adapter,
  no dropout, no DoRA): its value is the folded weight's (W + B A * scaling) x, which the rollout
  multiplied by, and its backward is the one of base(x) + B(A(x)) * scaling; A(x), a product of
  rank r, runs as usual.
`Speed.replay_linear_outputs` off turns it off: the trainer has the rollout record nothing (the
step benchmark's `no-replay` ablation).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from . import cpu_matmul

# The most a rollout's record may take. Gate and up, the largest part, stand in for tensors the
# training pass would keep for backward anyway; the rest is extra until the pass has read it.
MAX_BYTES = 1 << 30

# A decoder layer's linear layers in the record's order (decode_step.cpp's `keep`).
PROJECTIONS = (
    ("self_attn", "q_proj"),
    ("self_attn", "k_proj"),
    ("self_attn", "v_proj"),
    ("self_attn", "o_proj"),
    ("mlp", "gate_proj"),
    ("mlp", "up_proj"),
    ("mlp", "down_proj"),
)


@dataclass
class LinearOutputs:
    """What the policy's linear layers computed for the tokens a rollout fed back, step by step."""

    layers: list[list[torch.Tensor]]  # per layer, PROJECTIONS' outputs [N, S, width] (biases added)
    logits: torch.Tensor | None  # [N, S, V], where they fitted in MAX_BYTES
    fed: torch.Tensor  # [N, steps]: the token each row fed at each recorded step
    steps: int = 0  # steps recorded so far

    def flat(self) -> list[torch.Tensor]:
        """The tensors in decode_step.cpp's order."""
        return [t for layer in self.layers for t in layer] + (
            [self.logits] if self.logits is not None else []
        )

    def rows(self, index: slice | torch.Tensor) -> LinearOutputs:
        return LinearOutputs(
            [[t[index] for t in layer] for layer in self.layers],
            None if self.logits is None else self.logits[index],
            self.fed[index],
            self.steps,
        )


def record_widths(q: int, kv: int, hidden: int, inner: int) -> list[int]:
    return [q, kv, kv, hidden, inner, inner, hidden]


def allocate(
    rows: int,
    steps: int,
    layers: int,
    widths: list[int],
    vocab: int,
    device: torch.device,
    reuse: LinearOutputs | None = None,
) -> LinearOutputs | None:
    """Buffers for `steps` decode steps of `rows` rows: with the logits where everything fits in
    MAX_BYTES, without them where the layers alone do, else None. `reuse`'s own where they have
    those shapes (a record nothing reads any more: fresh buffers of a rollout-heavy step's size,
    hundreds of MB, page-fault in again at every rollout). New ones hold zeros: the decode loop
    writes no row after its last token (rollout/fast.py's _Decoding), so the padding the training
    pass runs past a row's end reads zeros or an earlier rollout's values, never uninitialised
    memory (which may hold any bits, NaN among them). Not inference tensors (the training pass
    keeps some of them for backward), so call it outside torch.inference_mode."""
    per_token = layers * sum(widths)
    for with_logits in (True, False):
        if rows * steps * 4 * (per_token + vocab * with_logits) <= MAX_BYTES and steps > 0:
            shapes = [(rows, steps, w) for _ in range(layers) for w in widths]
            shapes += [(rows, steps, vocab)] * with_logits
            if reuse is not None and [tuple(t.shape) for t in reuse.flat()] == shapes:
                return LinearOutputs(reuse.layers, reuse.logits, reuse.fed[:, :0])
            new = functools.partial(torch.zeros, dtype=torch.float32, device=device)
            return LinearOutputs(
                [[new((rows, steps, w)) for w in widths] for _ in range(layers)],
                new((rows, steps, vocab)) if with_logits else None,
                torch.empty((rows, 0), dtype=torch.long, device=device),
            )
    return None


def _decoder(model: Any) -> Any:
    """The transformers causal LM inside a DDP wrapper and a peft model."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model = model.module
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _plain(module: Any) -> bool:
    return type(module) is torch.nn.Linear


@dataclass
class _Lora:
    """A peft LoRA layer that computes base(x) + B(A(x)) * scaling and nothing else."""

    base: torch.nn.Linear
    a: torch.nn.Linear
    b: torch.nn.Linear
    scaling: float


def _lora(module: Any) -> _Lora | None:
    """The parts of a peft LoRA Linear whose forward is plain LoRA with one adapter (enabled, not
    merged, no dropout, no variant such as DoRA, no bias on B), around a plain Linear: what the
    rollout folds into one weight (rollout/step.py's `_effective`); else None."""
    base = getattr(module, "base_layer", None)
    lora_a, lora_b = getattr(module, "lora_A", None), getattr(module, "lora_B", None)
    if not _plain(base) or cpu_matmul.packed(base) or lora_a is None or lora_b is None:
        return None
    if getattr(module, "disable_adapters", True) or getattr(module, "merged", True):
        return None
    active = [name for name in module.active_adapters if name in lora_a]
    if len(active) != 1 or active[0] in getattr(module, "lora_variant", {}):
        return None
    name = active[0]
    a, b, dropout = lora_a[name], lora_b[name], module.lora_dropout[name]
    if not (_plain(a) and _plain(b)) or b.bias is not None or getattr(dropout, "p", 0.0) > 0:
        return None
    return _Lora(base, a, b, float(module.scaling[name]))


def _replayable(module: Any) -> bool:
    return _plain(module) or _lora(module) is not None


def replayable(model: Any) -> bool:
    """Whether a training pass of `model` could replay any recorded layer (a known decoder layout
    with at least one plain nn.Linear or plain LoRA layer)."""
    layers = _layers(_decoder(model))
    return layers is not None and any(_replayable(m) for layer in layers for m in layer)


def _layers(decoder: Any) -> list[list[Any]] | None:
    try:
        return [[getattr(getattr(layer, a), b) for a, b in PROJECTIONS] for layer in decoder.model.layers]
    except AttributeError:
        return None


def replay_map(
    model: Any, outputs: LinearOutputs, completion_ids: torch.Tensor, completion_mask: torch.Tensor
) -> dict[Any, torch.Tensor]:
    """{module: its recorded output [N, T - 1, width]} for the completion pass of a batch whose
    completions are `completion_ids` [N, T] (the pass feeds tokens 0 .. T-2); empty where the
    record does not fit this batch: too few steps recorded, or another token fed at a completion
    position (positions past a row's end are not compared: nothing that counts reads them)."""
    decoder = _decoder(model)
    layers = _layers(decoder)
    length = completion_ids.shape[1] - 1
    if layers is None or len(layers) != len(outputs.layers) or not 0 < length <= outputs.steps:
        return {}
    fed = outputs.fed[:, :length].to(completion_ids.device)
    if fed.shape[0] != completion_ids.shape[0] or bool(
        ((fed != completion_ids[:, :length]) & (completion_mask[:, :length] > 0)).any()
    ):
        return {}
    mapping = {
        module: recorded[:, :length]
        for modules, records in zip(layers, outputs.layers)
        for module, recorded in zip(modules, records)
        if _replayable(module)
    }
    head = getattr(decoder, "lm_head", None)
    if outputs.logits is not None and _plain(head):
        mapping[head] = outputs.logits[:, :length]
    return mapping


# The modules being replayed now, by id: the lean MLP (activation_memory.py) multiplies by its
# down projection's weight itself, so it asks here, as the replayed forwards do.
_replaying: dict[int, torch.Tensor] = {}


def recorded_output(module: Any, x: torch.Tensor) -> torch.Tensor | None:
    """What `module` (a Linear being replayed) recorded for its input `x`, or None when it is not
    being replayed; an error where the record does not have the output's shape."""
    recorded = _replaying.get(id(module))
    if recorded is not None and (
        x.shape[:-1] != recorded.shape[:-1] or recorded.shape[-1] != module.out_features
    ):
        raise RuntimeError(f"replay: a recorded output {tuple(recorded.shape)} for an input {tuple(x.shape)}")
    return recorded


def as_output(recorded: torch.Tensor) -> torch.Tensor:
    """A record as an autograd Function's output. Downstream kernels take their fast paths on
    contiguous tensors; a record is one unless the batch is shorter than the rollout (a copy then)."""
    return recorded.view_as(recorded) if recorded.is_contiguous() else recorded.contiguous()


@contextlib.contextmanager
def replaying(outputs: dict[Any, torch.Tensor]) -> Iterator[None]:
    """Within it, each module of `outputs` returns its recorded output for its input (which must
    have the output's leading shape), differentiable as F.linear is; the modules' own forwards
    come back after it."""
    before = {module: vars(module).get("forward") for module in outputs}
    for module in outputs:
        lora = None if _plain(module) else _lora(module)
        module.forward = (
            functools.partial(_replayed_forward, module)
            if lora is None
            else functools.partial(_replayed_lora_forward, module, lora)
        )
    _replaying.update((id(module), recorded) for module, recorded in outputs.items())
    try:
        yield
    finally:
        for module, forward in before.items():
            _replaying.pop(id(module), None)
            if forward is None:
                del module.forward
            else:
                module.forward = forward


def _replayed_forward(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """F.linear(x, module.weight, module.bias), whose value the rollout recorded."""
    return _Replayed.apply(x, module.weight, module.bias, recorded_output(module, x))


class _Replayed(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, recorded: torch.Tensor
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return as_output(recorded)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        return (*cpu_matmul.linear_grads(grad, x, weight, ctx.has_bias, ctx.needs_input_grad[:3]), None)


def _replayed_lora_forward(module: Any, lora: _Lora, x: torch.Tensor) -> torch.Tensor:
    """base(x) + B(A(x)) * scaling (`lora`: the module's parts), whose value the rollout recorded
    (from the weight it folds the adapter into: the same value to float32 rounding). A(x) runs as
    usual, a product of rank r; the base's and B's products come from the record."""
    recorded = recorded_output(module, x)
    low = lora.a(x)  # [..., r]
    return _ReplayedLora.apply(
        x, lora.base.weight, lora.base.bias, low, lora.b.weight, lora.scaling, recorded
    )


class _ReplayedLora(torch.autograd.Function):
    """The value `recorded`; the gradients of base(x) + B(low) * scaling for x, the base's weight
    and bias where they train, `low` (A's output, whose own graph takes it on to A and x) and B."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        low: torch.Tensor,
        b_weight: torch.Tensor,
        scaling: float,
        recorded: torch.Tensor,
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight, low, b_weight)
        ctx.has_bias, ctx.scaling = bias is not None, scaling
        return as_output(recorded)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, low, b_weight = ctx.saved_tensors
        grad_x, grad_w, grad_bias = cpu_matmul.linear_grads(
            grad, x, weight, ctx.has_bias, ctx.needs_input_grad[:3]
        )
        # As autograd differentiates peft's `lora_B(low) * scaling`: the scaling first, then B's product.
        scaled = grad * ctx.scaling
        grad_low, grad_b, _ = cpu_matmul.linear_grads(
            scaled, low, b_weight, False, (ctx.needs_input_grad[3], ctx.needs_input_grad[4], False)
        )
        return grad_x, grad_w, grad_bias, grad_low, grad_b, None, None
