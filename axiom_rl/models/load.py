"""Loading the policy: the built-in tiny model, a local directory, or a hub name; LoRA or full.

The reference policy for the KL penalty costs no memory with LoRA: it is the same network with
the adapter switched off (`reference_mode`). Full fine-tuning keeps a frozen copy. With beta = 0
there is no reference at all.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import UserError
from .activation_memory import lean_mlp_activations
from .tiny import TINY_SIZES, build_tiny_model

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
FINETUNE_MODES = ("auto", "lora", "full")
LORA_AUTO_PARAMS = 100_000_000  # finetune=auto uses LoRA above this many parameters


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise UserError(f"unknown device {device!r}; use cpu, cuda, cuda:N or auto") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device!r} requested but no CUDA GPU is available")
    return dev


def check_load_options(dtype: str, finetune: str = "auto") -> None:
    """The loading options that are names, checked before anything is written or loaded."""
    if dtype != "auto" and dtype not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r}; choose from: auto, {', '.join(DTYPES)}")
    if finetune not in FINETUNE_MODES:
        raise UserError(f"finetune must be lora, full or auto, got {finetune!r}")


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    check_load_options(dtype)
    if dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return DTYPES[dtype]


def check_model_spec(model: str, tiny_size: str = "tiny") -> str:
    """Classify `model` cheaply, before anything heavy loads: 'tiny', 'local' or 'hub'.

    A hub name is checked by fetching its config only (fails fast when offline or misspelt).
    """
    if model == "tiny":
        if tiny_size not in TINY_SIZES:
            raise UserError(f"unknown tiny size {tiny_size!r}; choose from: {', '.join(TINY_SIZES)}")
        return "tiny"
    path = Path(model).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise UserError(
                f"{model} is not a model directory (no config.json); expected save_pretrained output"
            )
        return "local"
    if model.startswith((".", "/", "~")) or os.sep in model.strip("/").split("/", 1)[-1]:
        raise UserError(f"no such model directory: {model}")
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(model)
    except Exception as e:  # offline, gated, misspelt: all mean "cannot use this name"
        reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise UserError(
            f"cannot load model {model!r} from the Hugging Face hub ({reason}); pass 'tiny' or a local directory"
        ) from None
    return "hub"


def load_model_and_tokenizer(
    model: str, dtype: torch.dtype, tiny_size: str = "tiny", seed: int = 0
) -> tuple[Any, Any]:
    """(model, tokenizer) on the CPU, in `dtype`. The tokenizer pads on the left."""
    if check_model_spec(model, tiny_size) == "tiny":
        net, tok = build_tiny_model(tiny_size, seed=seed)
        return net.to(dtype), tok
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(model)
        net = AutoModelForCausalLM.from_pretrained(model, dtype=dtype)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot load model {model!r}: {str(e).splitlines()[0][:200]}") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    if net.generation_config.pad_token_id is None:
        net.generation_config.pad_token_id = tok.pad_token_id
    return net, tok


MODEL_CARD = "axiom_rl.json"  # written beside final_model weights: how the model was prompted


def read_model_card(model: str) -> dict[str, Any]:
    """The prompt format a model trained by axiom-rl was trained with ({} for other models)."""
    import json

    path = Path(model) / MODEL_CARD
    return json.loads(path.read_text()) if model != "tiny" and path.exists() else {}


def load_for_inference(
    model: str, dtype: str = "auto", device: str = "auto", tiny_size: str = "tiny", seed: int = 0
) -> tuple[Any, Any, torch.device]:
    """(model in eval mode, tokenizer, device): a hub name, a model directory, a LoRA adapter
    directory (its base is loaded, then the adapter), or 'tiny'."""
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    path = Path(model)
    if model != "tiny" and (path / "adapter_config.json").exists():
        from peft import AutoPeftModelForCausalLM
        from transformers import AutoTokenizer

        try:
            net = AutoPeftModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
            tok = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as e:
            raise UserError(f"cannot load the adapter in {model}: {str(e).splitlines()[0][:200]}") from None
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
    else:
        net, tok = load_model_and_tokenizer(model, torch_dtype, tiny_size, seed)
    return net.to(dev).eval(), tok, dev


def apply_lora(model: Any, r: int, alpha: int, dropout: float, target_modules: str) -> Any:
    from peft import LoraConfig, get_peft_model

    targets: str | list[str] = target_modules
    if target_modules != "all-linear":
        targets = [m.strip() for m in target_modules.split(",") if m.strip()]
    config = LoraConfig(
        r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, task_type="CAUSAL_LM"
    )
    try:
        return get_peft_model(model, config)
    except ValueError as e:
        raise UserError(f"LoRA: {str(e).splitlines()[0][:200]}") from None


@dataclass
class Policy:
    """The trainable model, its tokenizer, and how to get reference log-probs."""

    model: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    lora: bool
    reference: Any = None  # a frozen copy (full fine-tuning with beta != 0), else None

    @contextlib.contextmanager
    def reference_mode(self) -> Iterator[Any]:
        """The network to run for reference log-probs: the base with LoRA off, or the copy."""
        if self.lora:
            with self.model.disable_adapter():
                yield self.model
        elif self.reference is not None:
            yield self.reference
        else:
            raise RuntimeError("no reference policy (beta = 0)")

    @property
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]


def load_policy(
    model: str,
    *,
    tiny_size: str = "tiny",
    finetune: str = "auto",
    lora_r: int = 16,
    lora_alpha: int = 32,
    lora_dropout: float = 0.0,
    lora_target_modules: str = "all-linear",
    dtype: str = "auto",
    device: str = "auto",
    need_reference: bool = True,
    gradient_checkpointing: bool = False,
    seed: int = 0,
) -> Policy:
    check_load_options(dtype, finetune)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    check_model_spec(model, tiny_size)
    net, tok = load_model_and_tokenizer(model, torch_dtype, tiny_size, seed)
    # auto: LoRA where it pays (large models); small ones train fully.
    use_lora = finetune == "lora" or (
        finetune == "auto" and sum(p.numel() for p in net.parameters()) > LORA_AUTO_PARAMS
    )
    if gradient_checkpointing:
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        net.config.use_cache = False
    reference = None
    if use_lora:
        net = apply_lora(net, lora_r, lora_alpha, lora_dropout, lora_target_modules)
    elif need_reference:
        reference = copy.deepcopy(net).eval()
        for p in reference.parameters():
            p.requires_grad_(False)
        reference.to(dev)
    lean_mlp_activations(net)  # same numbers, one activation fewer per MLP layer at the peak
    net.to(dev)
    return Policy(net, tok, dev, torch_dtype, use_lora, reference)
