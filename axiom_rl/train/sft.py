"""Supervised fine-tuning: the warm-up before GRPO ("SFT teaches the pattern, GRPO refines it").

Three sources of targets, rendered in exactly the prompt format training and evaluation use:
- reference solutions of generated train problems (distillation from the built-in solvers);
- `problems_file`: the reference solutions of a file's problems (an imported benchmark's
  training part, such as MBPP's, or a `problems export`);
- `from_samples`: the verified-correct completions of an evaluation run in a results database
  (rejection sampling: the model's own successes become its training data).
The loss is the mean negative log-likelihood of completion tokens only (the prompt is context),
the completion ending with EOS so the model learns to stop.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..config import SFTConfig, field_choices, refuse_beside, save_config
from ..errors import UserError, at_least, choose
from ..io import hold_run_dir
from ..models.load import check_model_spec, load_policy
from ..report import write_run_report
from ..resources import machine_errors
from ..speed.host_memory import keep_freed_memory
from ..tasks import get_task
from ..tasks.prompts import format_prompt
from ..types import PASSED, Problem
from ..verify_files import read_problems_file
from .batch import build_batch, completion_logprobs
from .checkpoint import (
    check_run_dir,
    load_checkpoint,
    machine_failure_message,
    restarted_run,
    save_checkpoint,
    save_final_model,
)
from .loggers import parse_report_to
from .loss_scale import LossScale, clip_unscale_step
from .optim import make_optimizer, make_scheduler
from .plan import (
    GENERATED_PROBLEM_OPTIONS,
    check_training_options,
    parse_tasks_and_difficulties,
    resolve_prompt_style,
    warmup_warning,
)
from .problems import FileProblemStream, ProblemStream
from .runlog import RunLog
from .stop import StopRequest


def correct_samples(cfg: SFTConfig) -> list[tuple[Problem, str]]:
    """The verified-correct (problem, completion) pairs of the evaluation run `cfg.from_samples`."""
    from ..eval.store import ResultsDB

    with ResultsDB(cfg.db, create=False) as db:
        good = [a for a in db.attempts(db.require_run(cfg.from_samples)) if a["status"] == PASSED]
        problems = {a["problem_id"]: db.problem(a["problem_id"]) for a in good}
    if not good:
        raise UserError(f"run {cfg.from_samples!r} has no correct completions to learn from")
    return [(problems[a["problem_id"]], a["completion"]) for a in good]


def reference_problems(cfg: SFTConfig) -> list[Problem]:
    """The problems of `cfg.problems_file`, each of which must have a reference solution."""
    problems = read_problems_file(cfg.problems_file)
    missing = [p.id for p in problems if not p.reference_solution]
    if missing:
        raise UserError(
            f"{cfg.problems_file}: {len(missing)} of {len(problems)} problems have no reference solution "
            f"to train on (the first: {missing[0]!r})"
        )
    return problems


class SFTExamples:
    """(prompt, completion) pairs, endlessly, in the order the seed gives: the given samples
    (rejection sampling), shuffled anew each epoch; or reference solutions of the given problems
    (a problems file), reshuffled each pass; or of generated train problems. `skip(n)` moves on
    as if n had been taken, without rendering them (a resume)."""

    def __init__(
        self,
        cfg: SFTConfig,
        tokenizer: Any,
        style: str,
        samples: list[tuple[Problem, str]] | None = None,
        problems: list[Problem] | None = None,
    ) -> None:
        self.cfg, self.tokenizer, self.style, self.samples = cfg, tokenizer, style, samples
        self._order = torch.Generator().manual_seed(cfg.seed)
        self._epoch: list[int] = []
        self._stream: ProblemStream | FileProblemStream | None = None
        if problems is not None:
            self._stream = FileProblemStream(problems, cfg.seed)
        elif samples is None:
            self._stream = ProblemStream(*parse_tasks_and_difficulties(cfg.tasks, cfg.difficulty), cfg.seed)

    def _next(self) -> tuple[Problem, str | None]:
        if self._stream is not None:
            return self._stream.next(), None
        assert self.samples is not None
        if not self._epoch:
            # reversed, so that pop() from the end hands them out in the permutation's order
            self._epoch = torch.randperm(len(self.samples), generator=self._order).tolist()[::-1]
        return self.samples[self._epoch.pop()]

    def take(self, n: int) -> list[tuple[str, str]]:
        pairs = []
        for _ in range(n):
            problem, completion = self._next()
            if completion is None:
                completion = get_task(problem.task).reference_completion(problem, self.style)
            pairs.append(
                (format_prompt(problem, self.tokenizer, self.style, self.cfg.chat_template), completion)
            )
        return pairs

    def skip(self, n: int) -> None:
        for _ in range(n):
            self._next()


def trained_on(cfg: SFTConfig, problems: list[Problem] | None) -> tuple[list[str], list[int]]:
    """The tasks and difficulties the model learns from (for its model card, which `eval compare`
    reads to mark rows as trained on): those of the problems (of the samples or the problems
    file), or else the config's."""
    if problems is None:
        return parse_tasks_and_difficulties(cfg.tasks, cfg.difficulty)
    return sorted({p.task for p in problems}), sorted({p.difficulty for p in problems})


