"""Typed configuration: one dataclass per command, a docstring per field, YAML + CLI overrides.

The resolved object is exactly what runs and what is saved (run_dir/config.json): there is no
second copy of a value anywhere. A YAML file overrides the dataclass defaults; command-line
options override the YAML. CLI options are generated from the fields (cli.py), so the help text
is these docstrings.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib
import inspect
import json
import textwrap
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from .errors import UserError


@dataclass
class ModelOptions:
    """The model to load, how to fine-tune it and where to report: the options every training
    command shares."""

    # -- model ------------------------------------------------------------------------------
    model: str = "tiny"
    """'tiny' (the built-in model), a local model directory, or a Hugging Face hub name."""
    tiny_size: str = "tiny"
    """Size of the built-in model (tiny: about 3M parameters)."""
    finetune: str = "auto"
    """LoRA adapters or the full model; auto: LoRA for models over 100M parameters."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA alpha (the update is scaled by alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch."""
    lora_target_modules: str = "all-linear"
    """Modules to adapt: 'all-linear' or a comma-separated list (q_proj,v_proj,...)."""
    merge: bool = False
    """With LoRA: save final_model with the adapter merged into the weights (always, for the
    built-in tiny model, whose base is saved nowhere else)."""
    dtype: str = "auto"
    """Weights' dtype; auto: bf16 on a GPU that supports it, else fp32."""
    device: str = "auto"
    """cpu, cuda, cuda:N, or auto."""
    report_to: str = "none"
    """Where the run reports besides its own files (metrics.jsonl, report.md): tensorboard, wandb
    (comma-separated), none (transformers' default too), or auto (TensorBoard where it is
    installed). One asked for by name and not installed stops the run before it starts."""

    def load_options(self) -> dict[str, Any]:
        """These options as `load_policy` arguments (besides the model and the device)."""
        return {
            "tiny_size": self.tiny_size,
            "finetune": self.finetune,
            "lora_r": self.lora_r,
            "lora_alpha": self.lora_alpha,
            "lora_dropout": self.lora_dropout,
            "lora_target_modules": self.lora_target_modules,
            "dtype": self.dtype,
        }


