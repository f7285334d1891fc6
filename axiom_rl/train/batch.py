"""Token tensors for the loss, and the log-probs of completion tokens under a model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


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

    def rows(self, index: slice) -> TokenBatch:
        return TokenBatch(
            self.input_ids[index],
            self.attention_mask[index],
            self.position_ids[index],
            self.completion_ids[index],
            self.completion_mask[index],
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
    model: Any, batch: TokenBatch, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(completion token | prefix) [N, T] (float32), and the per-token entropy if asked.

    Only the last T+1 positions' logits are computed (`logits_to_keep`). Logits are divided by
    the sampling temperature, so the ratio is taken against the distribution that sampled.
    """
    t = batch.completion_length
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=t + 1,
        use_cache=False,
    )
    logits = out.logits[:, :-1, :].float()  # [N, T, V]: position j predicts completion token j
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logprobs = logp_all.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)  # [N, T]
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)  # [N, T]
    return logprobs, entropy
