"""`axiom-rl eval`: generate K samples per held-out problem, verify, store, summarise.

Problems come from the eval split (never seen in training), or from a problems file (an imported
benchmark: HumanEval, MBPP). Sampling is seeded per batch, so an
interrupted evaluation rerun under the same name produces exactly the samples it would have,
and finishes without duplicates (finished batches are skipped).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import EvalConfig, field_choices, refuse_beside_problems_file
from ..errors import UserError, at_least, choose, positive
from ..models.load import check_load_options, check_model_spec, load_for_inference
from ..rewards import compute_reward
from ..rollout import generate_verified, get_backend, truncation_warning
from ..sandbox import Sandbox, pool_size
from ..tasks import all_tasks, generate_problems, get_task
from ..tasks.prompts import format_prompt
from ..terminal import one_line
from ..train.plan import (
    GENERATED_PROBLEM_OPTIONS,
    check_sampling,
    parse_tasks_and_difficulties,
    resolve_prompt_style,
)
from ..types import PASSED, Problem
from ..verifier import BatchVerification, overlaps_verification, sandbox_workers
from ..verify_files import read_problems_file
from .passk import mean_pass_at_k
from .store import Attempt, ResultsDB, Run

# The options that choose generated problems, which a --problems-file replaces.
GENERATION_OPTIONS = {**GENERATED_PROBLEM_OPTIONS, "count": "--count", "split": "--split"}


def check_eval_config(cfg: EvalConfig) -> None:
    """Every option checked, before a progress bar draws or a database opens."""
    if cfg.run_name is not None and one_line(cfg.run_name) != cfg.run_name:
        raise UserError(
            f"--run-name '{one_line(cfg.run_name)}': a run's name is one line without control characters"
        )
    choose("split", cfg.split, field_choices("split"))
    choose("prompt style", cfg.prompt_style, field_choices("prompt_style"))
    choose("overlap verification", cfg.overlap_verification, field_choices("overlap_verification"))
    at_least(
        ("count", cfg.count, 1),
        ("samples", cfg.samples, 1),
        ("batch_size", cfg.batch_size, 1),
        ("max_completion_length", cfg.max_completion_length, 1),
        ("seed", cfg.seed, 0),
    )
    if cfg.workers is not None:
        at_least(("workers", cfg.workers, 1))
    if cfg.timeout is not None:
        positive(("timeout", cfg.timeout))
    check_sampling(cfg.temperature, cfg.top_p)
    check_load_options(cfg.dtype)
    if cfg.temperature == 0 and cfg.samples != 1:
        raise UserError("greedy decoding (temperature 0) gives one completion per problem: use --samples 1")
    if cfg.problems_file:
        refuse_beside_problems_file(cfg, GENERATION_OPTIONS)
        read_problems_file(cfg.problems_file)
    else:
        parse_tasks_and_difficulties(cfg.tasks, cfg.difficulty)
    check_model_spec(cfg.model, cfg.tiny_size)


def eval_problems(cfg: EvalConfig) -> list[Problem]:
    """The problems to evaluate on, in a fixed order: the file's, or generated from the eval split
    (hard difficulties of some tasks take seconds to generate: this runs once, under the bar)."""
    if cfg.problems_file:
        return read_problems_file(cfg.problems_file)
    tasks, diffs = parse_tasks_and_difficulties(cfg.tasks, cfg.difficulty)
    return [
        p
        for t in tasks
        for d in diffs
        for p in generate_problems(t, d, cfg.count, seed=cfg.seed, split=cfg.split)
    ]


def default_run_name(cfg: EvalConfig) -> str:
    mode = "greedy" if cfg.temperature == 0 else f"t{cfg.temperature:g}x{cfg.samples}"
    model = cfg.model.rstrip("/").replace("/", "_")
    if cfg.problems_file:
        stem = Path(Path(cfg.problems_file).name.removesuffix(".gz")).stem  # he.jsonl(.gz) -> he
        return f"{model}-{stem}-{mode}-s{cfg.seed}"
    every = cfg.tasks == ["all"] or sorted(cfg.tasks) == sorted(all_tasks())  # --all
    return f"{model}-{'all' if every else '+'.join(cfg.tasks)}-d{cfg.difficulty}-{mode}-s{cfg.seed}"


def evaluate(
    cfg: EvalConfig,
    progress: Callable[[int, int], None] | None = None,
    say: Callable[[str], None] = lambda message: None,
) -> tuple[str, list[dict[str, Any]]]:
    """Run (or finish) an evaluation; returns its run name and the per-task summary. `say` gets
    warnings (prompts cut to max_prompt_length)."""
    check_eval_config(cfg)
    problems = eval_problems(cfg)
    name = cfg.run_name or default_run_name(cfg)
    settings = {
        k: v
        for k, v in asdict(cfg).items()
        if k not in ("db", "run_name", "workers", "batch_size", "device", "overlap_verification")
    }
    if not cfg.problems_file:  # as runs stored before the option existed recorded them: they resume
        del settings["problems_file"]
    with ResultsDB(cfg.db) as db:
        conflicts = db.conflicting_problems(problems)
        if conflicts:  # a changed problems file, or another source's problem under the same id
            raise UserError(
                f"{len(conflicts)} of these problems ({conflicts[0]!r} first) differ from the problems "
                f"{cfg.db} holds under the same ids; evaluate them into another --db"
            )
        run = db.start_run(name, cfg.model, settings)
        done = db.done(run)
        todo = [i for i, p in enumerate(problems) if any((p.id, s) not in done for s in range(cfg.samples))]
        if todo:
            truncated = _generate_and_store(
                cfg,
                db,
                run,
                problems,
                todo,
                resolve_prompt_style(cfg.prompt_style, cfg.model, check_model_spec(cfg.model, cfg.tiny_size)),
                progress,
            )
            if truncated:
                say(f"warning: {truncation_warning(truncated, len(todo), cfg.max_prompt_length)}")
        elif progress is not None:  # a finished run asked again: its bar shows it done, not 0/?
            progress(len(problems), len(problems))
        return name, summarize(db.attempts(run))


def _generate_and_store(
    cfg: EvalConfig, db: ResultsDB, run: Run, problems: list[Problem], todo: list[int], style: str,
    progress: Callable[[int, int], None] | None,
) -> int:  # fmt: skip
    """Generate, verify and store the `todo` problems' attempts; returns how many of their prompts
    were cut to max_prompt_length. With overlap_verification, a batch's completions go to the
    sandbox as they end, and the batch is stored once the next one has generated."""
    model, tokenizer, _ = load_for_inference(cfg.model, cfg.dtype, cfg.device, cfg.tiny_size, cfg.seed)
    backend = get_backend("auto", model)
    needs_sandbox = any(get_task(problems[i].task).runs_code for i in todo)
    overlap = needs_sandbox and overlaps_verification(cfg.overlap_verification, model.device.type)
    # At most one batch of problems x samples is verified at once (two, overlapped).
    jobs = min(len(todo), cfg.batch_size) * cfg.samples * (1 + overlap)
    workers = pool_size(sandbox_workers(cfg.workers, overlap), jobs)
    sandbox = Sandbox(workers=workers).start() if needs_sandbox else None
    finished, truncated = len(problems) - len(todo), 0
    generated: list[_Generated] = []  # waiting for their verdicts, oldest first

    def store(batch: _Generated) -> None:
        nonlocal finished
        db.add_batch(run, batch.problems, batch.attempts())
        finished += len(batch.problems)
        if progress is not None:
            progress(finished, len(problems))

    try:
        for start in range(0, len(todo), cfg.batch_size):
            indexes = todo[start : start + cfg.batch_size]
            batch = [problems[i] for i in indexes]
            torch.manual_seed(cfg.seed * 1_000_003 + indexes[0])  # the same samples on a rerun
            prompts = [format_prompt(p, tokenizer, style, cfg.chat_template) for p in batch]
            stops = sorted({s for p in batch for s in get_task(p.task).stop_strings})
            rows = [p for p in batch for _ in range(cfg.samples)]
            verification = BatchVerification(rows, sandbox, cfg.timeout, background=overlap)
            t0 = time.perf_counter()
            rollout = generate_verified(
                backend, model, tokenizer, prompts, cfg.samples, stops, cfg, verification
            )
            truncated += rollout.truncated_prompts
            per_row = (time.perf_counter() - t0) / max(1, len(rollout.texts))
            generated.append(_Generated(batch, rollout, per_row, cfg.samples, verification))
            while len(generated) > int(overlap):  # overlapped: the batch before this one
                store(generated.pop(0))
        while generated:
            store(generated.pop(0))
    finally:
        for batch in generated:  # stopped on the way: nothing more starts
            batch.verification.discard()
        if sandbox is not None:
            sandbox.close()
    return truncated


@dataclass
class _Generated:
    """A batch's completions, their verdicts still to come (or under way)."""

    problems: list[Problem]
    rollout: Any
    per_row: float  # seconds of generation per completion
    samples: int
    verification: BatchVerification  # of the rows: each problem `samples` times

    def attempts(self) -> list[Attempt]:
        out = []
        texts = self.rollout.texts
        rows = self.verification.problems
        for k, (p, text, v) in enumerate(zip(rows, texts, self.verification.verdicts(texts))):
            reward, _ = compute_reward(p, text, v)
            out.append(
                Attempt(
                    p.id,
                    k % self.samples,
                    text,
                    reward,
                    v.status,
                    v.passed,
                    v.total,
                    len(self.rollout.completion_ids[k]),
                    self.per_row + v.time_s,
                    v.detail[:300],
                )
            )
        return out


def summarize(attempts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, difficulty): success rate, partial score, correct/partial/failed, failure
    statuses, mean tokens, pass@1, pass@K for K the samples per problem, and pass@k for k = 5, 10,
    20, 50, 100 below it."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for a in attempts:
        groups[(a["task"], a["difficulty"])].append(a)
    out = []
    for (task, difficulty), rows in sorted(groups.items()):
        per_problem: dict[str, list[bool]] = defaultdict(list)
        for a in rows:
            per_problem[a["problem_id"]].append(a["status"] == PASSED)
        n_min = min(len(v) for v in per_problem.values())
        counts = [(len(v), sum(v)) for v in per_problem.values()]
        statuses = Counter(a["status"] for a in rows)
        correct = statuses[PASSED]
        partial = sum(1 for a in rows if a["status"] != PASSED and a["passed"] > 0)
        summary = {
            "task": task,
            "difficulty": difficulty,
            "problems": len(per_problem),
            "attempts": len(rows),
            "success_rate": correct / len(rows),
            "mean_partial": sum(a["passed"] / a["total"] if a["total"] else 0.0 for a in rows) / len(rows),
            "correct": correct,
            "partial": partial,
            "failed": len(rows) - correct - partial,
            "mean_tokens": sum(a["tokens"] for a in rows) / len(rows),
            "pass@1": mean_pass_at_k(counts, 1),
            "statuses": dict(sorted((s, c) for s, c in statuses.items() if s != PASSED)),
        }
        for k in sorted({k for k in (5, 10, 20, 50, 100) if k <= n_min} | ({n_min} if n_min > 1 else set())):
            summary[f"pass@{k}"] = mean_pass_at_k(counts, k)  # and pass@K, K the samples per problem
        out.append(summary)
    return out


def compare(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for every (task, difficulty) in either summary, with the change in success rate."""
    a = {(r["task"], r["difficulty"]): r for r in before}
    b = {(r["task"], r["difficulty"]): r for r in after}
    rows = []
    for key in sorted(set(a) | set(b)):
        ra, rb = a.get(key), b.get(key)
        rows.append(
            {
                "task": key[0],
                "difficulty": key[1],
                "before": ra["success_rate"] if ra else None,
                "after": rb["success_rate"] if rb else None,
                "change": rb["success_rate"] - ra["success_rate"] if ra and rb else None,
                "partial_before": ra["mean_partial"] if ra else None,
                "partial_after": rb["mean_partial"] if rb else None,
                "tokens_before": ra["mean_tokens"] if ra else None,
                "tokens_after": rb["mean_tokens"] if rb else None,
            }
        )
    return rows
