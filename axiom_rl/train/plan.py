"""What a run will do, resolved from its config and checked before anything heavy loads: task
names, difficulties, algorithm names, numbers and the prompt style, with a one-line error for any
mistake. Shared by `train`, `sft` and `eval`, so a typo never leaves a run directory behind."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..algorithms import Estimator, loss_options, policy_loss
from ..config import TrainConfig, field_choices, refuse_beside_problems_file
from ..errors import UserError, at_least, choose, positive
from ..models.load import check_load_options, check_model_spec, read_model_card
from ..rewards import parse_reward_specs
from ..sources import SourceContext, make_source
from ..speed import Speed
from ..tasks import get_task, parse_task_list
from ..tasks.generate import check_difficulty, parse_range
from ..types import Problem
from ..verify_files import read_problems_file
from .loggers import parse_report_to


@dataclass
class Plan:
    """Everything checked and resolved from the config before anything heavy loads."""

    tasks: list[str]
    difficulties: list[int]
    prompt_style: str
    needs_sandbox: bool
    rewards: Any
    problems: list[Problem] | None = None  # a --problems-file's, else generated as training goes


def parse_difficulty(text: str) -> list[int]:
    a, b = parse_range(text)
    return list(range(a, b + 1))


def parse_tasks_and_difficulties(tasks: str | list[str], difficulty: str) -> tuple[list[str], list[int]]:
    """Task names and difficulties from the options, each pair checked against its task's range."""
    names, difficulties = parse_task_list(tasks), parse_difficulty(difficulty)
    for t in names:
        for d in difficulties:
            check_difficulty(get_task(t), d)
    return names, difficulties


# The options that choose generated problems, which a --problems-file replaces.
GENERATED_PROBLEM_OPTIONS = {"tasks": "--task", "difficulty": "--difficulty"}


