"""The built-in tiny model: a small Qwen2 and a byte-level, one-token-per-byte tokenizer.

Nothing is downloaded. The tokenizer has one token per byte (256) and three specials, and no
merges: every ASCII character is one token, and any UTF-8 text encodes and decodes exactly. It is
built with the very pipeline transformers' Qwen2Tokenizer uses (NFC, the Qwen2 split regex,
byte-level mapping, byte-level decoding), because AutoTokenizer loads any tokenizer saved beside
a qwen2 model as a Qwen2Tokenizer: a plain character vocabulary would silently lose its spaces
and newlines on reload. Model and tokenizer save with `save_pretrained` and load again with plain
`AutoModelForCausalLM` / `AutoTokenizer`, like any hub model.

Sizes (parameters with the 259-token vocabulary):
    nano    2 layers,  hidden  64, 4 heads / 2 KV,  intermediate 176     0.13M  (tests)
    micro   4 layers,  hidden 128, 4 heads / 2 KV,  intermediate 352     0.81M  (quickstart)
    tiny    4 layers,  hidden 256, 4 heads / 2 KV,  intermediate 688     3.04M  (default; the benchmark's shape)
    small   8 layers,  hidden 384, 6 heads / 2 KV,  intermediate 1024    12.8M
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIALS = [PAD, EOS, UNK]
# transformers' Qwen2 pre-tokenizer regex (models/qwen2/tokenization_qwen2.py): with no merges
# it only decides where pieces start, which cannot change a one-token-per-byte encoding.
QWEN2_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def byte_symbols() -> list[str]:
    """The 256 printable stand-ins of byte-level BPE (GPT-2's bytes_to_unicode), in byte order."""
    keep = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping, extra = {}, 0
    for b in range(256):
        if b in keep:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return [mapping[b] for b in range(256)]


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
    """One token per byte (no merges), in Qwen2Tokenizer's pipeline so that it reloads as itself."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(SPECIALS + byte_symbols())}
    core = Tokenizer(
        models.BPE(
            vocab=vocab, merges=[], continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False
        )
    )
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK)
    tok.padding_side = "left"  # generation pads on the left
    if chat_template is not None:
        tok.chat_template = chat_template
    return tok


def tiny_config(
    size: str | TinySize = "tiny", vocab_size: int = len(SPECIALS) + 256, max_positions: int = 2048
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
