"""The transformers backend: `model.generate` with a KV cache, sampling, EOS and stop strings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from . import OnFinished, Rollout, decode_completion, encode_prompts, left_pad, trim_completion


class HFBackend:
    name = "hf"

    def __init__(self, min_new_tokens: int = 0) -> None:
        self.min_new_tokens = min_new_tokens  # > 0 forces length (benchmarks: identical work)

    @torch.no_grad()
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
        device = next(model.parameters()).device
        prompt_ids, truncated = encode_prompts(tokenizer, prompts, max_prompt_length)
        ids, mask = left_pad(prompt_ids, tokenizer.pad_token_id, device)
        sampling = temperature > 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "do_sample": sampling,
            "num_return_sequences": num_generations,
            "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.eos_token_id,
        }
        if sampling:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
        if self.min_new_tokens:
            kwargs["min_new_tokens"] = self.min_new_tokens
        if tokenizer.pad_token_id is not None and tokenizer.pad_token_id != tokenizer.eos_token_id:
            kwargs["suppress_tokens"] = [tokenizer.pad_token_id]  # padding is never a token to generate
        if stop_strings:
            kwargs.update(stop_strings=list(stop_strings), tokenizer=tokenizer)
        if not sampling:  # greedy rows of one prompt are identical: generate once, repeat
            kwargs["num_return_sequences"] = 1
        out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
        if not sampling:
            out = out.repeat_interleave(num_generations, dim=0)
        sampled = out[:, ids.shape[1] :].tolist()  # [B*G, <=max_new_tokens], prompt-major
        rows_prompt, rows_completion, texts, finished = [], [], [], []
        for i, tokens in enumerate(sampled):
            kept, done = trim_completion(tokens, tokenizer, stop_strings)
            rows_prompt.append(prompt_ids[i // num_generations])
            rows_completion.append(kept)
            texts.append(decode_completion(tokenizer, kept))
            finished.append(done)
            if on_finished is not None:  # generate returns every row at once: all of them now
                on_finished(i, texts[-1])
        return Rollout(rows_prompt, rows_completion, texts, finished, truncated)
