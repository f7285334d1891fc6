"""The `axiom-rl` command. Each command is a thin shell over a library function.

Exit codes (DESIGN.md): 0 success, 2 a user error (one line on stderr), 1 an internal error.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .errors import UserError

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def parse_range(text: str) -> tuple[int, int]:
    """'3-7' -> (3, 7); '5' -> (5, 5)."""
    lo, sep, hi = text.partition("-")
    try:
        a, b = int(lo), int(hi) if sep else int(lo)
    except ValueError:
        raise UserError(f"--difficulty-range must look like 1-10, got {text!r}") from None
    if a > b:
        raise UserError(f"--difficulty-range {text!r} is empty (start > end)")
    return a, b


def progress_bar(description: str) -> Callable[[int], Callable[[], None]]:
    """A factory for rich progress bars on stderr: progress(total) -> tick()."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    def start(total: int) -> Callable[[], None]:
        bar = Progress(
            TextColumn(description),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=err,
            transient=True,
        )
        task = bar.add_task(description, total=total)
        bar.start()
        done = [0]

        def tick() -> None:
            done[0] += 1
            bar.advance(task)
            if done[0] >= total:
                bar.stop()

        if total == 0:
            bar.stop()
        return tick

    return start


# ---------------------------------------------------------------------------------------- root


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="axiom-rl", prog_name="axiom-rl")
def cli() -> None:
    """axiom-rl: teach small language models new skills by RL from verified execution."""


# ------------------------------------------------------------------------------------ problems


@cli.group()
def problems() -> None:
    """The problem library: list tasks, show, export and import problems."""


@problems.command("list")
def problems_list() -> None:
    """Every task: name, category, difficulty range, description."""
    from .tasks import TASKS

    table = Table("task", "category", "difficulty", "description", box=None, pad_edge=False)
    for name in sorted(TASKS, key=lambda n: (not TASKS[n].generatable, TASKS[n].category, n)):
        cls = TASKS[name]
        diff = f"{cls.min_difficulty}-{cls.max_difficulty}" if cls.generatable else "imported"
        table.add_row(name, cls.category, diff, cls.description)
    out.print(table)
    gen = sum(1 for c in TASKS.values() if c.generatable)
    out.print(f"\n{gen} generated tasks, {len(TASKS) - gen} imported benchmarks")


@problems.command("show")
@click.argument("task")
@click.option("--difficulty", "-d", type=int, default=1, show_default=True)
@click.option("--seed", "-s", type=int, default=0, show_default=True)
@click.option("--index", type=int, default=0, show_default=True, help="Which problem of the sequence.")
@click.option("--split", type=click.Choice(["train", "eval"]), default="train", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the problem as one JSON line.")
def problems_show(task: str, difficulty: int, seed: int, index: int, split: str, as_json: bool) -> None:
    """Generate one problem of TASK and print it: prompt, tests, reference solution."""
    from .tasks import generate_problems, get_task

    if index < 0:
        raise UserError(f"--index must be >= 0, got {index}")
    problem = generate_problems(task, difficulty, 1, seed=seed, split=split, start=index)[0]
    if as_json:
        out.print(problem.to_json(), markup=False)
        return
    t = get_task(task)
    out.rule(f"{problem.id}  ({t.category}, difficulty {difficulty})")
    out.print(problem.prompt, markup=False)
    if t.response_prefix(problem):
        out.print(f"[dim]assistant turn starts with:[/dim] {t.response_prefix(problem)!r}")
    if problem.tests:
        out.rule(
            f"{len(problem.tests)} hidden tests"
            + (f" (checker: {problem.checker})" if problem.checker else "")
        )
        for tc in problem.tests:
            args = ", ".join(repr(a) for a in tc.args)
            out.print(f"{problem.entry_point}({args}) -> {tc.expected!r}", markup=False)
    if problem.metadata and not problem.tests:
        out.rule("metadata")
        out.print(json.dumps(dict(problem.metadata)), markup=False)
    out.rule("reference solution")
    out.print(problem.reference_solution or "", markup=False)


@problems.command("export")
@click.option("--task", "-t", "task_spec", help="Task name(s), comma-separated.")
@click.option("--all", "all_tasks", is_flag=True, help="Every generated task.")
@click.option("--difficulty", "-d", type=int, help="One difficulty.")
@click.option("--difficulty-range", help="Inclusive range such as 1-10.")
@click.option(
    "--count", "-n", type=int, default=10, show_default=True, help="Problems per task and difficulty."
)
@click.option("--seed", "-s", type=int, default=0, show_default=True)
@click.option("--split", type=click.Choice(["train", "eval"]), default="train", show_default=True)
@click.option("--num-tests", type=int, help="Hidden tests per code problem (default: the task's, usually 8).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Output .jsonl file.")
def problems_export(
    task_spec: str | None,
    all_tasks: bool,
    difficulty: int | None,
    difficulty_range: str | None,
    count: int,
    seed: int,
    split: str,
    num_tests: int | None,
    out_path: str,
) -> None:
    """Write problems as JSONL: COUNT per task and difficulty, deterministic for a seed."""
    from .io import write_jsonl_atomic
    from .tasks import CodeTask, generate_problems, get_task, parse_task_list, task_names

    if bool(task_spec) == all_tasks:
        raise UserError("give exactly one of --task T[,T...] or --all")
    if difficulty is not None and difficulty_range is not None:
        raise UserError("give --difficulty or --difficulty-range, not both")
    if count < 1:
        raise UserError(f"--count must be >= 1, got {count}")
    if num_tests is not None and not 1 <= num_tests <= 100:
        raise UserError(f"--num-tests must be between 1 and 100, got {num_tests}")
    names = task_names(generatable=True) if all_tasks else parse_task_list(task_spec or "")
    lo, hi = parse_range(difficulty_range) if difficulty_range else (difficulty or 1, difficulty or 1)
    rows = []
    for name in names:
        task = get_task(name)
        if num_tests is not None and isinstance(task, CodeTask):
            task = get_task(name, num_tests=num_tests)
        for d in range(lo, hi + 1):
            rows.extend(p.to_json() for p in generate_problems(task, d, count, seed=seed, split=split))
    n = write_jsonl_atomic(out_path, rows)
    err.print(
        f"wrote {n} problems ({len(names)} tasks, difficulty {lo}-{hi}, {split} split, seed {seed}) to {out_path}"
    )


@problems.command("import")
@click.option("--format", "fmt", required=True, type=click.Choice(["humaneval", "mbpp"]))
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False))
@click.option("--challenge", is_flag=True, help="MBPP: add the challenge tests where a task has them.")
def problems_import(fmt: str, path: str, out_path: str, challenge: bool) -> None:
    """Convert a HumanEval or MBPP JSONL file into axiom-rl problems."""
    from .io import write_jsonl_atomic
    from .tasks.importers import import_file

    options = {"include_challenge": True} if challenge and fmt == "mbpp" else {}
    problems = import_file(fmt, path, **options)
    n = write_jsonl_atomic(out_path, (p.to_json() for p in problems))
    err.print(f"imported {n} {fmt} problems to {out_path}")