def check_sft_config(cfg: SFTConfig, given: Any = ()) -> tuple[str, list[Problem] | None]:
    """Every option checked before anything is loaded or written (`given`: the fields set on the
    command line). Returns the prompt style, and the problems of a --problems-file (read once)."""
    # One source of targets: the options of another would be silently unused.
    refuse_beside(
        cfg,
        "problems_file",
        {**GENERATED_PROBLEM_OPTIONS, "from_samples": "--from-samples"},
        given,
        "trains on the reference solutions of its problems",
    )
    refuse_beside(
        cfg, "from_samples", GENERATED_PROBLEM_OPTIONS, given, "trains on the correct completions of that run"
    )
    problems = reference_problems(cfg) if cfg.problems_file else None
    if problems is None:
        parse_tasks_and_difficulties(cfg.tasks, cfg.difficulty)
    choose("prompt style", cfg.prompt_style, field_choices("prompt_style"))
    choose("lr schedule", cfg.lr_schedule, field_choices("lr_schedule"))
    at_least(("steps", cfg.steps, 1), ("batch_size", cfg.batch_size, 1))
    check_training_options(cfg)
    style = resolve_prompt_style(cfg.prompt_style, cfg.model, check_model_spec(cfg.model, cfg.tiny_size))
    return style, problems


def sft(
    cfg: SFTConfig,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
    say: Callable[[str], None] = print,
) -> Path:
    """Fine-tune and write output_dir/final_model. Returns the final model's directory. Ctrl-C
    finishes the step, writes a checkpoint and raises SFTStopped; `resume` continues from it."""
    style, problems = check_sft_config(cfg)
    samples = correct_samples(cfg) if cfg.from_samples else None  # before anything is written
    run_dir = Path(cfg.output_dir)
    check_run_dir(cfg)
    with (
        machine_errors(run_dir, then=lambda failure: machine_failure_message(failure, run_dir, "sft")),
        hold_run_dir(run_dir),  # and checked again once held: another may have started there first
    ):
        ckpt = check_run_dir(cfg, held=True)
        if ckpt is None:
            save_config(cfg, run_dir / "config.json")
        return _sft(cfg, run_dir, ckpt, style, samples, problems, progress, say)


class SFTStopped(KeyboardInterrupt):
    """Ctrl-C ended the run after a checkpoint: resumable. (A KeyboardInterrupt, so a caller
    that does not look for it, the quickstart, treats it as the interruption it is.)"""

    def __init__(self, step: int, run_dir: Path) -> None:
        super().__init__(f"stopped at step {step}")
        self.step, self.run_dir = step, run_dir


