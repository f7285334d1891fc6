"""The built-in tiny model: a small Qwen2 and a character-level tokenizer, built here.

Nothing is downloaded. The tokenizer has one token per printable ASCII character (plus newline
and tab) and three specials; it decodes back to exactly the text it encoded. Model and tokenizer
save with `save_pretrained` and load again with plain `AutoModelForCausalLM` / `AutoTokenizer`,
like any hub model.

Sizes (parameters with the 101-token vocabulary):
    nano    2 layers,  hidden  64, 4 heads / 2 KV,  intermediate 176     ~0.1M   (tests)
    micro   4 layers,  hidden 128, 4 heads / 2 KV,  intermediate 352     ~0.9M   (quickstart)
    tiny    4 layers,  hidden 256, 4 heads / 2 KV,  intermediate 688     ~2.95M  (default; the benchmark's)
    small   8 layers,  hidden 384, 6 heads / 2 KV,  intermediate 1024    ~11M
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
CHARS = [c for c in string.printable if c not in "\x0b\x0c\r"]  # 97 characters, "\n" and "\t" included


@dataclass(frozen=True)
class TinySize:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int


TINY_SIZES = {
    "nano": TinySize(64, 2, 4, 2, 176),
    "micro": TinySize(128, 4, 4, 2, 352),
    "tiny": TinySize(256, 4, 4, 2, 688),
    "small": TinySize(384, 8, 6, 2, 1024),
}


def build_char_tokenizer(chat_template: str | None = None) -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer (no merges: one token per character)."""
    from tokenizers import Tokenizer, decoders, models

    vocab = {tok: i for i, tok in enumerate([PAD, EOS, UNK, *CHARS])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    core.decoder = decoders.Fuse()  # join characters back without separators
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK)
    tok.padding_side = "left"  # generation pads on the left
    if chat_template is not None:
        tok.chat_template = chat_template
    return tok


def tiny_config(
    size: str | TinySize = "tiny", vocab_size: int = 3 + len(CHARS), max_positions: int = 2048
) -> Qwen2Config:
    spec = TINY_SIZES[size] if isinstance(size, str) else size
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )


def build_tiny_model(
    size: str | TinySize = "tiny", seed: int = 0
) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """A randomly initialised tiny Qwen2 (deterministic for a seed) and its tokenizer."""
    tokenizer = build_char_tokenizer()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(tiny_config(size, vocab_size=len(tokenizer)))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer
