"""Loading the policy: the built-in tiny model, a local directory, or a hub name; LoRA or full.

The reference policy for the KL penalty costs no memory with LoRA: it is the same network with
the adapter switched off (`reference_mode`). Full fine-tuning keeps a frozen copy. With beta = 0
there is no reference at all.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import torch

from ..errors import UserError
from ..speed import Speed, cpu_matmul
from ..speed.install import install_speed_ups
from .tiny import TINY_SIZES, build_tiny_model

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
FINETUNE_MODES = ("auto", "lora", "full")
LORA_AUTO_PARAMS = 100_000_000  # finetune=auto uses LoRA above this many parameters
ADAPTER_CONFIG = "adapter_config.json"  # peft's file: a directory of LoRA adapters, not a whole model


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
    """The loading options that are names, checked before anything is written or loaded (the
    CPU matmul library and the decode step named in the environment among them)."""
    from ..speed import native

    cpu_matmul.backend()
    native.choice()
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


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


@functools.cache
def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hugging Face hub cannot be reached from here (its host name does not resolve), or
    None when it may be: offline mode is already on, a proxy does the resolving, or the lookup
    answered or did not answer in time (then the hub's own client decides, as without this check).

    One DNS lookup per process. On a machine without a network, hub names then load from the
    local cache at once, or fail with one line, instead of after huggingface_hub's five retries
    (about 30 s for each file it asks for).
    """
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or any(os.environ.get(v) for v in PROXY_VARIABLES):
        return None
    host = urlsplit(constants.ENDPOINT).hostname
    if not host:
        return None
    failure: list[str] = []

    def look_up() -> None:
        try:
            socket.getaddrinfo(host, 443)
        except OSError as e:  # socket.gaierror: no such name, or no resolver to ask
            failure.append(f"{host} does not resolve: {e.strerror or e}")

    lookup = threading.Thread(target=look_up, daemon=True)  # a resolver may wait 10 s or more
    lookup.start()
    lookup.join(timeout)
    return failure[0] if failure else None


def hub_options(model: bool = False) -> dict[str, Any]:
    """Keyword arguments for every from_pretrained call: the local cache only when the hub
    cannot be reached (harmless for local directories, which never touch the hub). A model's
    search for a LoRA adapter beside it takes its own copy (transformers does not pass it on)."""
    if not hub_unreachable():
        return {}
    return {"local_files_only": True, **({"adapter_kwargs": {"local_files_only": True}} if model else {})}


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
        if (path / ADAPTER_CONFIG).exists():
            check_adapter_chain(path)  # a LoRA run's final_model: its base must load too
        elif not _is_model_config(path / "config.json"):  # a run directory has a config.json too
            raise UserError(
                f"{model} is not a model directory (no model's config.json); {_model_inside(path)}"
            )
        return "local"
    if model.startswith((".", "/", "~")) or os.sep in model.strip("/").split("/", 1)[-1]:
        where = "" if Path(model).is_absolute() else f" (relative to the working directory, {Path.cwd()})"
        raise UserError(f"no such model directory: {model}{where}")
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(model, **hub_options())
    except Exception as e:  # offline, gated, misspelt: all mean "cannot use this name"
        reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        if unreachable := hub_unreachable():
            reason = f"the hub cannot be reached, {unreachable}, and the name is not in the local cache"
        raise UserError(
            f"cannot load model {model!r} from the Hugging Face hub ({reason}); pass 'tiny' or a local directory"
        ) from None
    return "hub"


def _is_model_config(path: Path) -> bool:
    import json

    try:
        return "model_type" in json.loads(path.read_text())
    except (OSError, ValueError, TypeError):
        return False


def _model_inside(path: Path) -> str:
    """Where the model is, for a directory that holds one a level down (a run, a checkpoint)."""
    for inner, what in (("final_model", "a training run"), ("model", "a training checkpoint")):
        if (path / inner / "config.json").exists() or (path / inner / ADAPTER_CONFIG).exists():
            return f"it is {what}: pass {path / inner}"
    return "expected save_pretrained output"