def plan_run(cfg: TrainConfig) -> Plan:
    """Validate every name and number of the config: one-line errors, nothing loaded yet."""
    problems = None
    if cfg.problems_file:
        refuse_beside_problems_file(cfg, GENERATED_PROBLEM_OPTIONS)
        problems = read_problems_file(cfg.problems_file)
        tasks = list(dict.fromkeys(p.task for p in problems))
        difficulties = sorted({p.difficulty for p in problems})
    else:
        tasks, difficulties = parse_tasks_and_difficulties(cfg.tasks, cfg.difficulty)
    choose("advantage estimator", cfg.advantage, field_choices("advantage"))
    choose("loss type", cfg.loss_type, field_choices("loss_type"))
    choose("KL estimator", cfg.kl_estimator, field_choices("kl_estimator"))
    choose("rollout backend", cfg.rollout_backend, field_choices("rollout_backend"))
    choose("prompt style", cfg.prompt_style, field_choices("prompt_style"))
    choose("lr schedule", cfg.lr_schedule, field_choices("lr_schedule"))
    choose("krpo key", cfg.krpo_key, field_choices("krpo_key"))
    choose("process groups", cfg.process_groups, field_choices("process_groups"))
    choose("overlap verification", cfg.overlap_verification, field_choices("overlap_verification"))
    at_least(
        ("steps", cfg.steps, 1),
        ("prompts_per_step", cfg.prompts_per_step, 1),
        ("num_generations", cfg.num_generations, 2),
        ("max_completion_length", cfg.max_completion_length, 1),
        ("max_prompt_length", cfg.max_prompt_length, 1),
        ("num_iterations", cfg.num_iterations, 1),
        ("gradient_accumulation_steps", cfg.gradient_accumulation_steps, 1),
        ("beta", cfg.beta, 0.0),
        ("min_completion_length", cfg.min_completion_length, 0),
        ("dynamic_sampling_rounds", cfg.dynamic_sampling_rounds, 0),
        ("samples_per_step", cfg.samples_per_step, 0),
        ("max_bad_steps", cfg.max_bad_steps, 1),
        ("verify_workers", 1 if cfg.verify_workers is None else cfg.verify_workers, 1),
    )
    if cfg.gradient_accumulation_steps > cfg.prompts_per_step * cfg.num_generations:
        raise UserError("gradient_accumulation_steps cannot exceed prompts_per_step x num_generations")
    check_training_options(cfg)
    if cfg.sandbox_url is not None:
        if cfg.verify_workers is not None:
            raise UserError(
                "verify_workers is for a local sandbox, not with sandbox_url (each server has its own)"
            )
        from ..integrations.remote import RemoteVerifier

        # before anything is written, as a hub model's name is checked
        with RemoteVerifier(cfg.sandbox_url, token=os.environ.get("AXIOM_RL_SANDBOX_TOKEN")) as remote:
            remote.check_reachable()
    check_sampling(cfg.temperature, cfg.top_p)
    if cfg.temperature == 0:
        # Greedy decoding gives every completion of a group the same text, so every
        # advantage is 0 and nothing is learnt: refuse rather than spend the run on it.
        raise UserError(
            "temperature 0 (greedy) makes the completions of a group identical, so GRPO has nothing "
            "to compare: use a temperature > 0 (default 1.0)"
        )
    positive(
        ("clip_eps", cfg.clip_eps),
        ("clip_eps_high", cfg.clip_eps if cfg.clip_eps_high is None else cfg.clip_eps_high),
        ("verify_timeout", 1.0 if cfg.verify_timeout is None else cfg.verify_timeout),
    )
    if cfg.min_completion_length > cfg.max_completion_length:
        raise UserError(
            f"min_completion_length ({cfg.min_completion_length}) exceeds max_completion_length "
            f"({cfg.max_completion_length})"
        )
    Estimator(cfg.advantage, cfg.advantage_params)  # its parameters checked
    settable = loss_params_of(cfg.loss_type)
    unknown = set() if settable is None else set(cfg.loss_params) - settable
    if unknown:
        raise UserError(
            f"loss_params {sorted(unknown)} unknown; the {cfg.loss_type} loss takes: "
            f"{', '.join(sorted(settable or ())) or 'none'} "
            "(clip_eps, clip_eps_high, beta and kl_estimator are options of their own)"
        )
    # Their values, on a token: an impossible one is refused here, not after the run has started.
    policy_loss(torch.zeros(1, 1), None, None, torch.zeros(1), torch.ones(1, 1), loss_type=cfg.loss_type,
                beta=0.0, **cfg.loss_params)  # fmt: skip
    Speed.resolve(cfg.speed, "cpu")  # its names and values checked (resolved for the device later)
    # The problem source, made once to check its name and parameters (the trainer makes its own).
    make_source(cfg.source, SourceContext(tuple(tasks), tuple(difficulties), cfg.seed,
                                          problems=None if problems is None else tuple(problems)))  # fmt: skip
    style = resolve_prompt_style(cfg.prompt_style, cfg.model, check_model_spec(cfg.model, cfg.tiny_size))
    needs_sandbox = any(get_task(t).runs_code for t in tasks)
    return Plan(tasks, difficulties, style, needs_sandbox, process_reward_specs(cfg, style), problems)