@dataclass
class TrainConfig(ModelOptions):
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, more time)."""
    # -- problems ---------------------------------------------------------------------------
    tasks: list[str] = field(default_factory=lambda: ["countdown"])
    """Tasks to train on (names from `axiom-rl problems list`)."""
    difficulty: str = "1"
    """A difficulty (5) or an inclusive range (1-3) to draw problems from."""
    problems_file: str = ""
    """Train on the problems of this JSONL file instead (`problems import` output: MBPP, HumanEval;
    or `problems export`), in a seeded order reshuffled each pass; not with --task or --difficulty."""
    source: dict[str, Any] = field(default_factory=dict)
    """Where the problems come from, and what learns from the results: a registered problem source
    (axiom_rl.sources) and its parameters, as NAME or NAME:key=value,... (failures:file=failures.jsonl,fresh=0.25; YAML:
    {name: failures, file: failures.jsonl}). Empty: 'file' with --problems-file, else 'uniform'
    over --task x --difficulty."""
    prompt_style: str = "auto"
    """compact: short prompts for character-level models; auto: compact for the built-in model."""
    chat_template: str = "auto"
    """Wrap prompts with the tokenizer's chat template; auto: when it has one."""
    rewards: str = "auto"
    """Reward components as name:weight,... (docs/training.md), or auto: each task's default."""
    prm: str | None = None
    """The process reward model the `prm` reward reads (a directory `axiom-rl prm train` wrote)."""
    prm_mode: str = "process"
    """How the prm and oracle_steps rewards count: process (per-step rewards into token-level
    advantages), or min, mean, last (that aggregate of the step scores added to the reward)."""
    process_groups: str = "all"
    """Which groups' process advantages (--prm-mode process) enter the loss: all, or mixed (only
    groups whose outcome rewards differ). In a flat group the process term alone moves the
    policy, and a learned PRM's errors are what it moves it toward (docs/results.md)."""
    solver: str | None = None
    """The model the `learnability` reward measures proposals against (a model directory, a hub
    name or tiny; default: the model training starts from): each proposed puzzle earns 4p(1-p) of
    its success rate p (docs/training.md)."""
    solver_samples: int = 8
    """The solver's attempts at each proposed puzzle (its success rate's denominator)."""
    # -- rollout ----------------------------------------------------------------------------
    prompts_per_step: int = 4
    """Prompts per rollout (B)."""
    num_generations: int = 4
    """Completions per prompt (G, the group size)."""
    max_completion_length: int = 256
    """Most tokens generated per completion."""
    min_completion_length: int = 0
    """Completions are at least this long (EOS is not sampled before); equal to the maximum, it
    forces full length (benchmarks use it so that every run does the same work)."""
    max_prompt_length: int = 1024
    """Prompts longer than this (in tokens) are truncated on the left."""
    temperature: float = 1.0
    """Sampling temperature (above 0: GRPO compares a group's different completions)."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens with this much probability."""
    rollout_backend: str = "auto"
    """How completions are generated: fast, axiom-rl's decode loop for Qwen2-architecture models;
    hf, transformers' generate; auto, fast where it supports the model."""
    # -- algorithm --------------------------------------------------------------------------
    advantage: str = "grpo"
    """Advantage estimator (docs/algorithms.md)."""
    advantage_params: dict[str, Any] = field(default_factory=dict)
    """Extra parameters for the estimator (YAML), e.g. {beta_reward: 2.0} for dgro."""
    loss_type: str = "grpo"
    """Policy loss (docs/algorithms.md)."""
    loss_params: dict[str, Any] = field(default_factory=dict)
    """Further options of the loss (YAML; docs/algorithms.md): dual_clip, kl_bias_correction,
    importance_sampling, hybrid_alpha for the clipped losses; beta_sampling for dgro."""
    beta: float = 0.04
    """KL coefficient; 0 loads and runs no reference model."""
    kl_estimator: str = "k3"
    """KL estimator (Schulman's k1, k2, k3)."""
    clip_eps: float = 0.2
    """Clipping epsilon (the low side, and the high side unless clip_eps_high is set)."""
    clip_eps_high: float | None = None
    """Upper clipping epsilon (DAPO clip-higher, e.g. 0.28)."""
    num_iterations: int = 1
    """Optimizer steps per rollout batch (mu); >1 stores old log-probs for the ratio."""
    dynamic_sampling: bool = False
    """Replace groups whose rewards are all equal with fresh prompts (DAPO)."""
    dynamic_sampling_rounds: int = 2
    """At most this many extra rollouts per step to refill such groups."""
    krpo_key: str = "task_difficulty"
    """Which groups share krpo's Kalman baseline: 'task_difficulty' (each task at each
    difficulty), 'task', or 'problem' (a problem id: generated problems never repeat, so only
    for a problems file seen many times over)."""
    # -- optimisation -----------------------------------------------------------------------
    steps: int = 10
    """Optimizer steps (a rollout every num_iterations steps)."""
    max_seconds: float = 0.0
    """Also stop after this much wall time, as if the steps were done (0: no limit)."""
    lr: float = 1e-5
    """Peak learning rate (AdamW)."""
    lr_schedule: str = "constant"
    """Learning-rate schedule after warm-up (linear and cosine decay to 0 at the last step)."""
    warmup_steps: int = 0
    """Linear warm-up steps."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm (0 disables)."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step (the rollout batch is split this many ways)."""
    seed: int = 0
    """Seed for problems, sampling and initialisation."""
    # -- verification -----------------------------------------------------------------------
    verify_workers: int | None = None
    """Sandbox workers (default: CPU cores)."""
    verify_timeout: float | None = None
    """CPU seconds per submission (default: each task's own)."""
    overlap_verification: str = "auto"
    """Verify in the sandbox while the model works on: a completion as soon as it ends (the others
    still decoding), and the reference and old log-probs computed while verification finishes.
    on, off, or auto: on when training on a GPU (the sandbox then gets one core fewer by default).
    On a CPU the sandbox and the model share the cores: steps took 1.08-1.16x as long on 2."""
    sandbox_url: str | None = None
    """Verify on `axiom-rl sandbox serve` servers instead of a local sandbox: their URLs,
    comma-separated (round-robin; a failed request goes to the next). The token, if they need
    one, comes from $AXIOM_RL_SANDBOX_TOKEN (never saved with the run). Verification then starts
    when the rollout ends (overlap_verification is off)."""
    # -- output -----------------------------------------------------------------------------
    output_dir: str = "runs/axiom-rl"
    """Run directory: config, metrics, samples, checkpoints, final model."""
    save_every: int = 10
    """Write a checkpoint every this many steps (and at the end; 0: only at the end)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (older ones are deleted; 0 keeps them all)."""
    resume: bool = False
    """Continue from the newest checkpoint in output_dir."""
    samples_per_step: int = 2
    """Groups written to samples.jsonl each step."""
    verbose: bool = False
    """Print sampled completions as training goes."""
    max_bad_steps: int = 3
    """Stop (after a checkpoint) when this many steps in a row have a NaN or inf loss."""
    # -- speed ------------------------------------------------------------------------------
    speed: dict[str, Any] = field(default_factory=dict)
    """Speed-ups (axiom_rl/speed): 'plain' for plain PyTorch and transformers throughout, 'auto'
    (the default: what pays on the device), and settings as name=on|off after either, such as
    'auto,attention_kernel=off' (YAML: {preset: plain, attention_kernel: true}). config.json lists
    every setting the run used."""