def _sft(
    cfg: SFTConfig, run_dir: Path, ckpt: Path | None, style: str, samples: list[tuple[Problem, str]] | None,
    problems: list[Problem] | None, progress: Callable[[int, int, dict[str, Any]], None] | None, say: Callable[[str], None],
) -> Path:  # fmt: skip
    torch.manual_seed(cfg.seed)
    policy = load_policy(
        cfg.model, **cfg.load_options(), device=cfg.device, need_reference=False, seed=cfg.seed
    )
    if policy.device.type == "cpu":
        keep_freed_memory()
    tok = policy.tokenizer
    optimizer = make_optimizer(policy.trainable_parameters, cfg.lr, cfg.weight_decay)
    scheduler = make_scheduler(cfg, optimizer)
    examples = SFTExamples(cfg, tok, style, samples, problems)
    scale = LossScale(enabled=policy.dtype == torch.float16)  # see loss_scale.py
    step = 0
    saved_step = None  # the step of the checkpoint on disk that this run wrote or loaded
    if ckpt is not None:
        state = load_checkpoint(ckpt, cfg, policy.model, optimizer, scheduler, policy.lora)
        step = saved_step = state["step"]
        scale.load_state_dict(state.get("loss_scale"))
        examples.skip(step * cfg.batch_size)  # the examples the steps so far took
        save_config(cfg, run_dir / "config.json")  # the resumed run's options (--steps, say), once loaded
    log = RunLog(run_dir, resume_step=step if ckpt is not None else 0 if restarted_run(cfg, ckpt) else None, report_to=parse_report_to(cfg.report_to),
                 config=dataclasses.asdict(cfg))  # fmt: skip
    source = (
        f"samples of {cfg.from_samples}"
        if cfg.from_samples
        else f"reference solutions of {cfg.problems_file}"
        if cfg.problems_file
        else ",".join(cfg.tasks)
    )
    log.info(f"{'resumed at step ' + str(step) if ckpt else 'started'}: SFT of {cfg.model} on {source}")
    short = warmup_warning(cfg.warmup_steps, cfg.steps)
    if short and ckpt is None:
        log.warning(short, say)

    tasks, difficulties = trained_on(cfg, problems if samples is None else [p for p, _ in samples])

    def card() -> dict[str, Any]:  # of every saved model: how it was prompted, what it learnt
        return {
            "method": "sft",
            "base": cfg.model,
            "prompt_style": style,
            "chat_template": cfg.chat_template,
            "tasks": tasks,
            "difficulties": difficulties,
            "sft_steps": step,
        }

    def checkpoint() -> None:  # unless this step's is on disk already (a stop right after a save)
        nonlocal saved_step
        if step == saved_step:
            return
        state = {"step": step, "loss_scale": scale.state_dict() if scale.enabled else None}
        save_checkpoint(run_dir, step, policy, optimizer, scheduler, state, cfg.keep_checkpoints, card=card())
        log.info(f"checkpoint at step {step}")
        saved_step = step

    start = time.perf_counter()
    policy.model.train()
    try:
        with StopRequest(say) as stop:
            while step < cfg.steps and not stop.requested:
                step += 1
                batch_pairs = examples.take(cfg.batch_size)
                prompts = tok([p for p, _ in batch_pairs], add_special_tokens=False)["input_ids"]
                completions = [
                    [*ids, tok.eos_token_id]
                    for ids in tok([c for _, c in batch_pairs], add_special_tokens=False)["input_ids"]
                ]
                batch = build_batch(prompts, completions, tok.pad_token_id, policy.device)
                logprobs, _ = completion_logprobs(policy.model, batch)
                loss = -(logprobs * batch.completion_mask).sum() / batch.completion_mask.sum()
                optimizer.zero_grad(set_to_none=True)
                scale.scaled(loss).backward()
                _, stepped = clip_unscale_step(
                    optimizer, policy.trainable_parameters, scale, cfg.max_grad_norm
                )
                if stepped or not scale.enabled:  # (without fp16 scaling, as always: a step each time)
                    scheduler.step()
                elapsed = time.perf_counter() - start
                row = {
                    "step": step,
                    "loss": float(loss.detach()),
                    "lr": scheduler.get_last_lr()[0],
                    "elapsed_s": elapsed,
                    **({"loss_scale": scale.value, "skipped": int(not stepped)} if scale.enabled else {}),
                }
                log.metrics(row)
                if progress is not None:
                    progress(step, cfg.steps, row)
                if cfg.max_seconds and elapsed >= cfg.max_seconds:
                    log.info(f"time budget of {cfg.max_seconds}s reached at step {step}")
                    break
                if cfg.save_every and step % cfg.save_every == 0 and step < cfg.steps:
                    checkpoint()
        checkpoint()
        if stop.requested and step < cfg.steps:
            log.info(f"stopped by request (Ctrl-C) at step {step}; axiom-rl sft --resume continues it")
            raise SFTStopped(step, run_dir)
        save_final_model(policy, run_dir / "final_model", merge=cfg.merge, card=card())
    except BaseException as error:
        if not isinstance(error, SFTStopped):
            log.failed(step - 1, error)  # (step counts the one under way)
        raise
    finally:
        log.close()
    write_run_report(run_dir)  # report.md and training.png: the loss and learning rate per step
    return run_dir / "final_model"
