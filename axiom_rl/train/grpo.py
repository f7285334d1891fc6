"""GRPO training, top to bottom:

    problems -> prompts -> rollout (G completions each) -> verify -> rewards -> advantages
      -> reference (and old) log-probs -> num_iterations x [loss -> backward -> clip -> step]
      -> metrics, samples, checkpoint

Each stage is a call with a plain result; the algorithm choices are names looked up in the
registries (`compute_advantages`, `policy_loss`), never branches here.

Where this departs from textbook GRPO (Shao et al. 2024):
- A completion whose verification failed for the verifier's own reasons (a sandbox worker that
  failed twice: status internal_error) is scored as a failure, and counted in `internal_errors`.
  It is not masked out: a policy that could cause one would otherwise turn each of its own
  failures into a neutral outcome (the sandbox's holes that allowed it are closed, and tested).
- With `dynamic_sampling`, groups whose rewards are all equal are replaced by fresh prompts, up to
  `dynamic_sampling_rounds` extra rollouts (DAPO, Yu et al. 2025); groups still flat then stay.
- Log-probs use logits divided by the sampling temperature (as TRL does), so ratios compare
  against the distribution that sampled.
- `steps` counts optimizer steps: each rollout feeds `num_iterations` of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..algorithms import Estimator, Groups, policy_loss, regroupable, step_advantages, zero_variance_groups
from ..config import TrainConfig, save_config
from ..io import hold_run_dir
from ..models.load import (
    Policy,
    load_policy,
    resolve_device,
)
from ..report import write_run_report
from ..resources import machine_errors
from ..reward_stage import RewardStage, StepRewards
from ..rollout import Rollout, decode_completion, generate_verified, get_backend, truncation_warning
from ..sandbox import Sandbox, pool_size
from ..sources import Outcome, Source, SourceContext, make_source, outcomes
from ..speed import Speed, replay
from ..speed.host_memory import keep_freed_memory
from ..speed.replay import LinearOutputs
from ..tasks import get_task
from ..tasks.prompts import format_prompt
from ..terminal import printable
from ..types import INTERNAL_ERROR, PASSED, Problem, Verdict
from ..verifier import BatchVerification, overlaps_verification, sandbox_workers
from .batch import TokenBatch, build_batch, completion_logprobs, micro_batches
from .checkpoint import (
    check_run_dir,
    load_checkpoint,
    machine_failure_message,
    restarted_run,
    rng_state,
    save_checkpoint,
    save_final_model,
)
from .distributed import Parallel
from .loggers import parse_report_to
from .loss_scale import LossScale, clip_unscale_step
from .optim import make_optimizer, make_scheduler
from .plan import Plan, plan_run, warmup_warning
from .runlog import RunLog
from .stop import StopRequest


def speed_of(cfg: TrainConfig, device: torch.device) -> Speed:
    """The run's speed settings: config.json's, as train() resolved them, or for a config that was
    not resolved (a test's, a library caller's) the defaults of `device`, under its `speed:`."""
    return Speed.resolve(cfg.speed, device.type)


def share_prompt_passes(batch: TokenBatch, cfg: TrainConfig) -> bool:
    """Whether the reference, old-policy and training passes run each group's prompt once, not G
    times (batch.py: _shared_prompt_logits): Speed.share_prompt_passes, on a CPU by default, which
    computes every token it is given (1.07-1.19x faster steps at 4 prompts x G = 4). On an H100 the
    separate prompt pass, the cache indexing and its backward (a scatter-add) cost more than the
    prompt tokens they save: steps took 1.35x as long (3M model) and 1.05x (0.5B, 8 x 8, 512
    tokens; its backward 412 ms against 212), for 3-7% less memory."""
    return speed_of(cfg, batch.input_ids.device).share_prompt_passes


class TrainingStopped(RuntimeError):
    """The run stopped on purpose (repeated non-finite losses); a checkpoint was written."""


# --------------------------------------------------------------------------------- stages


@dataclass
class Scored:
    """One rollout batch, verified and rewarded. Rows are prompt-major: i*G + j."""

    problems: list[Problem]  # [B]
    rollout: Rollout  # [B*G]
    verdicts: list[Verdict]  # [B*G]
    rewards: list[float]  # [B*G]
    components: list[dict[str, float]]  # [B*G]
    time_rollout: float = 0.0
    time_reward: float = 0.0
    steps: list[StepRewards | None] = field(default_factory=list)  # [B*G]: process rewards, if any
    step_weight: float = 0.0  # the process term's scale (StageResult.step_weight)


@dataclass
class PendingRollout:
    """A rollout whose completions may still be under verification (overlap_verification)."""

    problems: list[Problem]  # [B]
    rollout: Rollout  # [B*G]
    stage: RewardStage
    time_rollout: float
    verification: BatchVerification  # of the rows [B*G]

    def scored(self) -> Scored:
        """Wait for the verdicts (verify, where nothing did yet); the reward stage's rewards.
        time_reward is the time spent here."""
        start = time.perf_counter()
        texts = self.rollout.texts
        verdicts = self.verification.verdicts(texts)
        result = self.stage.score(self.verification.problems, texts, verdicts)
        return Scored(
            self.problems,
            self.rollout,
            verdicts,
            result.rewards,
            result.components,
            self.time_rollout,
            time.perf_counter() - start,
            result.steps,
            result.step_weight,
        )


def start_rollout(
    policy: Policy,
    backend: Any,
    problems: list[Problem],
    cfg: TrainConfig,
    plan: Plan,
    stage: RewardStage,
    sandbox: Sandbox | None,
    overlap: bool,
    remote: Any = None,
) -> PendingRollout:
    """Generate G completions per problem. With `overlap` (and a sandbox), each completion goes to
    the sandbox as soon as it ends, while the others decode on, and verification may still be
    running when this returns; otherwise it starts when generation is done (`scored()`)."""
    g = cfg.num_generations
    prompts = [format_prompt(p, policy.tokenizer, plan.prompt_style, cfg.chat_template) for p in problems]
    stops = sorted({s for p in problems for s in get_task(p.task).stop_strings})
    if cfg.min_completion_length >= cfg.max_completion_length:
        stops = []  # forced full length: identical work for every completion
    rows = [p for p in problems for _ in range(g)]
    verification = BatchVerification(rows, sandbox, cfg.verify_timeout, background=overlap, remote=remote)
    start = time.perf_counter()
    policy.model.eval()
    rollout = generate_verified(backend, policy.model, policy.tokenizer, prompts, g, stops, cfg, verification)
    return PendingRollout(problems, rollout, stage, time.perf_counter() - start, verification)


def group_rewards(scored: Scored, g: int) -> torch.Tensor:
    """Rewards [B*G], G consecutive rows per prompt. A row the verifier failed on for its own
    reasons (internal_error) has the reward of a completion that passed no test."""
    return torch.tensor(scored.rewards, dtype=torch.float32)


def scored_outcomes(scored: Scored) -> list[Outcome]:
    """What the problem source observes of a scored rollout: each problem with its G rows."""
    return outcomes(scored.problems, scored.rollout.texts, scored.verdicts, scored.rewards)


def refill_flat_groups(
    scored: Scored,
    policy: Policy,
    backend: Any,
    source: Source,
    cfg: TrainConfig,
    plan: Plan,
    stage: RewardStage,
    sandbox: Sandbox | None,
    remote: Any = None,
) -> int:
    """DAPO dynamic sampling: swap groups with all-equal rewards for fresh prompts. Returns how many."""
    g, refilled = cfg.num_generations, 0
    for _ in range(cfg.dynamic_sampling_rounds):
        rewards = group_rewards(scored, g).view(-1, g)
        flat = [i for i, row in enumerate(rewards) if float(row.max() - row.min()) <= 1e-6]
        if not flat:
            break
        fresh = start_rollout(
            policy,
            backend,
            source.next_batch(len(flat)),
            cfg,
            plan,
            stage,
            sandbox,
            overlap=False,
            remote=remote,
        ).scored()
        source.observe(scored_outcomes(fresh))
        for k, i in enumerate(flat):
            scored.problems[i] = fresh.problems[k]
            for j in range(g):
                src, dst = k * g + j, i * g + j
                scored.rollout.prompt_ids[dst] = fresh.rollout.prompt_ids[src]
                scored.rollout.completion_ids[dst] = fresh.rollout.completion_ids[src]
                scored.rollout.texts[dst] = fresh.rollout.texts[src]
                scored.rollout.finished[dst] = fresh.rollout.finished[src]
                scored.verdicts[dst] = fresh.verdicts[src]
                scored.rewards[dst] = fresh.rewards[src]
                scored.components[dst] = fresh.components[src]
                scored.steps[dst] = fresh.steps[src]
        scored.rollout.linear_outputs = None  # its rows no longer match the record's
        scored.time_rollout += fresh.time_rollout
        scored.time_reward += fresh.time_reward
        refilled += len(flat)
    return refilled


def with_step_credit(
    outcome: torch.Tensor, scored: Scored, tokenizer: Any, g: int, batch: TokenBatch, groups: str = "all"
) -> torch.Tensor:
    """The advantages the loss gets: the outcome advantages [B*G] as they are, or, where a reward
    component gave step rewards, [B*G, T]: each token's outcome advantage plus its process term
    (algorithms.step_advantages: its step's and later steps' rewards, normalised in the group),
    scaled by the step components' weight; with groups="mixed", the process term only in groups
    whose outcome rewards differ: a group whose answers are all equally right or wrong has no
    outcome advantage, and there a process reward alone would move the policy (toward a learned
    PRM's errors, where it has them)."""
    if not any(s is not None for s in scored.steps):
        return outcome
    ends: list[list[int]] = []
    values: list[list[float]] = []
    for ids, steps in zip(scored.rollout.completion_ids, scored.steps):
        merged: dict[int, float] = {}
        if steps is not None:
            for t, v in zip(token_ends(tokenizer, ids, steps.ends), steps.values):
                merged[t] = merged.get(t, 0.0) + v  # steps that end in the same token: one step
        ends.append(sorted(merged))
        values.append([merged[t] for t in sorted(merged)])
    process = step_advantages(ends, values, g, batch.completion_ids.shape[1])  # [B*G, T]
    if groups == "mixed":
        # scored.rewards leaves process-mode components out: they are the outcome rewards
        flat = zero_variance_groups(torch.tensor(scored.rewards), g).repeat_interleave(g)
        process = process.masked_fill(flat.unsqueeze(1), 0.0)
    return outcome.unsqueeze(1).to(process.dtype) + scored.step_weight * process


def token_ends(tokenizer: Any, ids: Sequence[int], char_ends: Sequence[int]) -> list[int]:
    """For offsets in a completion's text (decode_completion of `ids`): how many of its tokens it
    takes to reach each, the token counts step_advantages expects: the fewest whose text begins
    with the completion's text up to that offset (a character of several tokens, or a step that
    ends inside a token, ends with its last token; a prefix that ends inside a character decodes
    to a replacement character, not to it)."""
    text = decode_completion(tokenizer, ids)
    prefixes = [decode_completion(tokenizer, ids[: k + 1]) for k in range(len(ids))]
    out, k = [], 0
    for end in char_ends:
        while k < len(prefixes) and not (len(prefixes[k]) >= end and prefixes[k][:end] == text[:end]):
            k += 1
        out.append(min(k + 1, len(ids)))
    return out


def group_keys(problems: list[Problem], key: str) -> tuple[str, ...]:
    """Which groups are "the same" across steps, for an estimator that keeps state per group
    (krpo): by problem id, task, or task and difficulty (`krpo_key`)."""
    if key == "problem":
        return tuple(p.id for p in problems)
    if key == "task":
        return tuple(p.task for p in problems)
    return tuple(f"{p.task}/d{p.difficulty}" for p in problems)


def update_micro_batches(
    batch: TokenBatch, cfg: TrainConfig
) -> list[tuple[slice | torch.Tensor, TokenBatch]]:
    """The micro-batches of an optimizer step (batch.micro_batches), which the frozen passes run
    too: each row's reference and old log-probs come from the layout its policy log-probs will."""
    return micro_batches(
        batch,
        cfg.gradient_accumulation_steps,
        share_prompts=share_prompt_passes(batch, cfg),
        regroup=regroupable(cfg.loss_type),
        bucket=speed_of(cfg, batch.input_ids.device).bucket_lengths,
    )


@torch.no_grad()
def frozen_logprobs(model: Any, batch: TokenBatch, cfg: TrainConfig) -> torch.Tensor:
    """Log-probs [N, T] without gradient, micro-batch by micro-batch (0 past a trimmed
    micro-batch's completions: padding there)."""
    model.eval()
    share = share_prompt_passes(batch, cfg)
    parts = update_micro_batches(batch, cfg)
    if len(parts) == 1:
        return completion_logprobs(model, parts[0][1], cfg.temperature, share_prompts=share)[0]
    out = torch.zeros(batch.completion_ids.shape, dtype=torch.float32, device=batch.input_ids.device)
    for rows, part in parts:
        logprobs = completion_logprobs(model, part, cfg.temperature, share_prompts=share)[0]
        out[rows, : logprobs.shape[1]] = logprobs
    return out


def rollout_batch(rollout: Rollout, policy: Policy) -> TokenBatch:
    return build_batch(
        rollout.prompt_ids, rollout.completion_ids, policy.tokenizer.pad_token_id, policy.device
    )


def frozen_passes(
    policy: Policy, batch: TokenBatch, cfg: TrainConfig
) -> tuple[torch.Tensor | None, torch.Tensor | None, float]:
    """(reference log-probs, old log-probs, seconds): each None where it is not needed (beta = 0;
    mu = 1). Neither reads the rewards or the completion mask."""
    start = time.perf_counter()
    ref = None
    if cfg.beta != 0.0:
        with policy.reference_mode() as reference:
            ref = frozen_logprobs(reference, batch, cfg)
    old = frozen_logprobs(policy.model, batch, cfg) if cfg.num_iterations > 1 else None
    return ref, old, time.perf_counter() - start


def optimizer_step(
    policy: Policy,
    train_model: Any,
    optimizer: torch.optim.Optimizer,
    batch: TokenBatch,
    advantages: torch.Tensor,
    old: torch.Tensor | None,
    ref: torch.Tensor | None,
    cfg: TrainConfig,
    parallel: Parallel,
    scale: LossScale | None = None,
    recorded: LinearOutputs | None = None,
) -> dict[str, float]:
    """One optimizer step over the whole rollout batch, in gradient-accumulation micro-batches.

    `recorded`: the rollout's linear outputs for this batch, from the weights this step starts
    with, replayed in the forward where they fit (speed/replay.py).

    A non-finite loss still goes through backward (every rank must take part in the gradient
    all-reduce); the non-finite gradient norm that results makes every rank skip the step alike.
    """
    scale = scale or LossScale(enabled=False)
    policy.model.train()
    optimizer.zero_grad(set_to_none=True)
    n = batch.input_ids.shape[0]
    # DDP averages gradients over ranks, so token-normalised losses use the global count / world.
    tokens = float(batch.completion_mask.sum())
    num_items = parallel.total(tokens) / parallel.world
    # The whole step's longest completion, over micro-batches and ranks (hybrid's alpha: one a step).
    longest = max(parallel.gather(float(batch.completion_mask.sum(-1).max())))
    parts = update_micro_batches(batch, cfg)
    seen = LossMetrics(tokens)
    time_forward = time_backward = 0.0
    for index, (rows, part) in enumerate(parts):
        t = part.completion_length  # a trimmed micro-batch's: the frozen log-probs are cut to it
        with parallel.no_sync(train_model, skip=index < len(parts) - 1):
            t0 = time.perf_counter()
            logprobs, entropy = completion_logprobs(
                train_model,
                part,
                cfg.temperature,
                with_entropy=True,
                share_prompts=share_prompt_passes(part, cfg),
                recorded=None if recorded is None else recorded.rows(rows),
            )
            loss, metrics = policy_loss(
                logprobs,
                None if old is None else old[rows, :t],
                None if ref is None else ref[rows, :t],
                advantages[rows] if advantages.dim() == 1 else advantages[rows, :t],  # [n] or [n, T]
                part.completion_mask,
                loss_type=cfg.loss_type,
                clip_eps=cfg.clip_eps,
                clip_eps_high=cfg.clip_eps_high,
                beta=cfg.beta,
                kl_estimator=cfg.kl_estimator,
                max_completion_length=cfg.max_completion_length,
                num_items=num_items,
                num_sequences=n,
                longest_completion=longest,
                **cfg.loss_params,
            )
            t1 = time.perf_counter()
            scale.scaled(loss).backward()  # fp16: see loss_scale.py
            time_forward += t1 - t0
            time_backward += time.perf_counter() - t1
        seen.add(float(loss.detach()), metrics, entropy, part.completion_mask)
    loss_scale = scale.value
    grad_norm, finite = clip_unscale_step(
        optimizer,
        policy.trainable_parameters,
        scale,
        cfg.max_grad_norm,
        loss_finite=math.isfinite(seen.loss),
    )
    optimizer.zero_grad(set_to_none=True)
    return {
        "loss": seen.loss,
        "finite": 1.0 if finite else 0.0,
        # fp16: gradients too large for fp16 at this loss scale, from a finite loss (not a bad step)
        "overflow": 1.0 if scale.enabled and not finite and math.isfinite(seen.loss) else 0.0,
        **({"loss_scale": loss_scale} if scale.enabled else {}),
        "grad_norm": grad_norm,
        "time_forward_s": time_forward,
        "time_backward_s": time_backward,
        **seen.step_metrics(),
    }


class LossMetrics:
    """A step's loss and the loss's metrics, gathered over its micro-batches. The loss's metrics
    are means over a micro-batch's tokens: weighed by its tokens, they are the step's (its ratio
    extremes are the extremes of the micro-batches')."""

    def __init__(self, tokens: float) -> None:
        self.tokens = max(1.0, tokens)  # the step's completion tokens
        self.loss = 0.0
        self.totals: Counter[str] = Counter()
        self.extremes: dict[str, float] = {}
        self.entropy_sum = 0.0

    def add(self, loss: float, metrics: dict[str, float], entropy: torch.Tensor, mask: torch.Tensor) -> None:
        self.loss += loss
        share = float(mask.sum()) / self.tokens
        for k, v in metrics.items():
            if k in ("ratio_min", "ratio_max"):
                pick = min if k == "ratio_min" else max
                self.extremes[k] = pick(self.extremes.get(k, v), v)
            else:
                self.totals[k] += v * share
        self.entropy_sum += float((entropy * mask).sum())

    def step_metrics(self) -> dict[str, float]:
        return {"entropy": self.entropy_sum / self.tokens, **self.totals, **self.extremes}


# --------------------------------------------------------------------------------- the loop


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    metrics: list[dict[str, Any]] = field(default_factory=list)
    stopped_early: bool = False
    is_main: bool = True


class _NullLog:
    """What ranks other than 0 log: nothing."""

    def info(self, message: str) -> None: ...
    def warning(self, message: str, say: Callable[[str], None]) -> None: ...
    def failed(self, steps_done: int, error: BaseException) -> None: ...
    def metrics(self, row: dict[str, Any]) -> None: ...
    def samples(self, rows: list[dict[str, Any]]) -> None: ...
    def close(self) -> None: ...


def train(cfg: TrainConfig, progress: Any = None, say: Callable[[str], None] = print) -> TrainResult:
    """Run GRPO as configured. `progress(step, total, row)` is called after every step."""
    plan = plan_run(cfg)
    parallel = Parallel(resolve_device(cfg.device))
    # Every speed setting resolved for this device: what runs is what config.json says.
    cfg = dataclasses.replace(cfg, speed=Speed.resolve(cfg.speed, parallel.device.type).as_dict())
    if speed_of(cfg, parallel.device).keep_freed_memory:
        keep_freed_memory()  # large activations reuse mapped pages (see host_memory)
    run_dir, ckpt = Path(cfg.output_dir), check_run_dir(cfg)
    parallel.barrier()  # every rank has checked the directory before rank 0 writes to it
    # Rank 0 holds the run directory: a second process on it (a resume while this run goes on)
    # is refused instead of interleaving its metrics and checkpoints with this one's.
    with (
        machine_errors(run_dir, then=lambda failure: machine_failure_message(failure, run_dir, "train")),
        hold_run_dir(run_dir) if parallel.is_main else contextlib.nullcontext(),
    ):
        if parallel.is_main:
            ckpt = check_run_dir(cfg, held=True)  # again: another may have finished first
            if ckpt is None:  # a resume writes its options once its checkpoint has loaded
                save_config(cfg, run_dir / "config.json")
        result = _train(cfg, plan, parallel, run_dir, ckpt, progress, say)
        if parallel.is_main:
            write_run_report(run_dir)  # report.md and training.png: rewards, KL, lengths, flat groups
        return result


def _train(
    cfg: TrainConfig, plan: Plan, parallel: Parallel, run_dir: Path, ckpt: Path | None,
    progress: Any, say: Callable[[str], None],
) -> TrainResult:  # fmt: skip
    """The loop: each rollout is verified, rewarded and observed by the problem source, turned into
    advantages, and trained on for num_iterations optimizer steps; checkpoints as configured."""
    run = Run.start(cfg, plan, parallel, run_dir, ckpt, say)
    result = TrainResult(run_dir, run.step, is_main=parallel.is_main)
    with contextlib.ExitStack() as stack, StopRequest(say if parallel.is_main else (lambda m: None)) as stop:
        run.open(stack)
        monitor = Monitor(cfg, parallel, run.log, say, stop)
        while run.step < cfg.steps and not monitor.should_stop(run.step):
            # 1. rollout, verification, rewards; the source sees every result
            scored, batch, early, refilled, zero_std_before = run.rollout(monitor)
            batch = batch if batch is not None else rollout_batch(scored.rollout, run.policy)
            # 2. rewards -> advantages ([B*G], or [B*G, T] where a reward component gave step credit)
            rewards, info, advantages = run.advantages(scored, batch, monitor)
            # 3. reference and old log-probs (skipped when not needed: beta = 0, mu = 1)
            ref, old, time_ref = early if early is not None else frozen_passes(run.policy, batch, cfg)
            # 4. num_iterations optimizer steps on this rollout
            for i in range(cfg.num_iterations):
                if run.step >= cfg.steps:
                    break
                update, time_update = run.update(scored, batch, advantages, old, ref)
                row = step_metrics(
                    run.step, scored, rewards, info, update, refilled, zero_std_before, run.scheduler,
                    time_update + (time_ref if i == 0 else 0.0), cfg,
                )  # fmt: skip
                row["time_reference_s"] = time_ref if i == 0 else 0.0  # the first update's
                row.update({f"source/{k}": float(v) for k, v in run.source.metrics().items()})
                row = merge_ranks(row, rewards, parallel)
                run.log.metrics(row)
                run.log.samples(sample_rows(run.step, scored, cfg))
                result.metrics.append(row)
                if progress is not None and parallel.is_main:
                    progress(run.step, cfg.steps, row)
                if cfg.verbose and parallel.is_main:
                    _print_samples(say, run.step, scored, cfg)
                if run.bad_steps >= cfg.max_bad_steps:
                    run.checkpoint()
                    result.steps = run.step
                    raise TrainingStopped(
                        f"{run.bad_steps} steps in a row had a non-finite loss; stopped at step {run.step} "
                        "(checkpoint written)"
                    )
                if cfg.save_every and run.step % cfg.save_every == 0 and run.step < cfg.steps:
                    run.checkpoint()
        run.checkpoint()
        result.stopped_early = run.step < cfg.steps and not monitor.budget_spent
        result.steps = run.step
        run.finish(result.stopped_early)
    parallel.close()
    return result


class Monitor:
    """What watches the loop from outside the algorithm: a stop request (Ctrl-C, every rank at
    the same step), the time budget, and the warnings said once (truncated prompts) or when a
    run has stalled (rollouts in a row with nothing to learn from)."""

    def __init__(
        self, cfg: TrainConfig, parallel: Parallel, log: Any, say: Callable[[str], None], stop: Any
    ) -> None:
        self.cfg, self.parallel, self.log, self.say, self.stop = cfg, parallel, log, say, stop
        self.started = time.perf_counter()
        self.budget_spent = False
        self.flat_steps = 0  # rollouts in a row whose advantages were all 0
        self.warned_truncation = False

    def should_stop(self, step: int) -> bool:
        if self.parallel.total(float(self.stop.requested)) > 0:
            return True
        over = time.perf_counter() - self.started >= self.cfg.max_seconds
        if self.cfg.max_seconds and self.parallel.total(float(over)) > 0:
            self.log.info(f"time budget of {self.cfg.max_seconds}s reached at step {step}")
            self.budget_spent = True
            return True
        return False

    def rollout_seen(self, scored: Scored, step: int) -> None:
        if scored.rollout.truncated_prompts and not self.warned_truncation:
            self.warned_truncation = True
            cut = truncation_warning(
                scored.rollout.truncated_prompts, len(scored.problems), self.cfg.max_prompt_length
            )
            self.log.warning(f"at step {step + 1}, {cut}", self.say)

    def advantages_seen(self, advantages: torch.Tensor, rewards: torch.Tensor, note: str | None) -> None:
        if note is not None:
            self.log.warning(note, self.say)
        self.flat_steps = self.flat_steps + 1 if not bool(advantages.any()) else 0
        if self.flat_steps == STALL_STEPS:
            fixed = bool(self.cfg.problems_file)
            self.log.warning(
                stall_warning(self.flat_steps, float(rewards.mean()), fixed_problems=fixed), self.say
            )


@dataclass
class Run:
    """A training run's parts, made once (`start`): the policy and its optimizer, the rollout
    backend, the problem source, the reward stage, the advantage estimator; and its stages, each
    a call: `rollout`, `advantages`, `update`, `checkpoint`."""

    cfg: TrainConfig
    plan: Plan
    parallel: Parallel
    run_dir: Path
    policy: Policy
    train_model: Any
    backend: Any
    optimizer: Any
    scheduler: Any
    source: Source
    estimator: Estimator
    stage: RewardStage
    scale: LossScale
    log: Any
    card: dict[str, Any]
    step: int = 0
    bad_steps: int = 0
    saved_step: int | None = None  # the step of the checkpoint on disk that this run wrote or loaded
    sandbox: Sandbox | None = None
    remote: Any = None  # integrations.remote.RemoteVerifier, with sandbox_url
    overlap: bool = False

    @classmethod
    def start(
        cls, cfg: TrainConfig, plan: Plan, parallel: Parallel, run_dir: Path, ckpt: Path | None,
        say: Callable[[str], None],
    ) -> Run:  # fmt: skip
        torch.manual_seed(cfg.seed)
        speed = speed_of(cfg, parallel.device)
        policy = load_policy(
            cfg.model, **cfg.load_options(), device=str(parallel.device), need_reference=cfg.beta != 0.0,
            gradient_checkpointing=cfg.gradient_checkpointing, seed=cfg.seed, speed=speed,
        )  # fmt: skip
        backend = get_backend(cfg.rollout_backend, policy.model, cfg.min_completion_length, speed)
        if hasattr(backend, "record_linear_outputs"):  # for the first update's pass (speed/replay.py)
            backend.record_linear_outputs = (
                speed.replay_linear_outputs
                and replay.replayable(policy.model)
                and not cfg.gradient_checkpointing
                and speed.share_prompt_passes  # the replay serves the completions' pass
            )
        optimizer = make_optimizer(policy.trainable_parameters, cfg.lr, cfg.weight_decay, speed.fused_adamw)
        problems = None if plan.problems is None else tuple(plan.problems)
        context = SourceContext(
            tuple(plan.tasks), tuple(plan.difficulties), cfg.seed, parallel.rank, parallel.world, problems
        )
        run = cls(
            cfg, plan, parallel, run_dir, policy, parallel.wrap(policy.model), backend, optimizer,
            make_scheduler(cfg, optimizer), make_source(cfg.source, context),
            Estimator(cfg.advantage, cfg.advantage_params),
            RewardStage.from_specs(plan.rewards),  # components that hold a model load here, once
            LossScale(enabled=policy.dtype == torch.float16),  # see loss_scale.py
            _NullLog(),
            {  # the model card of every saved model: how it was prompted, what it learnt
                "method": "grpo", "base": cfg.model, "prompt_style": plan.prompt_style,
                "chat_template": cfg.chat_template, "tasks": plan.tasks, "difficulties": plan.difficulties,
            },
        )  # fmt: skip
        if ckpt is not None:
            run.resume(ckpt)
        if parallel.is_main:
            run.log = RunLog(run_dir, resume_step=run.step if ckpt is not None else 0 if restarted_run(cfg, ckpt) else None,
                             report_to=parse_report_to(cfg.report_to), config=dataclasses.asdict(cfg))  # fmt: skip
        run.log.info(
            f"{'resumed at step ' + str(run.step) if ckpt else 'started'}: {cfg.model} on {','.join(plan.tasks)}, "
            f"{cfg.steps} steps, {parallel.world} process(es), rollout backend {backend.name}"
        )
        short = warmup_warning(cfg.warmup_steps, cfg.steps)
        if short and ckpt is None:
            run.log.warning(short, say)  # rank 0 alone: the others' log is a _NullLog
        return run

    def resume(self, ckpt: Path) -> None:
        cfg, parallel = self.cfg, self.parallel
        state = load_checkpoint(
            ckpt, cfg, self.policy.model, self.optimizer, self.scheduler, self.policy.lora,
            rank=parallel.rank, world=parallel.world,
        )  # fmt: skip
        self.step, self.bad_steps = state["step"], state.get("bad_steps", 0)
        self.saved_step = self.step
        self.scale.load_state_dict(state.get("loss_scale"))
        self.source.load_state_dict(state["sources" if "sources" in state else "streams"][parallel.rank])
        if state.get("estimator"):
            self.estimator.load_state_dict(state["estimator"][parallel.rank])
        elif state.get("kalman"):  # a checkpoint of an earlier version
            self.estimator.load_state_dict({"kalman": state["kalman"][parallel.rank]})
        if parallel.is_main:  # now the run goes on under them (a failed resume left the old ones)
            save_config(cfg, self.run_dir / "config.json")

    def open(self, stack: contextlib.ExitStack) -> None:
        """The sandbox (where a task runs code) and the log, closed with `stack`; a failure is
        logged with the step it happened at."""
        cfg, plan = self.cfg, self.plan
        self.overlap = (
            plan.needs_sandbox
            and cfg.sandbox_url is None
            and overlaps_verification(cfg.overlap_verification, self.policy.device.type)
        )
        workers = sandbox_workers(cfg.verify_workers, self.overlap, processes=self.parallel.world)
        # A rollout verifies prompts_per_step x G completions at once (a DAPO refill, fewer).
        workers = pool_size(workers, cfg.prompts_per_step * cfg.num_generations)
        if plan.needs_sandbox and cfg.sandbox_url is not None:
            from ..integrations.remote import RemoteVerifier

            self.remote = stack.enter_context(
                RemoteVerifier(cfg.sandbox_url, token=os.environ.get("AXIOM_RL_SANDBOX_TOKEN"))
            )
        elif plan.needs_sandbox:
            self.sandbox = stack.enter_context(Sandbox(workers=workers))
        stack.callback(self.log.close)

        def record_failure(kind: Any, error: BaseException | None, _tb: Any) -> bool:
            if error is not None and not isinstance(error, TrainingStopped):  # (which logs its own)
                self.log.failed(self.step, error)
            return False  # the error goes on up

        stack.push(record_failure)

    def rollout(self, monitor: Monitor) -> tuple[Scored, TokenBatch | None, Any, int, float]:
        """A rollout of the source's next problems, verified and rewarded, seen by the source (and
        its refills, with dynamic sampling). With overlap_verification, the reference and old
        log-probs (which need no reward) run while the sandbox finishes: `early`."""
        cfg = self.cfg
        problems = self.source.next_batch(cfg.prompts_per_step)
        pending = start_rollout(
            self.policy,
            self.backend,
            problems,
            cfg,
            self.plan,
            self.stage,
            self.sandbox,
            self.overlap,
            self.remote,
        )
        batch, early = None, None
        if self.overlap and not cfg.dynamic_sampling:  # (a refill would change the batch's rows)
            try:
                batch = rollout_batch(pending.rollout, self.policy)
                early = frozen_passes(self.policy, batch, cfg)
            except BaseException:
                pending.verification.discard()
                raise
        scored = pending.scored()
        monitor.rollout_seen(scored, self.step)
        self.source.observe(scored_outcomes(scored))
        zero_std_before = _flat_fraction(group_rewards(scored, cfg.num_generations), cfg.num_generations)
        refilled = (
            refill_flat_groups(
                scored,
                self.policy,
                self.backend,
                self.source,
                cfg,
                self.plan,
                self.stage,
                self.sandbox,
                self.remote,
            )
            if cfg.dynamic_sampling
            else 0
        )
        return scored, batch, early, refilled, zero_std_before

    def advantages(
        self, scored: Scored, batch: TokenBatch, monitor: Monitor
    ) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """(rewards [B*G], the estimator's result, the loss's advantages: [B*G], or [B*G, T] where
        a reward component gave step credit), on the policy's device."""
        cfg = self.cfg
        rewards = group_rewards(scored, cfg.num_generations)
        groups = Groups(group_keys(scored.problems, cfg.krpo_key), self.step, cfg.seed)
        info = self.estimator(rewards, cfg.num_generations, groups)
        advantages = with_step_credit(
            info.advantages, scored, self.policy.tokenizer, cfg.num_generations, batch, cfg.process_groups
        )
        monitor.advantages_seen(info.advantages, rewards, self.estimator.warning())
        return rewards, info, advantages.to(self.policy.device)

    def update(
        self, scored: Scored, batch: TokenBatch, advantages: torch.Tensor, old: Any, ref: Any
    ) -> tuple[dict[str, float], float]:
        """One optimizer step on the rollout; the step counted, the schedule advanced (a skipped
        step said in the log). Returns its figures and its time."""
        start = time.perf_counter()
        # The rollout's linear outputs serve the first update only: it changes the weights.
        recorded, scored.rollout.linear_outputs = scored.rollout.linear_outputs, None
        update = optimizer_step(
            self.policy, self.train_model, self.optimizer, batch, advantages, old, ref, self.cfg,
            self.parallel, self.scale, recorded,
        )  # fmt: skip
        if recorded is not None:  # nothing reads it now: the next rollout writes into it
            self.backend.recycle(recorded)
        del recorded
        took = time.perf_counter() - start
        self.step += 1
        if update["finite"]:
            self.scheduler.step()
            self.bad_steps = 0
        elif update["overflow"]:
            self.log.info(
                f"step {self.step}: fp16 gradients overflowed at loss scale {update['loss_scale']:g}; skipped"
            )
        else:
            self.bad_steps += 1
            self.log.info(f"step {self.step}: non-finite loss or gradient ({update['loss']}); update skipped")
        return update, took

    def checkpoint(self) -> None:
        """A checkpoint of this step, unless one is on disk already (a stop right after a periodic
        save, a resume that only has the final model to write): the same state twice is waste."""
        if self.step == self.saved_step:
            return
        parallel = self.parallel
        sources = parallel.gather(self.source.state_dict())
        estimators = parallel.gather(self.estimator.state_dict())
        rngs = parallel.gather(rng_state())
        if parallel.is_main:
            trainer_state = {
                "step": self.step,
                "bad_steps": self.bad_steps,
                "loss_scale": self.scale.state_dict() if self.scale.enabled else None,
                "sources": sources,
                "estimator": estimators,
            }
            save_checkpoint(
                self.run_dir, self.step, self.policy, self.optimizer, self.scheduler, trainer_state,
                self.cfg.keep_checkpoints, rngs, self.card,
            )  # fmt: skip
            self.log.info(f"checkpoint at step {self.step}")
        self.saved_step = self.step
        parallel.barrier()

    def finish(self, stopped_early: bool) -> None:
        if stopped_early:
            self.log.info(
                f"stopped by request (Ctrl-C) at step {self.step}; axiom-rl train --resume continues it"
            )
        elif self.parallel.is_main:
            save_final_model(self.policy, self.run_dir / "final_model", merge=self.cfg.merge, card=self.card)
            self.log.info(f"finished: final model in {self.run_dir / 'final_model'}")
        self.train_model = None  # the DDP wrapper (see Parallel.close)


def merge_ranks(row: dict[str, Any], rewards: torch.Tensor, parallel: Parallel) -> dict[str, Any]:
    """Metrics over all ranks: reward statistics from every reward, the rest averaged."""
    if parallel.world == 1:
        return row
    everything = torch.tensor([r for part in parallel.gather(rewards.tolist()) for r in part])
    numeric = {k: v for k, v in row.items() if isinstance(v, (int, float)) and k != "step"}
    merged = dict(row, **parallel.mean(numeric))
    merged.update(
        reward_mean=float(everything.mean()),
        reward_std=float(everything.std()),
        reward_max=float(everything.max()),
        completions=everything.numel(),
        world_size=parallel.world,
    )
    return merged


def _flat_fraction(rewards: torch.Tensor, g: int) -> float:
    r = rewards.view(-1, g)
    return float(((r.max(1).values - r.min(1).values) <= 1e-6).float().mean())


STALL_STEPS = 10  # this many rollouts in a row with every advantage 0: say so, once


def stall_warning(steps: int, reward_mean: float, fixed_problems: bool = False) -> str:
    """What to tell a user whose run has had `steps` rollouts in a row with nothing to learn from:
    every group's completions scored alike, so every advantage was 0 (and the policy gradient)."""
    why = f"the last {steps} rollouts had nothing to learn from: in every group all completions got the same reward"
    if reward_mean == 0.0:
        return (
            f"{why} (0: the model never earns a reward). Start from a model that writes the answer "
            f"format (axiom-rl sft; see docs/training.md){'' if fixed_problems else ' or use an easier --difficulty'}"
        )
    harder = "" if fixed_problems else "A harder --difficulty, "
    return (
        f"{why} (mean {reward_mean:.3f}). {harder}{'a' if harder else 'A'} higher --temperature or more "
        "--num-generations give the groups something to compare"
    )


# What optimizer_step returns that step_metrics logs under names of its own, or not at all.
_UPDATE_KEYS_LOGGED = frozenset(
    {"loss", "finite", "overflow", "loss_scale", "grad_norm", "entropy", "time_forward_s", "time_backward_s",
     "kl", "clip_frac", "clip_frac_low", "clip_frac_high", "ratio_mean", "ratio_min", "ratio_max"}
)  # fmt: skip


def step_metrics(
    step: int, scored: Scored, rewards: torch.Tensor, info: Any, update: dict[str, float], refilled: int,
    zero_std_before: float, scheduler: Any, time_update: float, cfg: TrainConfig,
) -> dict[str, Any]:  # fmt: skip
    lengths = [len(c) for c in scored.rollout.completion_ids]
    statuses = Counter(v.status for v in scored.verdicts)
    row: dict[str, Any] = {
        "step": step,
        "loss": update["loss"],
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
        "reward_max": float(rewards.max()),
        "accuracy": statuses[PASSED] / max(1, len(scored.verdicts)),
        "zero_std_frac": info.zero_variance_frac,
        "zero_std_frac_sampled": zero_std_before,
        "refilled_groups": refilled,
        "kl": update.get("kl", 0.0),
        "clip_frac": update.get("clip_frac", 0.0),
        "clip_frac_low": update.get("clip_frac_low", 0.0),
        "clip_frac_high": update.get("clip_frac_high", 0.0),
        "ratio_mean": update.get("ratio_mean", 1.0),
        "entropy": update.get("entropy", 0.0),
        "grad_norm": update.get("grad_norm", 0.0),
        "lr": scheduler.get_last_lr()[0],
        "completion_len_mean": statistics.fmean(lengths) if lengths else 0.0,
        "completion_finished_frac": statistics.fmean(scored.rollout.finished)
        if scored.rollout.finished
        else 0.0,
        "internal_errors": statuses[INTERNAL_ERROR],
        "skipped": 0 if update["finite"] else 1,
        "time_rollout_s": scored.time_rollout,
        "time_reward_s": scored.time_reward,
        "time_update_s": time_update,
        "time_forward_s": update.get("time_forward_s", 0.0),
        "time_backward_s": update.get("time_backward_s", 0.0),
        "tokens_per_s": sum(lengths) / scored.time_rollout if scored.time_rollout > 0 else 0.0,
        "completions": len(scored.verdicts),
        "world_size": 1,
    }
    if "loss_scale" in update:  # fp16 only
        row["loss_scale"] = update["loss_scale"]
    for name in sorted(set(update) - _UPDATE_KEYS_LOGGED):  # a loss's own metrics (dgro's penalty)
        row[f"loss/{name}"] = update[name]
    for name in sorted({k for c in scored.components for k in c}):
        row[f"reward/{name}"] = statistics.fmean(c.get(name, 0.0) for c in scored.components)
    for status, count in sorted(statuses.items()):
        row[f"status/{status}"] = count
    return row


def sample_rows(step: int, scored: Scored, cfg: TrainConfig) -> list[dict[str, Any]]:
    """samples.jsonl's rows: each completion of the step's first groups with its verdict and
    reward; the first of a group also carries the problem's prompt and reference solution."""
    g, rows = cfg.num_generations, []
    for i, problem in enumerate(scored.problems[: cfg.samples_per_step]):
        for j in range(g):
            k = i * g + j
            row = {
                "step": step,
                "problem_id": problem.id,
                "completion": scored.rollout.texts[k],
                "reward": scored.rewards[k],
                "status": scored.verdicts[k].status,
            }
            if j == 0:
                row.update(prompt=problem.prompt, reference=problem.reference_solution)
            rows.append(row)
    return rows


def _print_samples(say: Callable[[str], None], step: int, scored: Scored, cfg: TrainConfig) -> None:
    """--verbose: the first group's problem, its reference and its completions; a problem file's
    text and the model's are escaped (terminal.printable)."""
    rows = sample_rows(step, scored, cfg)[: cfg.num_generations]
    if rows:
        say(printable(f"[step {step}] {rows[0]['problem_id']} prompt: {rows[0]['prompt'][:300]!r}"))
        say(printable(f"[step {step}] reference: {(rows[0]['reference'] or '')[:200]!r}"))
    for row in rows:
        say(
            printable(
                f"[step {step}]   reward={row['reward']:.2f} {row['status']}: {row['completion'][:200]!r}"
            )
        )