def process_reward_specs(cfg: TrainConfig, prompt_style: str = "auto") -> Any:
    """The reward specs, the process rewards given --prm and --prm-mode and the learnability
    reward given --solver, checked here before anything is written: --prm without the prm reward,
    --solver without learnability, and each such reward made once (the prm reward without --prm, a
    directory that is not a PRM, a bad mode, learnability without a solver)."""
    from ..prm.components import check_mode
    from ..reward_stage import make_component

    specs = parse_reward_specs(cfg.rewards)
    check_mode(cfg.prm_mode)
    if cfg.prm and "prm" not in {s.name for s in specs or ()}:
        raise UserError(
            "--prm names a process reward model, but --rewards has no prm (e.g. countdown:1.0,prm:0.5)"
        )
    if cfg.solver and "learnability" not in {s.name for s in specs or ()}:
        raise UserError("--solver names the learnability reward's solver, but --rewards has no learnability")
    params = {
        "prm": {"path": cfg.prm, "mode": cfg.prm_mode},
        "oracle_steps": {"mode": cfg.prm_mode},
        # The solver sees puzzles as the policy does (the same prompt style and sampling).
        "learnability": {"solver": cfg.solver or cfg.model, "samples": cfg.solver_samples, "tiny_size": cfg.tiny_size,
                         "prompt_style": prompt_style, "temperature": cfg.temperature,
                         "max_completion_length": cfg.max_completion_length, "seed": cfg.seed},
    }  # fmt: skip
    specs = specs and [replace(s, params=params[s.name]) if s.name in params else s for s in specs]
    for spec in specs or ():
        if spec.name in params:
            make_component(spec)  # checks only: a PRM loads when it first scores
    return specs


# The loss's options that `loss_params` may not set: each has a field of its own, or the trainer
# sets it from the batch (counts, lengths, logits).
NOT_LOSS_PARAMS = frozenset(
    {"clip_eps", "clip_eps_high", "beta", "kl_estimator", "max_completion_length", "num_items",
     "num_sequences", "longest_completion", "logits"}
)  # fmt: skip


def loss_params_of(loss_type: str) -> frozenset[str] | None:
    """What `loss_params` may set for the loss `loss_type`: its options that have no field of
    their own (None: a loss registered from outside, whose options are its own business)."""
    options = loss_options(loss_type)
    return None if options is None else options - NOT_LOSS_PARAMS


def resolve_prompt_style(style: str, model: str, kind: str) -> str:
    """'auto': what the model was trained with (its axiom_rl.json), compact for the built-in
    model, else full."""
    if style != "auto":
        return style
    return read_model_card(model).get("prompt_style") or ("compact" if kind == "tiny" else "full")


def check_sampling(temperature: float, top_p: float) -> None:
    at_least(("temperature", temperature, 0.0))
    if not 0 < top_p <= 1:
        raise UserError(f"top_p must be in (0, 1], got {top_p}")


def check_training_options(cfg: Any) -> None:
    """What SFT and GRPO share: model loading and AdamW's numbers, checked before anything is
    written (a run directory left behind by a typo would block the corrected command)."""
    check_load_options(cfg.dtype, cfg.finetune)
    parse_report_to(cfg.report_to)  # a logger asked for and not installed: now, not mid-run
    positive(("lr", cfg.lr), ("lora_alpha", cfg.lora_alpha))
    at_least(
        ("weight_decay", cfg.weight_decay, 0.0),
        ("max_grad_norm", cfg.max_grad_norm, 0.0),
        ("warmup_steps", cfg.warmup_steps, 0),
        ("max_seconds", cfg.max_seconds, 0.0),
        ("lora_r", cfg.lora_r, 1),
        ("lora_dropout", cfg.lora_dropout, 0.0),
        ("save_every", cfg.save_every, 0),
        ("seed", cfg.seed, 0),  # it names generated problems (countdown-d1-s0-0000)
        ("keep_checkpoints", cfg.keep_checkpoints, 0),
    )
    if cfg.lora_dropout >= 1:
        raise UserError(f"lora_dropout must be below 1, got {cfg.lora_dropout}")


def warmup_warning(warmup_steps: int, steps: int) -> str | None:
    """A warm-up as long as the run (sft's default of 20 under `--steps 10`) never lets the
    learning rate reach --lr: said once at the start, not an error (a short trial run is fine)."""
    if warmup_steps > 0 and warmup_steps >= steps:
        return (
            f"warmup_steps ({warmup_steps}) is not below steps ({steps}): the learning rate is still "
            "warming up when the run ends (lower --warmup-steps)"
        )
    return None
