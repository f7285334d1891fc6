"""Supervised fine-tuning: the warm-up before GRPO ("SFT teaches the pattern, GRPO refines it").

Two sources of targets, rendered in exactly the prompt format training and evaluation use:
- reference solutions of generated train problems (distillation from the built-in solvers);
- `from_samples`: the verified-correct completions of an evaluation run in a results database
  (rejection sampling: the model's own successes become its training data).
The loss is the mean negative log-likelihood of completion tokens only (the prompt is context),
the completion ending with EOS so the model learns to stop.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from ..config import SFTConfig, save_config
from ..errors import UserError, at_least, choose
from ..io import check_not_held, hold_run_dir
from ..models.load import check_model_spec, load_policy
from ..tasks import get_task
from ..tasks.prompts import format_prompt
from ..types import PASSED, Problem
from .batch import build_batch, completion_logprobs
from .host_memory import keep_freed_memory
from .problems import ProblemStream
from .runlog import RunLog


def correct_samples(cfg: SFTConfig) -> list[tuple[Problem, str]]:
    """The verified-correct (problem, completion) pairs of the evaluation run `cfg.from_samples`."""
    from ..eval.store import ResultsDB

    with ResultsDB(cfg.db, create=False) as db:
        good = [a for a in db.attempts(db.require_run(cfg.from_samples)) if a["status"] == PASSED]
        problems = {a["problem_id"]: db.problem(a["problem_id"]) for a in good}
    if not good:
        raise UserError(f"run {cfg.from_samples!r} has no correct completions to learn from")
    return [(problems[a["problem_id"]], a["completion"]) for a in good]


def sft_examples(
    cfg: SFTConfig, tokenizer: Any, style: str, samples: list[tuple[Problem, str]] | None = None
) -> Iterator[tuple[str, str]]:
    """(prompt, completion) pairs, endlessly, in the order the seed gives: the given samples
    (rejection sampling), or reference solutions of generated train problems."""
    if samples is not None:
        pairs = [(format_prompt(p, tokenizer, style, cfg.chat_template), c) for p, c in samples]
        order = torch.Generator().manual_seed(cfg.seed)
        while True:
            for i in torch.randperm(len(pairs), generator=order).tolist():
                yield pairs[i]
    from .grpo import parse_tasks_and_difficulties

    stream = ProblemStream(*parse_tasks_and_difficulties(cfg.tasks, cfg.difficulty), cfg.seed)
    while True:
        p = stream.next()
        yield (
            format_prompt(p, tokenizer, style, cfg.chat_template),
            get_task(p.task).reference_completion(p, style),
        )


def trained_on(cfg: SFTConfig, samples: list[tuple[Problem, str]] | None) -> tuple[list[str], list[int]]:
    """The tasks and difficulties the model learns from (for its model card, which `eval compare`
    reads to mark rows as trained on): those of the samples, or else the config's."""
    from .grpo import parse_tasks_and_difficulties

    if samples is None:
        return parse_tasks_and_difficulties(cfg.tasks, cfg.difficulty)
    return sorted({p.task for p, _ in samples}), sorted({p.difficulty for p, _ in samples})


def check_sft_config(cfg: SFTConfig) -> str:
    from .grpo import check_training_options, parse_tasks_and_difficulties, resolve_prompt_style

    parse_tasks_and_difficulties(cfg.tasks, cfg.difficulty)
    choose("prompt style", cfg.prompt_style, ("auto", "full", "compact"))
    choose("lr schedule", cfg.lr_schedule, ("constant", "linear", "cosine"))
    at_least(("steps", cfg.steps, 1), ("batch_size", cfg.batch_size, 1))
    check_training_options(cfg)
    return resolve_prompt_style(cfg.prompt_style, cfg.model, check_model_spec(cfg.model, cfg.tiny_size))


def sft(cfg: SFTConfig, progress: Callable[[int, int, dict[str, Any]], None] | None = None) -> Path:
    """Fine-tune and write output_dir/final_model. Returns the final model's directory."""
    style = check_sft_config(cfg)
    samples = correct_samples(cfg) if cfg.from_samples else None  # before anything is written
    run_dir = Path(cfg.output_dir)
    check_not_held(run_dir)
    check_free(run_dir)
    with hold_run_dir(run_dir):  # and checked again once held: another may have started there first
        check_free(run_dir)
        save_config(cfg, run_dir / "config.json")
        return _sft(cfg, run_dir, style, samples, progress)


def check_free(run_dir: Path) -> None:
    if (run_dir / "config.json").exists():
        raise UserError(f"{run_dir} already holds a run; choose another --output-dir")


def _sft(
    cfg: SFTConfig, run_dir: Path, style: str, samples: list[tuple[Problem, str]] | None,
    progress: Callable[[int, int, dict[str, Any]], None] | None,
) -> Path:  # fmt: skip
    from transformers import get_scheduler

    from .grpo import make_optimizer, save_final_model

    torch.manual_seed(cfg.seed)
    policy = load_policy(
        cfg.model, **cfg.load_options(), device=cfg.device, need_reference=False, seed=cfg.seed
    )
    if policy.device.type == "cpu":
        keep_freed_memory()
    tok = policy.tokenizer
    optimizer = make_optimizer(policy.trainable_parameters, cfg.lr, cfg.weight_decay)
    scheduler = get_scheduler(
        cfg.lr_schedule, optimizer, num_warmup_steps=cfg.warmup_steps, num_training_steps=cfg.steps
    )
    examples = sft_examples(cfg, tok, style, samples)
    log = RunLog(run_dir, tensorboard=False)
    log.info(
        f"SFT of {cfg.model} on {'samples of ' + cfg.from_samples if cfg.from_samples else ','.join(cfg.tasks)}"
    )
    start = time.perf_counter()
    policy.model.train()
    step = 0
    try:
        for step in range(1, cfg.steps + 1):
            batch_pairs = list(itertools.islice(examples, cfg.batch_size))
            prompts = tok([p for p, _ in batch_pairs], add_special_tokens=False)["input_ids"]
            completions = [
                [*ids, tok.eos_token_id]
                for ids in tok([c for _, c in batch_pairs], add_special_tokens=False)["input_ids"]
            ]
            batch = build_batch(prompts, completions, tok.pad_token_id, policy.device)
            logprobs, _ = completion_logprobs(policy.model, batch)
            loss = -(logprobs * batch.completion_mask).sum() / batch.completion_mask.sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.trainable_parameters, cfg.max_grad_norm or math.inf)
            optimizer.step()
            scheduler.step()
            elapsed = time.perf_counter() - start
            row = {
                "step": step,
                "loss": float(loss.detach()),
                "lr": scheduler.get_last_lr()[0],
                "elapsed_s": elapsed,
            }
            log.metrics(row)
            if progress is not None:
                progress(step, cfg.steps, row)
            if cfg.max_seconds and elapsed >= cfg.max_seconds:
                log.info(f"time budget of {cfg.max_seconds}s reached at step {step}")
                break
        tasks, difficulties = trained_on(cfg, samples)
        card = {
            "prompt_style": style,
            "chat_template": cfg.chat_template,
            "tasks": tasks,
            "difficulties": difficulties,
            "sft_steps": step,
        }
        save_final_model(policy, run_dir / "final_model", merge=cfg.merge, card=card)
    finally:
        log.close()
    return run_dir / "final_model"