def adapter_base(path: Path) -> str:
    """The base model a LoRA adapter directory was trained on, as the adapter records it."""
    import json

    try:
        base = json.loads((path / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path / ADAPTER_CONFIG}: {e}") from None
    if not base:
        raise UserError(
            f"{path} is a LoRA adapter that names no base model (saved from a model built in memory); "
            "save its run's final model with --merge"
        )
    return str(base)


def check_adapter_chain(path: Path) -> None:
    """An adapter directory's base, its base's base (a LoRA run that started from another one's
    final model), and so on, down to a model: every link must name the next, and the model must
    pass check_model_spec."""
    seen: set[Path] = set()
    while (path / ADAPTER_CONFIG).exists():
        if path.resolve() in seen:
            raise UserError(f"LoRA adapters name each other as their base in a loop, at {path}")
        seen.add(path.resolve())
        base = adapter_base(path)
        adapter, path = path, Path(base).expanduser()
    try:
        check_model_spec(base)
    except UserError as e:  # say which adapter asked for it (a relative path is from the cwd)
        raise UserError(f"the LoRA adapter in {adapter} names its base {base!r}: {e}") from None


def load_model_and_tokenizer(
    model: str, dtype: torch.dtype, tiny_size: str = "tiny", seed: int = 0
) -> tuple[Any, Any]:
    """(model, tokenizer) on the CPU, in `dtype`. The tokenizer pads on the left.

    A LoRA adapter directory (a LoRA run's final_model) loads as its base with the adapter merged
    into the weights: a plain model, which evaluates without peft in the way and trains on from
    there (with LoRA, a new adapter, and the merged model as the KL reference).
    """
    check_model_spec(model, tiny_size)  # once: for an adapter, every link of its chain
    return _load_checked(model, dtype, tiny_size, seed)


def _load_checked(model: str, dtype: torch.dtype, tiny_size: str = "tiny", seed: int = 0) -> tuple[Any, Any]:
    """load_model_and_tokenizer after check_model_spec has passed `model`."""
    if model == "tiny":
        net, tok = build_tiny_model(tiny_size, seed=seed)
        return net.to(dtype), tok
    path = Path(model).expanduser()
    if (path / ADAPTER_CONFIG).exists():
        net, tok = _load_merged_adapter(path, dtype)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            # A local directory loads in a moment: no "Loading weights" bar between axiom-rl's own.
            # A hub name keeps transformers' bars: they show its download.
            with no_progress_bars() if path.exists() else contextlib.nullcontext():
                net = AutoModelForCausalLM.from_pretrained(model, dtype=dtype, **hub_options(model=True))
            tok = AutoTokenizer.from_pretrained(model, **hub_options())
        except (OSError, ValueError) as e:
            raise UserError(f"cannot load model {model!r}: {str(e).splitlines()[0][:200]}") from None
        except Exception as e:
            # safetensors' own error for a truncated or damaged weight file (SafetensorError is
            # neither an OSError nor a ValueError): a file on disk, not a bug here
            if type(e).__name__ != "SafetensorError":
                raise
            raise UserError(
                f"cannot load model {model!r}: a weight file is damaged or truncated ({e})"
            ) from None
        if path.exists():  # what a LoRA adapter trained on it records as its base: loadable from anywhere
            net.name_or_path = net.config._name_or_path = str(path.resolve())
    if not tok("1 + 2 = 3", add_special_tokens=False).input_ids:
        # transformers builds an empty tokenizer for a directory without tokenizer files
        raise UserError(
            f"cannot use model {model!r}: its tokenizer encodes text to no tokens (no tokenizer "
            "files beside the weights? copy the tokenizer of the model it was trained from there)"
        )
    rows = net.get_input_embeddings().num_embeddings
    if tok.eos_token_id is None or not 0 <= tok.eos_token_id < rows:
        raise UserError(
            f"cannot use model {model!r}: its tokenizer has no end-of-sequence token that the model "
            f"knows (eos {tok.eos_token!r}, id {tok.eos_token_id}; the model has {rows} token embeddings)"
        )
    if tok.pad_token_id is None or not 0 <= tok.pad_token_id < rows:
        # No pad token, or one the tokenizer class made up beyond the model's vocabulary (a
        # Qwen2Tokenizer without one in its config adds '<|endoftext|>' as a new token): pad with
        # EOS, which only ever sits under the attention mask.
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    if net.generation_config.pad_token_id is None:
        net.generation_config.pad_token_id = tok.pad_token_id
    return net, tok


@contextlib.contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers' (and huggingface_hub's) progress bars off for a while, as they were after."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _load_merged_adapter(path: Path, dtype: torch.dtype) -> tuple[Any, Any]:
    """An adapter's base (itself possibly an adapter directory: a LoRA run that started from
    another one) with the adapter merged in, and the tokenizer saved beside it (else the base's).
    check_adapter_chain has checked every link, so the base loads without checking it again."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    base = adapter_base(path)
    net, tok = _load_checked(base, dtype)
    try:
        net = PeftModel.from_pretrained(net, path).merge_and_unload()
        if (path / "tokenizer_config.json").exists():
            tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, RuntimeError) as e:  # RuntimeError: shapes that do not fit the base
        raise UserError(
            f"cannot load the LoRA adapter in {path} onto {base}: {str(e).splitlines()[0][:200]}"
        ) from None
    # What a new adapter trained on this model records as its base: these merged weights, not the
    # original base (peft reads name_or_path), or loading it later would drop this adapter.
    net.name_or_path = net.config._name_or_path = str(path.resolve())
    return net, tok


MODEL_CARD = "axiom_rl.json"  # written beside final_model weights: how the model was prompted


def read_model_card(model: str) -> dict[str, Any]:
    """The prompt format a model trained by axiom-rl was trained with ({} for other models)."""
    import json

    path = Path(model) / MODEL_CARD
    if model == "tiny" or not path.exists():
        return {}
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UserError(
            f"{path} is not a readable model card ({type(e).__name__}); restore it or delete it"
        ) from None
    if not isinstance(card, dict):
        raise UserError(f"{path} is not a model card (a JSON object); restore it or delete it")
    return card


def load_for_inference(
    model: str, dtype: str = "auto", device: str = "auto", tiny_size: str = "tiny", seed: int = 0
) -> tuple[Any, Any, torch.device]:
    """(model in eval mode, tokenizer, device): a hub name, a model directory, a LoRA adapter
    directory (its base, with the adapter merged in), or 'tiny'."""
    dev = resolve_device(device)
    net, tok = load_model_and_tokenizer(model, resolve_dtype(dtype, dev), tiny_size, seed)
    cpu_matmul.route_linear_layers(net)
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
            # The tuner's own switch: PeftModel.disable_adapter() would also build a status report of
            # every layer on each entry, to warn about half-disabled models (4 of its 7 ms a step
            # on the tiny model); the adapters here are all on, always.
            tuner = self.model.base_model
            tuner.disable_adapter_layers()
            try:
                yield self.model
            finally:
                tuner.enable_adapter_layers()
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
    speed: Speed | None = None,
) -> Policy:
    """The model (and its tokenizer, and for full fine-tuning with `need_reference` a frozen copy)
    ready to train, with the training passes' speed-ups that `speed` turns on (default: what pays
    on the device, Speed.for_device) installed in it."""
    check_load_options(dtype, finetune)
    dev = resolve_device(device)
    speed = speed or Speed.for_device(dev.type)
    torch_dtype = resolve_dtype(dtype, dev)
    check_model_spec(model, tiny_size)
    net, tok = _load_checked(model, torch_dtype, tiny_size, seed)
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
    for network in (net, reference):
        if network is not None:
            install_speed_ups(network, speed, dev, frozen=network is reference)
    net.to(dev)
    return Policy(net, tok, dev, torch_dtype, use_lora, reference)