@dataclass
class SFTConfig(ModelOptions):
    tasks: list[str] = field(default_factory=lambda: ["countdown"])
    """Tasks whose reference solutions to train on."""
    difficulty: str = "1"
    """A difficulty (5) or an inclusive range (1-3)."""
    prompt_style: str = "auto"
    """compact: short prompts for character-level models; auto: compact for the built-in model."""
    chat_template: str = "auto"
    """Wrap prompts with the tokenizer's chat template; auto: when it has one."""
    problems_file: str = ""
    """Train on the reference solutions of this JSONL file's problems instead (`problems import`
    output: MBPP, HumanEval; or `problems export`), in a seeded order reshuffled each pass; not with
    --task, --difficulty or --from-samples."""
    from_samples: str = ""
    """Train on the verified-correct completions of this evaluation run (in --db) instead; not with
    --task, --difficulty or --problems-file."""
    db: str = "results.db"
    """Results database for --from-samples."""
    steps: int = 500
    """Optimizer steps."""
    batch_size: int = 32
    """Examples per step."""
    lr: float = 1e-3
    """Peak learning rate (AdamW)."""
    lr_schedule: str = "cosine"
    """Learning-rate schedule after warm-up (linear and cosine decay to 0 at the last step)."""
    warmup_steps: int = 20
    """Linear warm-up steps."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping (0 disables)."""
    max_seconds: float = 0.0
    """Stop after this much wall time (0: no limit)."""
    seed: int = 0
    """Seed for data order and initialisation."""
    save_every: int = 100
    """Write a checkpoint every this many steps (and at the end; 0: only at the end)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (older ones are deleted; 0 keeps them all)."""
    resume: bool = False
    """Continue from the newest checkpoint in output_dir."""
    output_dir: str = "runs/sft"
    """Run directory: config.json, metrics.jsonl, train.log, checkpoints, final_model."""


@dataclass
class EvalConfig:
    model: str = "tiny"
    """'tiny', a model directory (a run's final_model, LoRA adapters included), or a hub name."""
    tasks: list[str] = field(default_factory=lambda: ["countdown"])
    """Tasks to evaluate on."""
    difficulty: str = "1"
    """A difficulty (5) or an inclusive range (1-3)."""
    count: int = 100
    """Problems per task and difficulty."""
    problems_file: str = ""
    """Evaluate on the problems of this JSONL file instead (`problems import` output: HumanEval,
    MBPP; or `problems export`), all of them; not with --task, --difficulty, --count or --split."""
    samples: int = 1
    """Completions per problem (K, for pass@k)."""
    temperature: float = 0.0
    """0 for greedy decoding (then samples must be 1)."""
    top_p: float = 1.0
    """Nucleus sampling threshold."""
    split: str = "eval"
    """Problem split: eval is held out from training."""
    seed: int = 0
    """Seed of the problem set and of sampling."""
    max_completion_length: int = 256
    """Most tokens generated per completion."""
    max_prompt_length: int = 1024
    """Longer prompts are truncated on the left."""
    prompt_style: str = "auto"
    """compact: short prompts for character-level models; auto: what the model was trained with."""
    chat_template: str = "auto"
    """Wrap prompts with the tokenizer's chat template; auto: when it has one."""
    batch_size: int = 64
    """Prompts generated at once (each with `samples` completions)."""
    db: str = "results.db"
    """SQLite database to store runs and attempts in."""
    run_name: str = ""
    """Name of this evaluation in the database (default: derived from the model and settings)."""
    tiny_size: str = "tiny"
    """Size of the built-in model when --model tiny."""
    dtype: str = "auto"
    """Weights' dtype; auto: bf16 on a GPU that supports it, else fp32."""
    device: str = "auto"
    """cpu, cuda, cuda:N or auto."""
    workers: int | None = None
    """Sandbox workers (default: CPU cores)."""
    timeout: float | None = None
    """CPU seconds per submission (default: each task's own)."""
    overlap_verification: str = "auto"
    """Verify a batch's completions as they end, while the rest decode, and store the batch while
    the next one generates: on, off, or auto (on for a model on a GPU; on a CPU the sandbox and
    the model share the cores). The results are the same either way."""


