"""The process reward model: a causal LM's body with a one-logit head on every token (transformers'
token-classification model of the backbone's architecture, e.g. Qwen2ForTokenClassification),
read at the last token of each step: sigmoid(logit) is the probability the step is good.

It reads exactly what the policy saw and wrote: the prompt in the style it was trained with, then
the completion. Trained with binary cross-entropy on the step labels (soft labels allowed: the
Monte-Carlo ones). Saved with save_pretrained beside its tokenizer and a marker file naming the
prompt style; a directory without that marker is refused.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import UserError
from ..io import atomic_directory, write_text_atomic
from ..tasks.base import PROMPT_STYLES
from ..tasks.prompts import format_prompt
from ..types import Problem
from .labels import Labelled

MARKER = "axiom_rl_prm.json"
FORMAT = 1
MAX_TOKENS = 1024  # longer texts are cut on the left (the prompt's start); steps cut off are not read


def check_prm_dir(path: str) -> dict[str, Any]:
    """The marker of a PRM directory; UserError when `path` is not one."""
    marker = Path(path) / MARKER
    if not Path(path).is_dir():
        raise UserError(f"no such PRM directory: {path}")
    try:
        info = json.loads(marker.read_text()[:10_000])
    except FileNotFoundError:
        raise UserError(
            f"{path} is not a process reward model (no {MARKER}; make one with `axiom-rl prm train`)"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: unreadable {MARKER} ({e})") from None
    if (
        not isinstance(info, dict)
        or info.get("format") != FORMAT
        or info.get("prompt_style") not in PROMPT_STYLES
    ):
        raise UserError(f"{path}: {MARKER} is not one this version of axiom-rl wrote")
    return info


class ProcessRewardModel:
    """A PRM and its tokenizer, scoring steps in batches."""

    def __init__(self, model: Any, tokenizer: Any, prompt_style: str, chat_template: str = "auto") -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise UserError("a process reward model needs a fast tokenizer (character offsets of its tokens)")
        self.model, self.tokenizer = model, tokenizer
        self.prompt_style, self.chat_template = prompt_style, chat_template

    # ------------------------------------------------------------------ building, saving, loading

    @classmethod
    def from_backbone(
        cls,
        backbone: str,
        prompt_style: str,
        chat_template: str = "auto",
        tiny_size: str = "micro",
        seed: int = 0,
    ) -> ProcessRewardModel:
        """A new PRM on a causal LM's body (a directory, a hub name, a LoRA adapter, or "tiny"):
        its weights, a fresh head."""
        from transformers import AutoModelForTokenClassification

        from ..models.load import load_model_and_tokenizer

        lm, tokenizer = load_model_and_tokenizer(backbone, torch.float32, tiny_size, seed)
        config = copy.deepcopy(lm.config)
        config.num_labels = 1
        try:
            prm = AutoModelForTokenClassification.from_config(config)
        except ValueError as e:
            raise UserError(
                f"backbone {backbone!r}: transformers has no token-classification head for it ({e})"
            ) from None
        body = getattr(prm, prm.base_model_prefix)
        body.load_state_dict(getattr(lm, lm.base_model_prefix).state_dict())
        torch.manual_seed(seed)
        head = prm.score if hasattr(prm, "score") else prm.classifier
        torch.nn.init.normal_(head.weight, std=0.02)
        if getattr(head, "bias", None) is not None:
            torch.nn.init.zeros_(head.bias)
        return cls(prm, tokenizer, prompt_style, chat_template)

    def save(self, path: str) -> None:
        """Written whole or not at all (an existing directory is replaced only once the new one is)."""
        from ..models.load import no_progress_bars

        with atomic_directory(path) as tmp, no_progress_bars():
            self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            info = {"format": FORMAT, "prompt_style": self.prompt_style, "chat_template": self.chat_template}
            write_text_atomic(tmp / MARKER, json.dumps(info, indent=2) + "\n")

    @classmethod
    def load(cls, path: str) -> ProcessRewardModel:
        info = check_prm_dir(path)
        from transformers import AutoModelForTokenClassification, AutoTokenizer

        from ..models.load import no_progress_bars

        try:
            with no_progress_bars():
                model = AutoModelForTokenClassification.from_pretrained(path, dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as e:
            raise UserError(f"cannot load the PRM in {path}: {str(e).splitlines()[0][:200]}") from None
        rows = model.get_input_embeddings().num_embeddings
        if len(tokenizer) > rows:
            raise UserError(
                f"{path}: its tokenizer has {len(tokenizer)} tokens, its model {rows} embeddings: not a pair"
            )
        model.eval()
        return cls(model, tokenizer, info["prompt_style"], str(info.get("chat_template", "auto")))

    # ------------------------------------------------------------------ encoding

    def encode(self, problem: Problem, completion: str, ends: Sequence[int]) -> tuple[list[int], list[int]]:
        """(token ids, the position of each step's last token) for prompt + completion; a step
        whose end was cut off (texts past MAX_TOKENS lose their start) gets position -1."""
        prompt = format_prompt(problem, self.tokenizer, self.prompt_style, self.chat_template)
        enc = self.tokenizer(prompt + completion, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
        cut = max(0, len(ids) - MAX_TOKENS)
        ids, offsets = ids[cut:], offsets[cut:]
        positions = []
        k = 0
        for end in ends:
            absolute = len(prompt) + end
            while k + 1 < len(offsets) and offsets[k + 1][0] < absolute:
                k += 1
            inside = bool(offsets) and offsets[k][0] < absolute <= len(prompt) + len(completion)
            positions.append(k if inside else -1)
        return ids, positions

    def _batch(self, encoded: Sequence[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(ids) for ids, _ in encoded)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(encoded), width), pad, dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for i, (row, _) in enumerate(encoded):  # right padding: positions stay as encoded
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        return ids, mask

    def logits(self, encoded: Sequence[tuple[list[int], list[int]]]) -> torch.Tensor:
        ids, mask = self._batch(encoded)
        return self.model(input_ids=ids, attention_mask=mask).logits[..., 0]  # [N, T]

    # ------------------------------------------------------------------ scoring

    @torch.no_grad()
    def score(
        self,
        problems: Sequence[Problem],
        completions: Sequence[str],
        ends: Sequence[Sequence[int]],
        batch_size: int = 32,
    ) -> list[list[float]]:
        """Each step's probability of being good; a step cut off by MAX_TOKENS scores 0.5 (unknown)."""
        self.model.eval()
        out: list[list[float]] = []
        for start in range(0, len(completions), batch_size):
            part = slice(start, start + batch_size)
            encoded = [self.encode(p, c, e) for p, c, e in zip(problems[part], completions[part], ends[part])]
            if not any(pos for _, pos in encoded):
                out.extend([] for _ in encoded)
                continue
            probs = torch.sigmoid(self.logits(encoded))
            for i, (_, positions) in enumerate(encoded):
                out.append([float(probs[i, k]) if k >= 0 else 0.5 for k in positions])
        return out


def train_prm(
    prm: ProcessRewardModel,
    examples: Sequence[Labelled],
    steps: int,
    lr: float,
    batch_size: int,
    seed: int,
    progress: Callable[[int, float], None] | None = None,
) -> list[float]:
    """AdamW on binary cross-entropy at the labelled positions, `steps` batches drawn with
    replacement; returns the loss per step."""
    if steps < 1 or batch_size < 1 or not (lr > 0 and math.isfinite(lr)):
        raise UserError("prm train needs steps >= 1, batch size >= 1 and a positive learning rate")
    encoded = [prm.encode(e.problem, e.completion, e.ends) for e in examples]
    usable = [(enc, ex.labels) for enc, ex in zip(encoded, examples) if any(k >= 0 for k in enc[1])]
    if not usable:
        raise UserError("no labelled step to train on (every example has no steps, or they were cut off)")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(prm.model.parameters(), lr=lr, weight_decay=0.0)
    prm.model.train()
    losses = []
    for step in range(steps):
        batch = [usable[rng.randrange(len(usable))] for _ in range(batch_size)]
        logits = prm.logits([enc for enc, _ in batch])
        rows, cols, targets = [], [], []
        for i, ((_, positions), labels) in enumerate(batch):
            for k, label in zip(positions, labels):
                if k >= 0:
                    rows.append(i)
                    cols.append(k)
                    targets.append(label)
        picked = logits[torch.tensor(rows), torch.tensor(cols)]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(picked, torch.tensor(targets))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if progress is not None:
            progress(step + 1, losses[-1])
    prm.model.eval()
    return losses
