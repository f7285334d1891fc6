"""Rollout: G completions per prompt, behind one small interface.

A backend turns prompts into completions; everything after (verification, rewards, loss) sees
only token ids and text. Completions end at EOS (kept: the model must learn to stop) or at the
first stop string (kept, as far as the token that completes it). The padding token is never
sampled (when it is not also EOS), so it only ever means padding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..errors import UserError


@dataclass
class Rollout:
    """One rollout batch, prompt-major: rows i*G .. i*G+G-1 belong to prompt i."""

    prompt_ids: list[list[int]]  # [B*G] token ids of each row's prompt (no padding)
    completion_ids: list[list[int]]  # [B*G] sampled tokens, cut at EOS or a stop string
    texts: list[str]  # [B*G] decoded completions (what the verifier reads)
    finished: list[bool]  # [B*G] ended by EOS or a stop string (not by the length limit)
    truncated_prompts: int = 0  # prompts (of B) longer than max_prompt_length, cut on the left
    # What the policy's linear layers computed for the fed-back tokens, where the backend was asked
    # to record them (speed/replay.LinearOutputs); the trainer's first pass replays them.
    linear_outputs: Any = None


# Called once for every row of a rollout as soon as its text is final (row, text): during decoding
# for a row that ends early where the backend can tell, at the end for the others. The trainer
# starts verifying there (overlap_verification).
OnFinished = Callable[[int, str], None]


class RolloutBackend(Protocol):
    name: str

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
    ) -> Rollout: ...


def encode_prompts(
    tokenizer: Any, prompts: Sequence[str], max_prompt_length: int
) -> tuple[list[list[int]], int]:
    """Token ids of each prompt, keeping the *last* max_prompt_length tokens, and how many
    prompts lost their beginning that way.

    One call per prompt: a batch call hands the prompts to the tokenizers library's thread pool,
    whose threads may wait for cores that PyTorch's OpenMP threads are still spinning on. In
    training steps on 2 cores (4 short prompts, 24 rollouts) the batch call took 0.37-4.4 ms,
    mean 0.93; one by one 0.58-0.69 ms, mean 0.62."""
    ids = [tokenizer(prompt, add_special_tokens=False)["input_ids"] for prompt in prompts]
    return [row[-max_prompt_length:] for row in ids], sum(len(row) > max_prompt_length for row in ids)


def truncation_warning(truncated: int, prompts: int, max_prompt_length: int) -> str:
    return (
        f"{truncated} of {prompts} prompts were longer than max_prompt_length ({max_prompt_length} "
        "tokens) and lost their beginning; raise --max-prompt-length"
    )


def trim_completion(
    tokens: Sequence[int], tokenizer: Any, stop_strings: Sequence[str]
) -> tuple[list[int], bool]:
    """Cut sampled tokens after EOS or after the token that completes a stop string.

    Works on tokens, never re-tokenising text, so log-probs later line up with what was sampled.
    """
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    out: list[int] = []
    text = ""
    for tok in tokens:
        if tok == pad and pad != eos:
            break
        out.append(tok)
        if tok == eos:
            return out, True
        if stop_strings:
            text += tokenizer.decode([tok])
            if any(s in text for s in stop_strings):
                return out, True
    return out, False


def generate_verified(
    backend: RolloutBackend,
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    num_generations: int,
    stop_strings: Sequence[str],
    settings: Any,
    verification: Any,
) -> Rollout:
    """`backend.generate` with the sampling settings of a train or eval config (`settings`), each
    row handed to `verification` (verifier.BatchVerification) as it finishes. If generation
    fails, the rows already handed over are verified no further and nothing more starts."""
    try:
        return backend.generate(
            model,
            tokenizer,
            prompts,
            num_generations,
            settings.max_completion_length,
            settings.temperature,
            settings.top_p,
            stop_strings,
            settings.max_prompt_length,
            on_finished=verification.on_finished,
        )
    except BaseException:
        verification.discard()
        raise


def decode_completion(tokenizer: Any, tokens: Sequence[int]) -> str:
    return tokenizer.decode(list(tokens), skip_special_tokens=True)


BACKENDS = ("auto", "fast", "hf")


def get_backend(name: str, model: Any = None, min_new_tokens: int = 0, speed: Any = None) -> RolloutBackend:
    """'fast' (axiom-rl's decode loop: Qwen2, Qwen3, Llama and Mistral models), 'hf' (transformers
    generate), or 'auto' (fast where it supports the model, else hf). `speed`: the decode loop's
    speed-ups (axiom_rl.speed.Speed; default all on)."""
    from .fast import FastBackend, supports
    from .hf import HFBackend

    if name == "hf":
        return HFBackend(min_new_tokens)
    if name == "fast":
        if model is not None and not supports(model):
            raise UserError(
                "the fast rollout backend supports Qwen2, Qwen3, Llama and Mistral models (default rotary "
                "embeddings, no sliding window, no biases beyond Qwen2's); use --rollout-backend hf"
            )
        return FastBackend(min_new_tokens, speed)
    if name == "auto":
        return (
            FastBackend(min_new_tokens, speed)
            if model is not None and supports(model)
            else HFBackend(min_new_tokens)
        )
    raise UserError(f"unknown rollout backend {name!r}; choose from: {', '.join(BACKENDS)}")


def left_pad(
    rows: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, L] ids and attention mask, padded on the left."""
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
    return ids.to(device), mask.to(device)
