"""Token tensors for the loss, and the log-probs of completion tokens under a model."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..speed import replay
from ..speed.replay import LinearOutputs


@dataclass
class TokenBatch:
    """Prompts left-padded to P, completions right-padded to T, concatenated: [N, P + T]."""

    input_ids: torch.Tensor  # [N, P+T]
    attention_mask: torch.Tensor  # [N, P+T]
    position_ids: torch.Tensor  # [N, P+T] counted from each row's first real token
    completion_ids: torch.Tensor  # [N, T]
    completion_mask: torch.Tensor  # [N, T] float, 1 on completion tokens

    @property
    def completion_length(self) -> int:
        return self.completion_ids.shape[1]

    def rows(self, index: slice | torch.Tensor) -> TokenBatch:
        """The rows `index` (a slice: views; a tensor of row numbers: copies), at the full width."""
        return TokenBatch(
            self.input_ids[index],
            self.attention_mask[index],
            self.position_ids[index],
            self.completion_ids[index],
            self.completion_mask[index],
        )

    def trimmed(self) -> TokenBatch:
        """Without the columns that are padding in every row: the prompts' leading ones (one
        prompt column stays, the position that predicts the first completion token) and the
        completions' trailing ones (one stays). A micro-batch of short rows cut from a batch padded
        to its longest row then costs what its own rows need. Positions are kept, so the real
        tokens' log-probs are the untrimmed batch's, to float rounding. Itself where nothing is
        padding throughout."""
        t = self.completion_length
        p = self.input_ids.shape[1] - t
        real = self.attention_mask.bool().any(0).tolist()  # [P + T], one read back
        lead = next((i for i in range(p) if real[i]), p)
        lead = max(0, min(lead, p - 1))
        width = max(1, next((j + 1 for j in range(t - 1, -1, -1) if real[p + j]), 0))
        if lead == 0 and width == t:
            return self
        columns = slice(lead, p + width)
        return TokenBatch(
            self.input_ids[:, columns],
            self.attention_mask[:, columns],
            self.position_ids[:, columns],
            self.completion_ids[:, :width],
            self.completion_mask[:, :width],
        )


def build_batch(
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device,
) -> TokenBatch:
    n = len(prompt_ids)
    p = max(len(r) for r in prompt_ids)
    t = max(1, max((len(r) for r in completion_ids), default=1))
    ids = torch.full((n, p + t), pad_id, dtype=torch.long)
    attn = torch.zeros((n, p + t), dtype=torch.long)
    for i, (pr, co) in enumerate(zip(prompt_ids, completion_ids)):
        ids[i, p - len(pr) : p] = torch.tensor(pr, dtype=torch.long)
        attn[i, p - len(pr) : p] = 1
        if co:
            ids[i, p : p + len(co)] = torch.tensor(co, dtype=torch.long)
            attn[i, p : p + len(co)] = 1
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    comp_mask = attn[:, p:].to(torch.float32)
    return TokenBatch(
        ids.to(device), attn.to(device), positions.to(device), ids[:, p:].to(device), comp_mask.to(device)
    )


def completion_logprobs(
    model: Any,
    batch: TokenBatch,
    temperature: float = 1.0,
    with_entropy: bool = False,
    share_prompts: bool = False,
    recorded: LinearOutputs | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(completion token | prefix) [N, T] (float32), and the per-token entropy if asked.

    Only the logits that predict completion tokens are computed. Logits are divided by the
    sampling temperature, so the ratio is taken against the distribution that sampled.

    With `share_prompts`, neighbouring rows with the same prompt (a GRPO group) run it once:
    see `_shared_prompt_logits`. The log-probs agree with the plain pass to float rounding.
    There, `recorded` (the rollout's linear outputs for these rows, from the same weights) stands
    in for the completion pass's linear layers where it fits (speed/replay.py).
    """
    t = batch.completion_length
    logits = _shared_prompt_logits(model, batch, recorded) if share_prompts else None
    if logits is None:
        out = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            logits_to_keep=t + 1,
            use_cache=False,
        )
        logits = out.logits[:, :-1, :]  # [N, T, V]: position j predicts completion token j
    logits = logits.float()
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logprobs = logp_all.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)  # [N, T]
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)  # [N, T]
    return logprobs, entropy