# -------------------------------------------------------------------------------------- verify


@cli.command()
@click.argument("problems_path", metavar="PROBLEMS.jsonl", type=click.Path(dir_okay=False))
@click.argument("completions_path", metavar="COMPLETIONS.jsonl", type=click.Path(dir_okay=False))
@click.option("--out", "out_path", type=click.Path(dir_okay=False), help="Results .jsonl (default: stdout).")
@click.option("--workers", type=int, help="Sandboxes running at once (default: number of cores).")
@click.option("--timeout", type=float, help="CPU seconds per submission (default: each task's own).")
def verify(
    problems_path: str,
    completions_path: str,
    out_path: str | None,
    workers: int | None,
    timeout: float | None,
) -> int:
    """Run completions against their problems in the sandbox; print a summary."""
    from .io import write_jsonl_atomic
    from .sandbox import Sandbox
    from .verify_files import verify_files

    if workers is not None and workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    with Sandbox(workers=workers) as sandbox:
        report = verify_files(
            problems_path, completions_path, sandbox, timeout, progress=progress_bar("verifying")
        )
        isolation = sandbox.isolation
    for e in report.errors:
        click.echo(f"error: {e}", err=True)
    if out_path:
        write_jsonl_atomic(out_path, report.results)
    else:
        for row in report.results:
            sys.stdout.write(json.dumps(row) + "\n")
    print_verify_summary(report.results, isolation)
    return 2 if report.errors else 0


def print_verify_summary(results: list[dict[str, Any]], isolation: str) -> None:
    counts = Counter(r["status"] for r in results)
    table = Table(
        "status",
        "count",
        "share",
        box=None,
        pad_edge=False,
        title="verification summary",
        title_justify="left",
    )
    for status, n in counts.most_common():
        table.add_row(status, str(n), f"{n / max(1, len(results)):.1%}")
    err.print(table)
    mean = sum(r["reward"] for r in results) / max(1, len(results))
    err.print(f"{len(results)} verified, mean reward {mean:.3f}; sandbox: {isolation}")


# ---------------------------------------------------------------------------------- quickstart


@cli.command()
@click.option(
    "--count", type=int, default=3, show_default=True, help="Problems per task at each difficulty shown."
)
def quickstart(count: int) -> None:
    """Sample problems from every task and check every reference solution in the sandbox."""
    from .quickstart import library_check

    library_check(count, out, progress_bar("checking references"))


# ---------------------------------------------------------------------------------------- main


def _user_error(message: str) -> int:
    """One line on stderr, exit code 2 (never wrapped: scripts grep these)."""
    click.echo(f"axiom-rl: error: {' '.join(message.split())}", err=True)
    return 2


def main(argv: list[str] | None = None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="axiom-rl", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except click.exceptions.NoArgsIsHelpError as e:
        click.echo(e.ctx.get_help())
        return 0
    except click.UsageError as e:
        return _user_error(e.format_message())
    except UserError as e:
        return _user_error(str(e))
    except click.exceptions.Exit as e:
        return e.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("axiom-rl: interrupted", err=True)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
