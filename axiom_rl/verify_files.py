"""`axiom-rl verify`: problems and completions as JSONL in, verdicts and rewards as JSONL out.

Bad lines (malformed JSON, unknown problem ids, empty completions) are reported with their line
numbers and skipped; everything else is still verified.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UserError, positive
from .io import read_jsonl
from .rewards import compute_reward
from .sandbox import Sandbox, pool_size
from .tasks.importers import mbpp_problem_id
from .tasks.registry import TASKS, get_task
from .types import PASSED, Problem, Verdict
from .verifier import verify_many


@dataclass
class VerifyReport:
    results: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    isolation: str = ""  # the sandbox's, as it reported it
    workers: int = 0  # sandbox slots started


def _first_object(lines: Sequence[Any]) -> dict[str, Any] | None:
    return next((line.value for line in lines if not line.error and isinstance(line.value, dict)), None)


def _refuse_swapped(problems_path: str | Path, problem_lines: Sequence[Any], completions_path: str | Path,
                    completion_lines: Sequence[Any]) -> None:  # fmt: skip
    """The two files given the wrong way round: one line that says so, not an error per line."""
    first_problem, first_completion = _first_object(problem_lines), _first_object(completion_lines)
    if first_problem is not None and "completion" in first_problem and "prompt" not in first_problem:
        wrong, holds = problems_path, "completions"
    elif (
        first_completion is not None and "prompt" in first_completion and "completion" not in first_completion
    ):
        wrong, holds = completions_path, "problems"
    else:
        return
    raise UserError(
        f"{wrong} holds {holds}: are the files the wrong way round? Give PROBLEMS.jsonl first, then COMPLETIONS.jsonl"
    )


def load_problems(
    path: str | Path, errors: list[str], lines: Sequence[Any] | None = None
) -> dict[str, Problem]:
    """Problems by id (from `lines`, the file's as read_jsonl gives them, where already read);
    bad lines become messages in `errors`."""
    problems: dict[str, Problem] = {}
    for line in read_jsonl(path) if lines is None else lines:
        where = f"{path}:{line.lineno}"
        if line.error:
            errors.append(f"{where}: {line.error}")
            continue
        try:
            problem = checked_problem(line.value)
        except ValueError as e:
            errors.append(f"{where}: {e}")
            continue
        if problem.id in problems:
            errors.append(f"{where}: duplicate problem id {problem.id!r}")
        else:
            problems[problem.id] = problem
    return problems


def checked_problem(value: Any) -> Problem:
    """The problem a JSON value (a problems file's line, a dataset's column) describes, one its
    task can score; ValueError saying why not."""
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    try:
        problem = Problem.from_dict(value)
    except (ValueError, TypeError) as e:
        raise ValueError(f"not a problem ({e})") from None
    if problem.task not in TASKS:
        raise ValueError(f"unknown task {problem.task!r}")
    try:
        get_task(problem.task).check_problem(problem)
    except (ValueError, TypeError) as e:
        raise ValueError(f"not a problem ({e})") from None
    return problem


def unverified_references(problems: Sequence[Problem]) -> list[tuple[Problem, Verdict]]:
    """The problems whose reference solution fails their own checks (a problem without one is
    taken as it is), each with its verdict: such a problem cannot be solved as written. Code runs
    in a sandbox, started only when one of the problems needs it."""
    checked = [p for p in problems if p.reference_solution is not None]
    completions = [get_task(p.task).reference_completion(p, "full") for p in checked]
    if any(get_task(p.task).runs_code for p in checked):
        with Sandbox() as sandbox:
            verdicts = verify_many(checked, completions, sandbox)
    else:
        verdicts = verify_many(checked, completions)
    return [(p, v) for p, v in zip(checked, verdicts) if v.status != PASSED]


def read_problems_file(path: str) -> list[Problem]:
    """The problems of a JSONL file, in file order; any bad line is an error (an evaluation or a
    training run on part of a benchmark would be reported as if on all of it)."""
    if not Path(path).is_file():
        raise UserError(f"no such problems file: {path}")
    errors: list[str] = []
    problems = list(load_problems(path, errors).values())
    if errors:
        more = f" (and {len(errors) - 1} more bad lines)" if len(errors) > 1 else ""
        raise UserError(errors[0] + more)
    if not problems:
        raise UserError(f"{path} holds no problems")
    return problems


def read_completions(
    path: str | Path, lines: Sequence[Any], problems: dict[str, Problem], errors: list[str]
) -> list[tuple[Problem, str]]:
    """(problem, completion) for each line of a completions file (as read_jsonl gives them):
    {"problem_id", "completion"}, or the HumanEval and MBPP harnesses' {"task_id", "completion"};
    bad lines become messages in `errors`."""
    todo: list[tuple[Problem, str]] = []
    for line in lines:
        where = f"{path}:{line.lineno}"
        v = line.value
        if isinstance(v, dict) and "problem_id" not in v and "task_id" in v:
            # the samples format of the HumanEval and MBPP harnesses: {"task_id", "completion"}
            task_id = v["task_id"]
            v = dict(v, problem_id=task_id if isinstance(task_id, str) else mbpp_problem_id(task_id))
        if line.error:
            errors.append(f"{where}: {line.error}")
        elif not isinstance(v, dict) or "problem_id" not in v or "completion" not in v:
            errors.append(f"{where}: expected an object with 'problem_id' and 'completion'")
        elif v["problem_id"] not in problems:
            errors.append(f"{where}: unknown problem id {v['problem_id']!r}")
        elif not isinstance(v["completion"], str):
            errors.append(f"{where}: completion must be a string, got {type(v['completion']).__name__}")
        elif not v["completion"].strip():
            errors.append(f"{where}: empty completion")
        else:
            todo.append((problems[v["problem_id"]], v["completion"]))
    return todo


def verify_files(
    problems_path: str | Path,
    completions_path: str | Path,
    workers: int | None = None,
    timeout: float | None = None,
    progress: Callable[[int], Callable[[], None]] | None = None,
    remote: Any = None,
) -> VerifyReport:
    """Read both files, then verify in a sandbox of `workers` slots (default: one per core),
    never more than there are completions: each slot is a monitor process to start; or, given
    `remote` (integrations.remote.RemoteVerifier), on sandbox services."""
    report = VerifyReport()
    problem_lines, completion_lines = read_jsonl(problems_path), read_jsonl(completions_path)
    _refuse_swapped(problems_path, problem_lines, completions_path, completion_lines)
    problems = load_problems(problems_path, report.errors, problem_lines)
    if not problems and report.errors:  # not a problems file at all: one line, not one per line
        more = f" (and {len(report.errors) - 1} more lines like it)" if len(report.errors) > 1 else ""
        raise UserError(f"no problem in {problems_path}: {report.errors[0]}{more}")
    todo = read_completions(completions_path, completion_lines, problems, report.errors)
    if not todo and not report.errors:
        raise UserError(f"{completions_path}: no completions")
    if timeout is not None:
        positive(("--timeout", timeout))
    if not todo:  # every line was bad: nothing to start a sandbox for
        return report
    tick = progress(len(todo)) if progress else None
    problems_todo, completions = [p for p, _ in todo], [c for _, c in todo]
    if remote is not None:
        verdicts = remote.verify(problems_todo, completions, timeout=timeout)
        if tick is not None:
            for _ in verdicts:
                tick()
        report.isolation = f"remote ({', '.join(remote.urls)})"
    elif any(get_task(p.task).runs_code for p in problems_todo):
        with Sandbox(workers=pool_size(workers, len(todo))) as sandbox:
            verdicts = verify_many(problems_todo, completions, sandbox, timeout=timeout, progress=tick)
            report.isolation, report.workers = sandbox.isolation, sandbox.workers
    else:  # Countdown, or_debug: nothing is run as code, no sandbox to start
        verdicts = verify_many(problems_todo, completions, timeout=timeout, progress=tick)
    for (problem, completion), verdict in zip(todo, verdicts):
        reward, components = compute_reward(problem, completion, verdict)
        row = {"problem_id": problem.id, "reward": round(reward, 6), **verdict.to_dict()}
        if len(components) > 1:
            row["reward_components"] = components
        report.results.append(row)
    return report