# Other names accepted for an option, where the config has no option of that name: the short
# forms of earlier GRPO scripts, and the sandbox's options under either command's name for them
# (train: verify_workers, verify_timeout; eval and verify: workers, timeout).
ALIASES = {
    "problems": "tasks", "generations": "num_generations", "task": "tasks",
    "workers": "verify_workers", "timeout": "verify_timeout",
    "verify_workers": "workers", "verify_timeout": "timeout",
}  # fmt: skip

_NO_CLI = {"advantage_params", "loss_params"}  # YAML only


def _speed_from_text(text: str) -> dict[str, Any]:
    from .speed import parse_speed_option

    return parse_speed_option(text)


def _scalar(text: str) -> Any:
    """A command-line parameter's value: an int, a float, true/false, or else the text itself."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def source_from_text(text: str) -> dict[str, Any]:
    """--source NAME or NAME:key=value,key=value as the mapping a YAML `source:` gives."""
    name, _, rest = text.partition(":")
    if not name.strip():
        raise UserError(f"--source: expected NAME or NAME:key=value,..., got {text!r}")
    params: dict[str, Any] = {"name": name.strip()}
    for item in (part.strip() for part in rest.split(",")):
        if not item:
            continue
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise UserError(f"--source {name.strip()}: expected key=value, got {item!r}")
        params[key.strip()] = _scalar(value.strip())
    return params


# Mapping fields that also take a command-line string: how it is read.
_FROM_TEXT = {"speed": _speed_from_text, "source": source_from_text}


@cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each dataclass field (the string literal after the annotation)."""
    docs: dict[str, str] = {}
    for base in reversed(cls.__mro__):  # a subclass's docstring wins
        if dataclasses.is_dataclass(base):
            docs.update(_own_field_docs(base))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    docs: dict[str, str] = {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    for node, nxt in zip(body, body[1:]):
        is_field = isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
        is_doc = (
            isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        )
        if is_field and is_doc:
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _field_type(cls: type, name: str) -> Any:
    return typing.get_type_hints(cls)[name]


def coerce(cls: type, name: str, value: Any) -> Any:
    """Convert a YAML or CLI value to the field's type, with a clear error."""
    hint = _field_type(cls, name)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    optional = type(None) in args
    if optional:
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "")):
            return None
        hint = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("1", "true", "yes", "on"):
                return True
            if str(value).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if hint is int:
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if hint is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if hint is str:
            if isinstance(value, (dict, list)):
                raise ValueError
            return str(value)
        if origin is list:
            items = value.split(",") if isinstance(value, str) else list(value)
            return [str(v).strip() for v in items if str(v).strip()]
        if origin is dict:
            if isinstance(value, str) and name in _FROM_TEXT:  # a command-line value
                return _FROM_TEXT[name](value)
            if not isinstance(value, dict):
                raise ValueError
            return dict(value)
    except (TypeError, ValueError):
        pass
    else:
        return value
    raise UserError(f"{name}: expected {getattr(hint, '__name__', hint)}, got {value!r}")


def refuse_beside_problems_file(config: Any, flags: dict[str, str], given: Iterable[str] = ()) -> None:
    """With a --problems-file, the options that would choose generated problems (`flags`: field
    name to flag) are an error when given (`given`: the fields set on the command line) or set to
    anything but their defaults: silently unused, a `--count 30` would have evaluated a whole file."""
    refuse_beside(
        config,
        "problems_file",
        flags,
        given,
        "uses every problem of its file (to use fewer, write fewer lines to a file)",
    )


def refuse_beside(config: Any, source: str, flags: dict[str, str], given: Iterable[str], why: str) -> None:
    """When the field `source` is set, the options of `flags` (field name to flag) are an error
    when given on the command line or set to anything but their defaults. `why` completes
    "... cannot be used with --source, which ..."."""
    if not getattr(config, source):
        return
    defaults, given = type(config)(), set(given)
    used = [
        "--all" if name == "tasks" and getattr(config, name) == ["all"] else flag  # how it was asked for
        for name, flag in flags.items()
        if name in given or getattr(config, name) != getattr(defaults, name)
    ]
    if used:
        raise UserError(f"{' and '.join(used)} cannot be used with --{source.replace('_', '-')}, which {why}")