def prompt_runs(batch: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(first row of each run of neighbouring rows with the same padded prompt [U], the run of
    each row [N]). A GRPO batch holds its G rows of a prompt side by side."""
    p = batch.input_ids.shape[1] - batch.completion_length
    ids, mask = batch.input_ids[:, :p], batch.attention_mask[:, :p]
    starts = torch.ones(ids.shape[0], dtype=torch.bool, device=ids.device)
    # The mask too: a pad id may also be a real token (a tokenizer padding with EOS).
    starts[1:] = (ids[1:] != ids[:-1]).any(-1) | (mask[1:] != mask[:-1]).any(-1)
    return starts.nonzero().squeeze(-1), starts.long().cumsum(0) - 1


def micro_batches(
    batch: TokenBatch, parts: int, share_prompts: bool, regroup: bool = True, bucket: bool = True
) -> list[tuple[slice | torch.Tensor, TokenBatch]]:
    """(rows, their micro-batch) for each of `parts` gradient-accumulation micro-batches of
    ceil(N / parts) rows.

    One part: the whole batch as it is (rows a slice). More, with `bucket` (Speed.bucket_lengths;
    off: each micro-batch the next rows in the batch's order, at the batch's full width, which
    benchmarks/length_buckets.py measures against), length bucketing: each micro-batch cut to its own longest prompt and completion
    (`TokenBatch.trimmed`), and with `regroup` its rows chosen so that they need little padding:
    of three groupings, the rows in order, the rows sorted by length and the prompt groups sorted
    by their longest row, the one with the fewest token positions through the layers
    (`_positions`; with `share_prompts` each group's prompt counts once per micro-batch, as
    `_shared_prompt_logits` runs it). A micro-batch keeps its rows in the batch's order, so a
    group's rows in it stay neighbours. Which rows go together changes only the order of the
    gradient's sums, for a loss whose micro-batch losses add up alike however the rows are split
    (algorithms.regroupable); without `regroup` the rows keep their micro-batches."""
    n = batch.input_ids.shape[0]
    size = math.ceil(n / max(1, parts))
    if size >= n:
        return [(slice(0, n), batch)]
    in_order = [slice(start, min(n, start + size)) for start in range(0, n, size)]
    if not (bucket and regroup):
        return [(rows, batch.rows(rows).trimmed() if bucket else batch.rows(rows)) for rows in in_order]
    t = batch.completion_length
    mask = batch.attention_mask
    prompt_len, completion_len = mask[:, :-t].sum(-1).tolist(), mask[:, -t:].sum(-1).tolist()
    run = prompt_runs(batch)[1].tolist() if share_prompts else list(range(n))
    longest: dict[int, int] = {}
    for i, r in enumerate(run):
        longest[r] = max(longest.get(r, 0), prompt_len[i] + completion_len[i])
    by_row = sorted(range(n), key=lambda i: (-completion_len[i], -prompt_len[i], i))
    by_group = sorted(range(n), key=lambda i: (-longest[run[i]], run[i], i))
    groupings = [[list(range(rows.start, rows.stop)) for rows in in_order]] + [
        [sorted(order[s : s + size]) for s in range(0, n, size)] for order in (by_row, by_group)
    ]
    best = min(groupings, key=lambda g: _positions(g, prompt_len, completion_len, run, share_prompts))
    chosen = []
    for rows in best:
        contiguous = rows == list(range(rows[0], rows[-1] + 1))
        index = (
            slice(rows[0], rows[-1] + 1) if contiguous else torch.tensor(rows, device=batch.input_ids.device)
        )
        chosen.append((index, batch.rows(index).trimmed()))
    return chosen


def _positions(
    grouping: list[list[int]], prompt_len: list[int], completion_len: list[int], run: list[int], share: bool
) -> int:
    """Token positions the layers run for micro-batches of these rows, each trimmed: every row's
    completion at the micro-batch's longest, and its prompt at the longest prompt, once per row or,
    with `share`, once per group in the micro-batch."""
    total = 0
    for rows in grouping:
        prompt_width = max(prompt_len[i] for i in rows)
        prompts = len({run[i] for i in rows}) if share else len(rows)
        total += prompts * prompt_width + len(rows) * max(completion_len[i] for i in rows)
    return total


def drops_out(model: Any) -> bool:
    """Does a forward pass of `model` draw dropout masks now (training mode, a dropout module
    with p > 0 -- LoRA's too -- or attention dropout in the config, which transformers applies
    as a function)?"""
    if not model.training:
        return False
    if (getattr(getattr(model, "config", None), "attention_dropout", 0.0) or 0.0) > 0:
        return True
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def _select_rows(cache: Any, index: torch.Tensor) -> None:
    """`cache.batch_select_indices(index)`, each layer's keys and values gathered by index_select:
    the same values, and the same gradient bits, but a backward that adds each row's gradient into
    its prompt's row by index_add, where advanced indexing's scatters with index_put's
    accumulation, some 290 against 50 µs a layer's keys at the step benchmark's full configuration
    (a millisecond or two of a step's backward). Caches laid out otherwise keep their own method."""
    layers = getattr(cache, "layers", None)
    if not layers or not all(
        isinstance(getattr(layer, "keys", None), torch.Tensor)
        and isinstance(getattr(layer, "values", None), torch.Tensor)
        for layer in layers
    ):
        cache.batch_select_indices(index)
        return
    for layer in layers:
        layer.keys = layer.keys.index_select(0, index)
        layer.values = layer.values.index_select(0, index)


def _shared_prompt_logits(
    model: Any, batch: TokenBatch, recorded: LinearOutputs | None = None
) -> torch.Tensor | None:
    """Logits [N, T, V] predicting the completion tokens, each distinct prompt run once.

    The prompts go through the model alone (one row per run of equal prompts), keeping their
    keys and values; those are indexed out to every row of the run, and the completions run
    on top of them. Gradients reach the prompt's computation through that indexing, summed over
    the run's rows, as they would through G separate copies. With G completions of length T
    per prompt of length P, the passes handle P + G*T tokens a group instead of G*(P + T).

    None where there is nothing to share (every row its own prompt), the model keeps no cache
    in this mode (gradient checkpointing) or drops out in this mode (one prompt pass would draw
    one dropout mask for the G rows that G copies give G masks): the caller runs the plain pass.
    """
    n, t = batch.input_ids.shape[0], batch.completion_length
    p = batch.input_ids.shape[1] - t
    # Under DDP, one forward call per backward goes through the wrapper (it readies the
    # gradient all-reduce per call); the prompt pass calls the wrapped module directly. Its
    # parameters' gradients still arrive through the completion pass's graph.
    prompt_model = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    if p == 0 or getattr(prompt_model, "is_gradient_checkpointing", False) or drops_out(prompt_model):
        return None
    firsts, run_of_row = prompt_runs(batch)
    if len(firsts) == n:
        return None
    prompt = prompt_model(
        input_ids=batch.input_ids[firsts, :p],
        attention_mask=batch.attention_mask[firsts, :p],
        position_ids=batch.position_ids[firsts, :p],
        # The last position, as an index rather than `1`: indexing copies it out contiguous, where
        # a slice would leave a strided view, which ATen's matmul multiplies by the lm_head as one
        # matrix product when the weight requires grad but batched when it does not (a frozen
        # reference), and the two round differently (MKL on an Intel CPU): the reference's
        # log-probs would not be the policy's, bit for bit, at the same weights.
        logits_to_keep=torch.tensor([p - 1], device=batch.input_ids.device),
        use_cache=True,
    )
    cache = prompt.past_key_values
    if cache is None or not hasattr(cache, "batch_select_indices"):
        return None
    first_logits = prompt.logits.index_select(0, run_of_row)  # [N, 1, V]: the prompt's last position
    if t == 1:
        return first_logits
    _select_rows(cache, run_of_row)
    replayed = (
        replay.replay_map(prompt_model, recorded, batch.completion_ids, batch.completion_mask)
        if recorded
        else {}
    )
    with replay.replaying(replayed):
        out = model(
            input_ids=batch.input_ids[:, p:-1],
            attention_mask=batch.attention_mask[:, :-1],
            position_ids=batch.position_ids[:, p:-1],
            past_key_values=cache,
            logits_to_keep=t - 1,
            use_cache=True,
        )
    return torch.cat([first_logits, out.logits], dim=1)