def load_yaml(path: str | Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"no such config file: {path}") from None
    except yaml.YAMLError as e:
        raise UserError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of option: value")
    return data


def unknown_option(key: str, names: Iterable[str]) -> str:
    """The error for an option no config has: the likeliest meant one, else every name."""
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    if close:
        return f"unknown option {key!r}; did you mean {close[0]!r}?"
    return f"unknown option {key!r}; options are: {', '.join(sorted(names))}"


def build_config(
    cls: type, yaml_path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> Any:
    """Defaults <- YAML file <- overrides (CLI). Unknown keys are errors that list the options."""
    names = {f.name for f in fields(cls)}
    values: dict[str, Any] = {}
    for source in (load_yaml(yaml_path) if yaml_path else {}, overrides or {}):
        for key, value in source.items():
            key = key.replace("-", "_")
            key = key if key in names else ALIASES.get(key, key)
            if key not in names:
                raise UserError(unknown_option(key, names))
            values[key] = coerce(cls, key, value)
    return cls(**values)


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


# config.json's key for what produced the run (provenance.py): not an option, so a resumed run's
# reader sets it aside.
PROVENANCE_KEY = "axiom_rl"


def save_config(config: Any, path: str | Path) -> None:
    """The resolved config, every option, and the axiom-rl version and commit that ran it."""
    from .io import write_text_atomic
    from .provenance import provenance

    write_text_atomic(path, json.dumps({**to_dict(config), PROVENANCE_KEY: provenance()}, indent=2) + "\n")


def _fixed(*values: str) -> Callable[[], tuple[str, ...]]:
    return lambda: values


def _registry(module: str, attribute: str, *first: str) -> Callable[[], tuple[str, ...]]:
    """The names of a registry, read when asked (so a registered addition is listed, and
    `--help` imports torch only when shown)."""
    return lambda: (*first, *getattr(importlib.import_module(module, __package__), attribute))


# The values an option takes where it names one of a fixed set or of a registry: `--help` lists
# them and the commands check against them. `rewards` and `source` take these names with weights
# or parameters after them.
_CHOICES: dict[str, Callable[[], tuple[str, ...]]] = {
    "tiny_size": _registry(".models.tiny", "TINY_SIZES"),
    "finetune": _registry(".models.load", "FINETUNE_MODES"),
    "dtype": _registry(".models.load", "DTYPES", "auto"),
    "prompt_style": _registry(".tasks.base", "PROMPT_STYLES", "auto"),
    "chat_template": _registry(".tasks.prompts", "CHAT_MODES"),
    "rewards": lambda: (
        *_registry(".rewards", "REWARDS", "auto")(),
        *_registry(".reward_stage", "COMPONENTS")(),
    ),
    "source": _registry(".sources", "SOURCES"),
    "prm_mode": _registry(".prm.components", "MODES"),
    "process_groups": _fixed("all", "mixed"),
    "rollout_backend": _registry(".rollout", "BACKENDS"),
    "advantage": _registry(".algorithms", "ADVANTAGES"),
    "loss_type": _registry(".algorithms", "LOSSES"),
    "kl_estimator": _registry(".algorithms", "KL_ESTIMATORS"),
    "krpo_key": _fixed("task_difficulty", "task", "problem"),
    "lr_schedule": _fixed("constant", "linear", "cosine"),
    "overlap_verification": _registry(".verifier", "OVERLAP_CHOICES"),
    "split": _registry(".tasks.generate", "SPLITS"),
    "report_to": lambda: ("auto", "none", *_registry(".train.loggers", "LOGGERS")()),
}


def has_choices(name: str) -> bool:
    """Whether a config field names one of a set (known without importing the registries)."""
    return name in _CHOICES


def field_choices(name: str) -> tuple[str, ...] | None:
    """The names a config field takes, or None where it takes any value of its type."""
    provider = _CHOICES.get(name)
    return provider() if provider else None


def field_default(cls: type, name: str) -> Any:
    """A field's default as the dataclass gives it (a factory called)."""
    f = next(f for f in fields(cls) if f.name == name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def cli_fields(cls: type) -> list[tuple[str, Any, str]]:
    """(name, type hint, help) for every field that has a command-line option."""
    docs = field_docs(cls)
    return [
        (f.name, _field_type(cls, f.name), docs.get(f.name, "")) for f in fields(cls) if f.name not in _NO_CLI
    ]
