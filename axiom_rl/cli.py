"""The `axiom-rl` command. Each command is a thin shell over a library function.

Exit codes: 0 success, 2 a user error (one line on stderr), 1 an internal error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Column, Table

from .config import EvalConfig, SFTConfig, TrainConfig
from .errors import UserError, positive
from .recipes import RECIPES
from .terminal import cell, one_line, printable


def _console(stderr: bool = False) -> Console:
    """A rich console. Off a terminal (a pipe, a log file) it is 200 columns wide unless COLUMNS
    says otherwise: rich's default there, 80, cut the eval summary's headers to 'dif…'."""
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=200 if wide else None)


out = _console()
err = _console(stderr=True)


def rich_bar(label: str, stats: bool = False, transient: bool = False) -> tuple[Any, Any]:
    """A rich progress bar on stderr and its one task: label, bar, done/total, a stats field
    (if asked), elapsed and remaining time."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    class LoggedProgress(Progress):
        """Live on a terminal. Elsewhere (a log file, a pipe) nothing is drawn while the work
        runs, and a bar that is meant to stay is printed once, when its work ends well: a failed
        command's stderr is its one error line, not a half-drawn bar before it."""

        def start(self) -> None:
            if self.console.is_terminal:
                super().start()

        def stop(self) -> None:
            if self.console.is_terminal:
                super().stop()

        def __exit__(self, exc_type: Any, *rest: Any) -> None:
            if self.console.is_terminal:
                return super().__exit__(exc_type, *rest)
            if exc_type is None and not transient:
                self.console.print(self.get_renderable())

    if stats:  # the figures need the room: a short bar and the time left alone fit 80 columns
        columns = [TextColumn(f"[bold]{label}[/bold]"), BarColumn(bar_width=12), MofNCompleteColumn(),
                   TextColumn("{task.fields[stats]}"), TimeRemainingColumn()]  # fmt: skip
    else:
        columns = [TextColumn(f"[bold]{label}[/bold]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TimeRemainingColumn()]  # fmt: skip
    bar = LoggedProgress(*columns, console=err, transient=transient)
    return bar, bar.add_task(label.strip(), total=None, stats="")


@contextlib.contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int], Callable[[], None]]]:
    """A factory for rich progress bars on stderr, `progress(total) -> tick()`, whose bar is
    closed on the way out, an error's included (its line is then not printed after a half bar)."""
    started: list[Any] = []

    def start(total: int) -> Callable[[], None]:
        bar, task = rich_bar(description, transient=True)
        bar.update(task, total=total)
        bar.start()
        started.append(bar)
        done = [0]

        def tick() -> None:
            done[0] += 1
            bar.advance(task)
            if done[0] >= total:
                bar.stop()

        if total == 0:
            bar.stop()
        return tick

    try:
        yield start
    finally:
        for bar in started:
            bar.stop()


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
    derived = sorted(n for n, c in TASKS.items() if c.derived_from)
    for name in sorted(TASKS, key=lambda n: (not TASKS[n].generatable, TASKS[n].category, n)):
        cls = TASKS[name]
        if cls.derived_from:  # one row for them all, after the tasks they are made from
            continue
        diff = f"{cls.min_difficulty}-{cls.max_difficulty}" if cls.generatable else "imported"
        table.add_row(name, cls.category, diff, cls.description)
    if derived:
        table.add_row("debug_<task>", "debug", "as <task>", f"Repair a code task's function: 1 injected bug, 2 from "
                      f"difficulty 6 ({len(derived)} tasks).")  # fmt: skip
    out.print(table)
    gen = sum(1 for c in TASKS.values() if c.generatable and not c.derived_from)
    out.print(f"\n{gen} generated tasks (and {len(derived)} debug tasks made from them), "
              f"{len(TASKS) - gen - len(derived)} imported benchmarks")  # fmt: skip


@problems.command("show")
@click.argument("task")
@click.option("--difficulty", "-d", type=int, default=1, show_default=True)
@click.option("--seed", "-s", type=click.IntRange(min=0), default=0, show_default=True)
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
@click.option(
    "--problems-file",
    type=click.Path(dir_okay=False),
    help="A problems file (an import of HumanEval or MBPP, an earlier export) instead of generated problems.",
)
@click.option(
    "--difficulty",
    "-d",
    help="A difficulty (5) or an inclusive range (1-3), as train, sft and eval take.  [default: 1]",
)
@click.option("--difficulty-range", help="The same as --difficulty, by its older name.")
@click.option(
    "--count", "-n", type=int, default=10, show_default=True, help="Problems per task and difficulty."
)
@click.option("--seed", "-s", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--split", type=click.Choice(["train", "eval"]), default="train", show_default=True)
@click.option("--num-tests", type=int, help="Hidden tests per code problem (default: the task's, usually 8).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "hf", "verl"]),
    default="jsonl",
    show_default=True,
    help="jsonl: a problems file; hf: a Hugging Face dataset directory (save_to_disk), for TRL; "
    "verl: a parquet file with verl's columns.",
)
@click.option(
    "--conversational",
    is_flag=True,
    help="hf: the prompt as one user message (for a chat template) instead of plain text; verl's always is.",
)
@click.option(
    "--prompt-style",
    type=click.Choice(["full", "compact"]),
    default="full",
    show_default=True,
    help="hf and verl: the prompt's style (compact: the built-in model's short form).",
)
@click.option(
    "--out",
    "out_path",
    required=True,
    type=click.Path(),
    help="Output: a .jsonl file, a new directory (hf) or a .parquet file (verl).",
)
@click.option(
    "--references",
    "references_path",
    type=click.Path(dir_okay=False),
    help="Also write each problem's reference answer, as completions `axiom-rl verify` reads.",
)
def problems_export(
    task_spec: str | None,
    all_tasks: bool,
    problems_file: str | None,
    difficulty: str | None,
    difficulty_range: str | None,
    count: int,
    seed: int,
    split: str,
    num_tests: int | None,
    fmt: str,
    conversational: bool,
    prompt_style: str,
    out_path: str,
    references_path: str | None,
) -> None:
    """Write problems as JSONL, a Hugging Face dataset or verl's parquet: COUNT per task and
    difficulty, deterministic for a seed, or a problems file's."""
    from .io import write_jsonl_atomic
    from .tasks import CodeTask, get_task, iter_problems, parse_task_list
    from .tasks import all_tasks as every_task
    from .tasks.generate import parse_range

    if sum((bool(task_spec), all_tasks, problems_file is not None)) != 1:
        raise UserError("give exactly one of --task T[,T...], --all or --problems-file F")
    if difficulty is not None and difficulty_range is not None:
        raise UserError("give --difficulty or --difficulty-range, not both")
    if count < 1:
        raise UserError(f"--count must be >= 1, got {count}")
    if num_tests is not None and not 1 <= num_tests <= 100:
        raise UserError(f"--num-tests must be between 1 and 100, got {num_tests}")
    if conversational and fmt != "hf":
        raise UserError("--conversational is for --format hf (verl's prompts are always messages)")
    if references_path is not None and Path(references_path).resolve() == Path(out_path).resolve():
        raise UserError("--references and --out name the same file")
    problems: list[Any] = []
    if problems_file is not None:
        from .verify_files import read_problems_file

        given = [
            f
            for f, v in (
                ("--difficulty", difficulty),
                ("--difficulty-range", difficulty_range),
                ("--num-tests", num_tests),
            )
            if v is not None
        ]
        if given:
            raise UserError(f"{given[0]} is for generated problems, not with --problems-file")
        problems = read_problems_file(problems_file)
        described = f"from {problems_file}"
    else:
        names = every_task() if all_tasks else parse_task_list(task_spec or "")
        flag = "--difficulty" if difficulty is not None else "--difficulty-range"
        lo, hi = parse_range(difficulty or difficulty_range or "1", flag)
        bar, bar_task = rich_bar("generating", transient=True)  # 100,000 problems take half a minute
        with bar:  # (a bar closed before an error's line is printed)
            bar.update(bar_task, total=len(names) * (hi - lo + 1) * count)
            for name in names:
                task = get_task(name)
                if num_tests is not None and isinstance(task, CodeTask):
                    task = get_task(name, num_tests=num_tests)
                for d in range(lo, hi + 1):
                    for problem in itertools.islice(iter_problems(task, d, seed=seed, split=split), count):
                        problems.append(problem)
                        bar.advance(bar_task)
        described = (
            f"{len(names)} task{'s' * (len(names) != 1)}, difficulty "
            f"{lo if lo == hi else f'{lo}-{hi}'}, {split} split, seed {seed}"
        )
    if fmt == "jsonl":
        n = write_jsonl_atomic(out_path, (p.to_json() for p in problems))
    else:
        from .integrations.hf_datasets import save_dataset, save_verl_parquet

        if fmt == "hf":
            save_dataset(problems, out_path, prompt_style, conversational)
        else:
            save_verl_parquet(problems, out_path, split, prompt_style)
        n = len(problems)
    if references_path is not None:
        references = [
            json.dumps({"problem_id": p.id, "completion": get_task(p.task).reference_completion(p, "full")})
            for p in problems
            if p.reference_solution is not None
        ]
        write_jsonl_atomic(references_path, references)
        err.print(f"wrote {len(references)} reference answers to {references_path}")
    what = {
        "jsonl": "problems",
        "hf": "problems as a Hugging Face dataset",
        "verl": "problems as verl's parquet",
    }
    err.print(f"wrote {n} {what[fmt]} ({described}) to {out_path}")


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
@click.option(
    "--workers", "--verify-workers", type=int, help="Sandboxes running at once (default: number of cores)."
)
@click.option(
    "--timeout", "--verify-timeout", type=float, help="CPU seconds per submission (default: each task's own)."
)
@click.option(
    "--sandbox-url",
    help="Verify on `axiom-rl sandbox serve` servers instead of a local sandbox: URLs, comma-separated "
    "(round-robin; a failed request goes to the next).",
)
@click.option(
    "--token",
    envvar="AXIOM_RL_SANDBOX_TOKEN",
    help="The servers' token (default: $AXIOM_RL_SANDBOX_TOKEN).",
)
def verify(
    problems_path: str,
    completions_path: str,
    out_path: str | None,
    workers: int | None,
    timeout: float | None,
    sandbox_url: str | None,
    token: str | None,
) -> int:
    """Run completions against their problems in the sandbox; print a summary."""
    from .io import atomic_open
    from .verify_files import verify_files

    if workers is not None and workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    if sandbox_url is not None and workers is not None:
        raise UserError("--workers is for a local sandbox, not with --sandbox-url (each server has its own)")
    with contextlib.ExitStack() as stack:
        remote = None
        if sandbox_url is not None:
            from .integrations.remote import RemoteVerifier

            remote = stack.enter_context(RemoteVerifier(sandbox_url, token=token))
        # Opened first, so an --out that cannot be written fails before the verification, not after.
        sink = stack.enter_context(atomic_open(out_path)) if out_path else sys.stdout
        with progress_bar("verifying") as progress:
            report = verify_files(
                problems_path, completions_path, workers, timeout, progress=progress, remote=remote
            )
        for e in report.errors:
            click.echo(f"error: {e}", err=True)
        for row in report.results:
            sink.write(json.dumps(row) + "\n")
    print_verify_summary(report.results, report.isolation)
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
    err.print(f"{len(results)} verified, mean reward {mean:.3f}; sandbox: {isolation or 'not started'}")


# --------------------------------------------------------------------------------------- train


class _SeedsFlags(click.Command):
    """Accepts `--problems a b c` (several values, as earlier GRPO scripts took them) as `--tasks a,b,c`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rewritten: list[str] = []
        i = 0
        while i < len(args):
            if args[i] == "--problems":
                values = []
                i += 1
                while i < len(args) and not args[i].startswith("-"):
                    values.append(args[i])
                    i += 1
                rewritten += ["--tasks", ",".join(values)]
                continue
            rewritten.append(args[i])
            i += 1
        return super().parse_args(ctx, rewritten)


class ConfigOption(click.Option):
    """The option of a config field. Its own default is None, meaning "not given", so that it
    overrides neither a YAML file nor a resumed run's config; its help still shows the field's
    default and, where the field names one of a set, the names it takes (read from the registries
    when help is shown, so a registered addition is listed)."""

    def __init__(self, *args: Any, field_default: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.field_default = field_default

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        value = self.field_default
        if isinstance(value, bool):
            extra["default"] = self.opts[0] if value else self.secondary_opts[0]
        elif isinstance(value, list | tuple) and value:
            extra["default"] = ",".join(map(str, value))
        elif value not in (None, "", {}, []):
            extra["default"] = str(value)
        return extra

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from .config import field_choices

        record = super().get_help_record(ctx)
        choices = field_choices(self.name or "")
        if record is None or not choices:
            return record
        spec, text = record
        own, bracket, extra = text.partition("  [")
        return spec, f"{own} One of: {', '.join(choices)}.{bracket}{extra}"


def _metavar(hint: Any) -> str:
    """INT, FLOAT or TEXT for a field's type (an optional one's too)."""
    import typing

    kinds = {int: "INT", float: "FLOAT"}
    return next((kinds[t] for t in (hint, *typing.get_args(hint)) if t in kinds), "TEXT")


def config_options(
    cls: type, aliases: dict[str, list[str]]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """One click option per config field, default None (= not given), help from the docstring."""
    from .config import cli_fields, field_default, has_choices

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name, hint, doc in reversed(cli_fields(cls)):
            flag = "--" + name.replace("_", "-")
            common = {
                "cls": ConfigOption,
                "field_default": field_default(cls, name),
                "default": None,
                "help": doc,
            }
            if hint is bool:
                fn = click.option(f"{flag}/--no-{flag[2:]}", name, **common)(fn)
            else:
                metavar = "NAME" if has_choices(name) else _metavar(hint)
                fn = click.option(flag, *aliases.get(name, []), name, metavar=metavar, **common)(fn)
        return fn

    return decorate


config_file_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="YAML file of options (the command line overrides it).",
)


all_tasks_option = click.option(
    "--all", "all_tasks", is_flag=True, help="Every generated task (instead of --task)."
)


def gather_overrides(options: dict[str, Any], all_tasks: bool = False) -> dict[str, Any]:
    """The options given on the command line; `all_tasks` (--all) sets tasks to every generated one."""
    overrides = {k: v for k, v in options.items() if v is not None}
    if all_tasks:
        if "tasks" in overrides:
            raise UserError("give --task or --all, not both")
        overrides["tasks"] = ["all"]  # as a YAML file's `tasks: all` says it: the same run settings
    return overrides


def resolve_config(
    cls: type, config_path: str | None, overrides: dict[str, Any], command: str = "train"
) -> Any:
    """Defaults <- the resumed run's saved config (for a command that resumes) <- YAML <- command
    line (of `axiom-rl command`)."""
    from .config import PROVENANCE_KEY, build_config, coerce, load_yaml

    merged: dict[str, Any] = {}
    from_yaml = load_yaml(config_path) if config_path else {}
    resumable = any(f.name == "resume" for f in dataclasses.fields(cls))
    # The command line wins over the YAML file here too (resume: true in YAML, --no-resume given).
    if resumable and coerce(cls, "resume", overrides.get("resume", from_yaml.get("resume", False))):
        out_dir = overrides.get("output_dir") or from_yaml.get("output_dir")
        saved = Path(out_dir) / "config.json" if out_dir else None
        if saved is None:
            raise UserError("--resume needs --output-dir of an existing run (no output dir given)")
        if not saved.exists():  # never begun, or stopped before it wrote its config: nothing to lose
            raise UserError(
                f"--resume needs --output-dir of an existing run (no {saved}): no run began there; "
                f"start it with the run's own options, without --resume"
            )
        try:
            saved_config = json.loads(saved.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError) as e:  # (a directory named config.json too)
            raise UserError(f"{saved} is not a readable run config ({e}); cannot resume from it") from None
        if not isinstance(saved_config, dict):
            raise UserError(f"{saved} is not a readable run config; cannot resume from it")
        saved_config.pop(PROVENANCE_KEY, None)  # what ran it, not an option
        if foreign := sorted(set(saved_config) - {f.name for f in dataclasses.fields(cls)}):
            # e.g. an SFT run's directory given to train --resume
            raise UserError(
                f"{out_dir} holds no 'axiom-rl {command}' run to resume (its config.json has options "
                f"{command} does not know: {', '.join(foreign[:4])})"
            )
        merged.update(saved_config)
    merged.update(from_yaml)
    merged.update(overrides)
    return build_config(cls, None, merged)


def training_progress(
    total_label: str = "training",
) -> tuple[Any, Callable[[int, int, dict[str, Any]], None]]:
    bar, task_id = rich_bar(total_label, stats=True)

    def update(step: int, total: int, row: dict[str, Any]) -> None:
        stats = (
            f"reward {row['reward_mean']:.2f} acc {row['accuracy']:.2f} kl {row['kl']:.3f} "
            f"{row['tokens_per_s']:.0f} tok/s"
        )
        bar.update(task_id, completed=step, total=total, stats=stats)

    return bar, update


@cli.command(cls=_SeedsFlags, context_settings={"max_content_width": 110})
@config_file_option
@all_tasks_option
@config_options(
    TrainConfig,
    {"tasks": ["--task"], "num_generations": ["--generations"], "verify_workers": ["--workers"],
     "verify_timeout": ["--timeout"]},
)  # fmt: skip
def train(config_path: str | None, all_tasks: bool, **options: Any) -> int:
    """Train a model with GRPO on verifiable problems (see configs/ for examples).

    Short forms are accepted too: --problems a b (for --task a,b) and --generations N (for
    --num-generations N).
    """
    from .config import refuse_beside_problems_file
    from .train.checkpoint import check_run_dir
    from .train.grpo import TrainingStopped
    from .train.grpo import train as run_training
    from .train.plan import GENERATED_PROBLEM_OPTIONS, plan_run

    overrides = gather_overrides(options, all_tasks)
    cfg = resolve_config(TrainConfig, config_path, overrides)
    refuse_beside_problems_file(cfg, GENERATED_PROBLEM_OPTIONS, given=overrides)
    plan_run(cfg)  # every name and number checked before the progress bar draws anything
    check_run_dir(cfg)
    main_process = os.environ.get("RANK", "0") == "0"  # under accelerate launch, one bar and one summary
    bar, update = training_progress()
    try:
        with bar if main_process else contextlib.nullcontext():
            result = run_training(cfg, progress=update, say=lambda m: err.print(m, markup=False))
    except TrainingStopped as e:
        from .report import write_run_report

        write_run_report(Path(cfg.output_dir))  # what it did before it stopped
        click.echo(f"axiom-rl: {e}", err=True)
        return 1
    if not result.is_main:
        return 0
    last = result.metrics[-1] if result.metrics else {}
    if result.stopped_early:
        err.print(
            f"stopped at step {result.steps}; resume with: axiom-rl train --resume --output-dir {result.run_dir}"
        )
        return 130
    report = Path(result.run_dir) / "report.md"
    if not last:  # a resume whose steps were all done before: only the final model was left to write
        err.print(
            f"done: all {result.steps} steps were trained before; wrote the final model; report: {report}"
        )
        return 0
    err.print(
        f"done: {result.steps} steps, last reward {last['reward_mean']:.3f}, accuracy {last['accuracy']:.2f}; "
        f"run in {result.run_dir}, report: {report}"
    )
    return 0


# ---------------------------------------------------------------------------------- quickstart


@contextlib.contextmanager
def phase_bar(name: str) -> Any:
    """A progress bar for one phase; yields progress(done, total, row)."""
    bar, task_id = rich_bar(f"{name:<28}")
    with bar:
        yield lambda done, total, row=None: bar.update(task_id, completed=done, total=total)


@cli.command()
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of the model, data and evaluation problems.",
)
@click.option("--control", is_flag=True, help="Also spend GRPO's wall time on more SFT instead, and compare.")
@click.option(
    "--output-dir", default="runs", show_default=True, help="Parent of the timestamped run directory."
)
@click.option(
    "--eval-count", type=int, default=500, show_default=True, help="Held-out problems per difficulty."
)
@click.option("--grpo-steps", type=int, default=580, show_default=True, help="GRPO steps.")
@click.option("--sft-steps", type=int, default=700, show_default=True, help="SFT warm-up steps.")
def quickstart(
    seed: int, control: bool, output_dir: str, eval_count: int, grpo_steps: int, sft_steps: int
) -> None:
    """The main job: SFT a tiny model on Countdown, evaluate, train it with GRPO, evaluate again.

    Runs on 2 CPU cores in well under 10 minutes; the SFT'd base is cached for the next run.
    """
    from .quickstart import QuickstartConfig, run_quickstart

    for name, value in (
        ("--eval-count", eval_count),
        ("--grpo-steps", grpo_steps),
        ("--sft-steps", sft_steps),
    ):
        if value < 1:
            raise UserError(f"{name} must be >= 1, got {value}")
    cfg = QuickstartConfig(
        seed=seed,
        control=control,
        output_dir=output_dir,
        eval_count=eval_count,
        grpo_steps=grpo_steps,
        sft_steps=sft_steps,
    )
    run_quickstart(cfg, out, phase_bar)


@problems.command("check")
@click.option(
    "--count", type=int, default=3, show_default=True, help="Problems per task at each difficulty (1, 5, 10)."
)
def problems_check(count: int) -> int:
    """Check every task's reference solution in the sandbox (a health check of the library)."""
    from .quickstart import library_check

    if count < 1:
        raise UserError(f"--count must be >= 1, got {count}")
    with progress_bar("checking references") as progress:
        return 0 if library_check(count, out, progress) else 1


# ------------------------------------------------------------------------------------------ sft


@cli.command(context_settings={"max_content_width": 110})
@config_file_option
@all_tasks_option
@config_options(SFTConfig, {"tasks": ["--task"]})
def sft(config_path: str | None, all_tasks: bool, **options: Any) -> int:
    """Supervised fine-tuning on reference solutions (of generated problems, or of a
    --problems-file), or with --from-samples RUN on a model's own verified-correct completions
    (rejection sampling); loss on completion tokens only."""
    from .train.checkpoint import check_run_dir
    from .train.sft import SFTStopped, check_sft_config
    from .train.sft import sft as run_sft

    overrides = gather_overrides(options, all_tasks)
    cfg = resolve_config(SFTConfig, config_path, overrides, command="sft")
    check_sft_config(cfg, given=overrides)
    check_run_dir(cfg)
    from .report import write_run_report

    bar, task_id = rich_bar("SFT", stats=True)

    def progress(done: int, total: int, row: dict[str, Any]) -> None:
        bar.update(task_id, completed=done, total=total, stats=f"loss {row['loss']:.4f} lr {row['lr']:.2e}")

    try:
        with bar:
            final = run_sft(cfg, progress=progress, say=lambda m: err.print(m, markup=False))
    except SFTStopped as e:
        write_run_report(e.run_dir)
        err.print(f"stopped at step {e.step}; resume with: axiom-rl sft --resume --output-dir {e.run_dir}")
        return 130
    err.print(
        f"done: {final}; report: {Path(final).parent / 'report.md'}; the model's card: {final / 'README.md'}"
    )
    return 0


# ----------------------------------------------------------------------------------------- eval


@cli.group(invoke_without_command=True, context_settings={"max_content_width": 110})
@config_file_option
@all_tasks_option
@config_options(
    EvalConfig, {"tasks": ["--task"], "workers": ["--verify-workers"], "timeout": ["--verify-timeout"]}
)
@click.pass_context
def eval(ctx: click.Context, config_path: str | None, all_tasks: bool, **options: Any) -> None:
    """Evaluate a model on held-out problems; every attempt goes into an SQLite database.

    Subcommands: `eval compare A B` (before/after table), `eval list` (runs in a database),
    `eval show RUN` (the attempts: what the model wrote and what the verifier said).
    """
    if ctx.invoked_subcommand is not None:
        return
    from .config import refuse_beside_problems_file
    from .eval.evaluate import GENERATION_OPTIONS, check_eval_config, default_run_name, evaluate

    overrides = gather_overrides(options, all_tasks)
    cfg = resolve_config(EvalConfig, config_path, overrides, command="eval")
    refuse_beside_problems_file(cfg, GENERATION_OPTIONS, given=overrides)
    check_eval_config(cfg)
    try:
        with phase_bar("evaluating") as progress:
            name, summary = evaluate(
                cfg,
                progress=lambda done, total: progress(done, total),
                say=lambda m: err.print(m, markup=False),
            )
    except KeyboardInterrupt:  # every batch stored so far is kept, and a rerun skips it
        err.print(
            f"interrupted; the attempts made so far are stored in {cfg.db} as run "
            f"{cfg.run_name or default_run_name(cfg)!r}: the same command finishes it"
        )
        raise click.exceptions.Exit(130) from None
    print_eval_summary(name, summary)
    err.print(
        f"stored as run {name!r} in {cfg.db}"
        + ("" if cfg.run_name else " (named from the options; --run-name chooses)")
    )


def print_eval_summary(name: str, summary: list[dict[str, Any]]) -> None:
    table = Table(title=cell(f"evaluation {name}"), title_justify="left")
    passk = sorted({k for row in summary for k in row if k.startswith("pass@")}, key=lambda k: int(k[5:]))
    for col in [
        "task",
        "difficulty",
        "problems",
        "success",
        "tests passed",
        "correct",
        "partial",
        "failed",
        *passk,
        "mean tokens",
        "failures",
    ]:
        table.add_column(col, justify="left" if col in ("task", "failures") else "right")
    for r in summary:
        failures = ", ".join(f"{s} {c}" for s, c in r["statuses"].items()) or "-"
        table.add_row(
            cell(r["task"]), str(r["difficulty"]), str(r["problems"]), f"{r['success_rate']:.1%}", f"{r['mean_partial']:.2f}",
            str(r["correct"]), str(r["partial"]), str(r["failed"]), *[f"{r[k]:.1%}" if k in r else "-" for k in passk],
            f"{r['mean_tokens']:.1f}", cell(failures),
        )  # fmt: skip
    out.print(table)


@eval.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--db", default="results.db", show_default=True, help="The results database.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json", "markdown"]),
    default="table",
    show_default=True,
)
def eval_compare(run_a: str, run_b: str, db: str, fmt: str) -> None:
    """Before/after: success rates of RUN_A and RUN_B per task and difficulty, and the change.

    Rows the model of RUN_B was not trained on (from its axiom_rl.json) are marked, so the
    table doubles as a forgetting check."""
    from .eval.evaluate import compare, summarize
    from .eval.store import ResultsDB
    from .models.load import read_model_card

    with ResultsDB(db, create=False) as store:
        a, b = store.require_run(run_a), store.require_run(run_b)
        rows = compare(summarize(store.attempts(a)), summarize(store.attempts(b)))
    if differences := evaluated_differently(a.config, b.config):
        err.print(
            printable(f"warning: {run_a} and {run_b} were evaluated differently ({'; '.join(differences)}): "
                      "the change mixes the models' difference with the settings'"),
            markup=False,
        )  # fmt: skip
    card = read_model_card(b.model) if Path(b.model).exists() else {}
    trained = {(t, d) for t in card.get("tasks", []) for d in card.get("difficulties", [])}
    for r in rows:
        r["trained_on"] = "yes" if (r["task"], r["difficulty"]) in trained else ("no" if card else "?")
    emit_comparison(rows, run_a, run_b, fmt)


# The evaluation settings that move a success rate besides the model: two runs that differ in
# one compare the settings as much as the models.
_SETTINGS_THAT_MOVE_RATES = ("temperature", "top_p", "samples", "max_completion_length", "prompt_style",
                             "chat_template", "split", "seed", "timeout")  # fmt: skip


def evaluated_differently(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """'temperature 0.0 vs 1.0', ... for each such setting the two runs' configs differ in."""
    return [
        f"{key} {a.get(key)} vs {b.get(key)}"
        for key in _SETTINGS_THAT_MOVE_RATES
        if key in a and key in b and a[key] != b[key]
    ]


def emit_comparison(rows: list[dict[str, Any]], run_a: str, run_b: str, fmt: str) -> None:
    import csv
    import io

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    def change(x: float | None) -> str:
        return "-" if x is None else f"{x * 100:+.1f} pts"

    if fmt == "json":
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["task"])
        writer.writeheader()
        writer.writerows({k: printable(v) if isinstance(v, str) else v for k, v in r.items()} for r in rows)
        sys.stdout.write(buf.getvalue())
        return
    header = ["task", "difficulty", "trained on", run_a, run_b, "change", "tokens before", "tokens after"]
    lines = [
        [r["task"], str(r["difficulty"]), r["trained_on"], pct(r["before"]), pct(r["after"]), change(r["change"]),
         "-" if r["tokens_before"] is None else f"{r['tokens_before']:.1f}", "-" if r["tokens_after"] is None else f"{r['tokens_after']:.1f}"]
        for r in rows
    ]  # fmt: skip
    if fmt == "markdown":
        sys.stdout.write("| " + " | ".join(map(one_line, header)) + " |\n|" + " --- |" * len(header) + "\n")
        for line in lines:
            sys.stdout.write("| " + " | ".join(map(one_line, line)) + " |\n")
        return
    columns = [Column(header=cell(name)) for name in header]
    table = Table(*columns, title=cell(f"{run_a} -> {run_b}"), title_justify="left")
    for line in lines:
        table.add_row(*map(cell, line))
    out.print(table)


@eval.command("show")
@click.argument("run_name", metavar="RUN")
@click.option("--db", default="results.db", show_default=True, help="The results database.")
@click.option("--status", help="Only attempts with this status (wrong_answer, syntax_error, passed, ...).")
@click.option("--task", help="Only attempts at this task's problems.")
@click.option("--limit", type=int, default=5, show_default=True, help="Show at most this many.")
def eval_show(run_name: str, db: str, status: str | None, task: str | None, limit: int) -> None:
    """The attempts of RUN: what the model wrote, and what the verifier said of it."""
    from .eval.store import ResultsDB
    from .types import STATUSES

    if status is not None and status not in STATUSES:
        raise UserError(f"unknown status {status!r}; choose from: {', '.join(STATUSES)}")
    if limit < 1:
        raise UserError(f"--limit must be >= 1, got {limit}")
    with ResultsDB(db, create=False) as store:
        attempts = store.attempts(store.require_run(run_name))
    chosen = [
        a
        for a in attempts
        if (status is None or a["status"] == status) and (task is None or a["task"] == task)
    ]
    for a in chosen[:limit]:
        # Everything here is stored text (a model's output, a verifier's detail): escaped.
        out.print(
            printable(
                f"── {a['problem_id']} · sample {a['sample']} · {a['status']} · {a['passed']}/{a['total']} tests · "
                f"task reward {a['reward']:.2f} · {a['tokens']} tokens"
            ),
            markup=False,
            highlight=False,
            soft_wrap=True,  # long lines stay whole: the terminal wraps them, nothing is inserted
        )
        if a["detail"]:
            out.print(printable(f"   {a['detail']}"), markup=False, highlight=False, soft_wrap=True)
        completion = printable(a["completion"].rstrip()) or "(empty)"
        out.print(completion, markup=False, highlight=False, soft_wrap=True)
    err.print(
        printable(
            f"{min(limit, len(chosen))} shown of {len(chosen)} matching attempts "
            f"({len(attempts)} in run {run_name!r})"
        ),
        markup=False,
    )


@eval.command("list")
@click.option("--db", default="results.db", show_default=True, help="The results database.")
def eval_list(db: str) -> None:
    """The evaluation runs stored in a database."""
    from .eval.store import ResultsDB

    with ResultsDB(db, create=False) as store:
        table = Table("run", "created", "model", "attempts", box=None, pad_edge=False)
        for run in store.runs():
            table.add_row(cell(run.name), cell(run.created), cell(run.model), str(len(store.done(run))))
    out.print(table)


# ------------------------------------------------------------------------------------- sandbox


@cli.group()
def sandbox() -> None:
    """The sandbox as a network service: verification on other machines."""


@sandbox.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="0: any free port."
)
@click.option("--workers", type=click.IntRange(min=1), help="Sandbox slots (default: one per core).")
@click.option(
    "--capacity",
    type=click.IntRange(min=1),
    help="Requests run at once (default: twice the workers).",
)
@click.option(
    "--queue",
    type=click.IntRange(min=0),
    default=64,
    show_default=True,
    help="Requests that wait for a place beyond --capacity; more are refused with 429.",
)
@click.option(
    "--token",
    envvar="AXIOM_RL_SANDBOX_TOKEN",
    help="Required of clients (Authorization: Bearer T, or ?token=T); needed beyond loopback "
    "(default: $AXIOM_RL_SANDBOX_TOKEN).",
)
def sandbox_serve(
    host: str, port: int, workers: int | None, capacity: int | None, queue: int, token: str | None
) -> None:
    """Serve the sandbox over HTTP: SandboxFusion's POST /run_code (verl's sandbox_fusion client),
    POST /verify (the verify contract, for --sandbox-url) and GET /health. Ctrl-C or SIGTERM
    finishes the requests under way and stops."""
    from .integrations.service import serve

    def announce(url: str, service: Any) -> None:
        err.print(
            printable(
                f"serving the sandbox on {url} ({service.sandbox.workers} workers, isolation: "
                f"{service.sandbox.isolation}, {service.capacity} requests at once, {service.queue} waiting); "
                "Ctrl-C stops"
            ),
            markup=False,
        )

    serve(host, port, workers, token or None, capacity, queue, announce=announce)


# ------------------------------------------------------------------------------------ failures


@cli.group()
def failures() -> None:
    """What a model gets wrong, from an evaluation database: the problems it failed, and its
    weakness profile."""


@failures.command("collect")
@click.option("--db", default="results.db", show_default=True, help="The results database.")
@click.option("--run", "run_name", required=True, help="The evaluation run.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Output .jsonl file.")
@click.option(
    "--below",
    type=float,
    help="Collect problems whose pass rate is below this (default: failed by every sample).",
)
def failures_collect(db: str, run_name: str, out_path: str, below: float | None) -> None:
    """Write the problems RUN failed as a failures file: a problems file (train --problems-file
    reads it) whose lines also say each problem's pass rate and failure classes."""
    from .eval.failures import failed_problems
    from .eval.store import ResultsDB
    from .io import write_jsonl_atomic

    with ResultsDB(db, create=False) as store:
        lines = failed_problems(store, run_name, below)
    write_jsonl_atomic(out_path, lines)
    classes: Counter[str] = Counter()
    for line in lines:
        classes.update(line["failures"]["classes"])
    mix = ", ".join(f"{k} {v}" for k, v in classes.most_common())
    err.print(printable(f"{len(lines)} failed problems of run {run_name!r} -> {out_path} (failed samples: {mix})"),
              markup=False)  # fmt: skip


@failures.command("profile")
@click.option("--db", default="results.db", show_default=True, help="The results database.")
@click.option("--run", "run_name", required=True, help="The evaluation run.")
@click.option(
    "--out-dir",
    type=click.Path(file_okay=False),
    help="Where to write profile.json and profile.png (default: beside the database).",
)
def failures_profile(db: str, run_name: str, out_dir: str | None) -> None:
    """Print RUN's weakness profile (pass rate per task and difficulty, 95% Wilson intervals,
    failure classes) and save it as JSON and a heat map."""
    from .eval.failures import save_heat_map, weakness_profile
    from .eval.store import ResultsDB
    from .io import ensure_dir, write_text_atomic

    with ResultsDB(db, create=False) as store:
        run = store.require_run(run_name)
        cells = weakness_profile(store.attempts(run), store.problem)
    if not cells:
        raise UserError(f"run {run_name!r} has no attempts")
    table = Table("task", "difficulty", "problems", "attempts", "pass rate", "95% interval", "failed samples by class",
                  box=None, pad_edge=False)  # fmt: skip
    rows = [c.to_dict() for c in cells]
    for row in rows:
        low, high = row["interval_95"]
        mix = ", ".join(f"{k} {v}" for k, v in sorted(row["failure_classes"].items(), key=lambda kv: -kv[1]))
        if row.get("countdown_classes"):
            mix += " (" + ", ".join(f"{k} {v}" for k, v in row["countdown_classes"].items()) + ")"
        table.add_row(cell(row["task"]), str(row["difficulty"]), str(row["problems"]), str(row["attempts"]),
                      f"{row['pass_rate']:.1%}", f"{low:.1%}-{high:.1%}", cell(mix))  # fmt: skip
    out.print(table)
    target = Path(out_dir) if out_dir else Path(db).resolve().parent
    ensure_dir(target)
    stem = "profile-" + "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in run_name)[:80]
    write_text_atomic(target / f"{stem}.json", json.dumps({"run": run_name, "cells": rows}, indent=2) + "\n")
    title = "weakness profile: " + printable(run_name).replace("$", r"\$")[:60]
    save_heat_map(cells, str(target / f"{stem}.png"), title)
    err.print(printable(f"wrote {target / stem}.json and .png"), markup=False)


# ----------------------------------------------------------------------- process reward models


@cli.group()
def prm() -> None:
    """Process reward models labelled by the verifier: label an evaluation run's steps, train a
    PRM on them, score completions, and measure it (docs/training.md, "Process rewards")."""


def _style_for(model: str, style: str) -> str:
    from .models.load import check_model_spec
    from .train.plan import resolve_prompt_style

    return resolve_prompt_style(style, model, check_model_spec(model))


_STYLE_OPTION = click.option(
    "--prompt-style",
    type=click.Choice(["auto", "full", "compact", "steps"]),
    default="auto",
    show_default=True,
    help="The prompt style the policy was trained with (auto: its model card's).",
)


@prm.command("label")
@click.option("--db", default="results.db", show_default=True, help="The results database.")
@click.option("--run", "run_name", required=True, help="The evaluation run whose completions to label.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Output .jsonl file.")
@click.option("--model", help="Code tasks: the policy whose continuations label each step (Monte-Carlo).")
@_STYLE_OPTION
@click.option("--continuations", default=8, show_default=True, help="Code: continuations sampled per step.")
@click.option(
    "--hard", is_flag=True, help="Code: a step is good when any continuation passes (default: the share)."
)
@click.option("--temperature", default=1.0, show_default=True, help="Code: sampling temperature.")
@click.option("--max-tokens", default=256, show_default=True, help="Code: tokens per continuation at most.")
def prm_label(db: str, run_name: str, out_path: str, model: str | None, prompt_style: str, continuations: int,
              hard: bool, temperature: float, max_tokens: int) -> None:  # fmt: skip
    """Split every completion of RUN into steps and label each: Countdown exactly (arithmetic,
    numbers still available, target still reachable), or_debug by the solver (a repair that
    shrinks the conflict or reaches the optimum, a diagnosis that names part of it), code by
    Monte-Carlo continuations."""
    from .eval.store import ResultsDB
    from .io import write_jsonl_atomic
    from .prm.labelling import label_run, policy_labeller

    labeller = None
    if model is not None:
        positive(("--continuations", continuations), ("--max-tokens", max_tokens))
        labeller = policy_labeller(
            model, _style_for(model, prompt_style), continuations, hard, temperature, max_tokens
        )
    with ResultsDB(db, create=False) as store:
        labelled = label_run(store, run_name, labeller)
    write_jsonl_atomic(out_path, (e.to_dict() for e in labelled))
    steps = [x for e in labelled for x in e.labels]
    good = sum(x >= 0.5 for x in steps)
    err.print(printable(f"{len(labelled)} completions of run {run_name!r}, {len(steps)} steps ({good} good, "
                        f"{len(steps) - good} bad) -> {out_path}"), markup=False)  # fmt: skip


@prm.command("train")
@click.option("--model", required=True, help="The backbone: a model directory, a hub name, or tiny.")
@click.option(
    "--labels", "labels_path", required=True, type=click.Path(dir_okay=False), help="prm label's output."
)
@click.option(
    "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Where to save the PRM."
)
@_STYLE_OPTION
@click.option("--steps", default=300, show_default=True, help="Optimizer steps.")
@click.option(
    "--lr", default=5e-4, show_default=True, help="AdamW's learning rate (a real model: about 1e-5)."
)
@click.option("--batch-size", default=32, show_default=True, help="Completions per step.")
@click.option("--seed", default=0, show_default=True)
def prm_train(model: str, labels_path: str, out_dir: str, prompt_style: str, steps: int, lr: float,
              batch_size: int, seed: int) -> None:  # fmt: skip
    """Train a process reward model on step labels: the backbone's body, a one-logit head read at
    each step's last token, binary cross-entropy; saved with save_pretrained."""
    from .prm.labels import read_labels
    from .prm.model import MARKER, ProcessRewardModel, train_prm

    target = Path(out_dir)
    if target.exists() and (
        not target.is_dir() or (any(target.iterdir()) and not (target / MARKER).exists())
    ):
        raise UserError(f"{out_dir} exists and is not a process reward model: choose another --out")
    positive(("--steps", steps), ("--batch-size", batch_size), ("--lr", lr))
    examples = read_labels(labels_path)
    style = _style_for(model, prompt_style)
    prm_model = ProcessRewardModel.from_backbone(model, style, seed=seed)
    bar, task = rich_bar("prm train", stats=True)
    bar.update(task, total=steps)
    with bar:
        losses = train_prm(prm_model, examples, steps, lr, batch_size, seed,
                           lambda step, loss: bar.update(task, completed=step, stats=f"loss {loss:.3f}"))  # fmt: skip
    prm_model.save(out_dir)
    head, tail = losses[: max(1, steps // 10)], losses[-max(1, steps // 10) :]
    err.print(printable(f"trained on {len(examples)} completions; loss {sum(head) / len(head):.3f} -> "
                        f"{sum(tail) / len(tail):.3f}; saved to {out_dir}"), markup=False)  # fmt: skip


@prm.command("score")
@click.option("--prm", "prm_dir", required=True, type=click.Path(), help="A PRM directory (prm train's).")
@click.argument("problems_path", type=click.Path(dir_okay=False))
@click.argument("completions_path", type=click.Path(dir_okay=False))
@click.option("--out", "out_path", type=click.Path(dir_okay=False), help="Write the scores as JSONL here.")
def prm_score(prm_dir: str, problems_path: str, completions_path: str, out_path: str | None) -> None:
    """Score each step of each completion (a line of COMPLETIONS_PATH: problem_id, completion)."""
    from .io import read_jsonl, write_jsonl_atomic
    from .prm.model import ProcessRewardModel, check_prm_dir
    from .prm.steps import split_steps
    from .verify_files import load_problems, read_completions

    check_prm_dir(prm_dir)
    errors: list[str] = []
    problems = load_problems(problems_path, errors)
    todo = read_completions(completions_path, read_jsonl(completions_path), problems, errors)
    if errors:
        raise UserError(errors[0])
    if not todo:
        raise UserError(f"{completions_path}: no completions")
    steps = [split_steps(p, c) for p, c in todo]
    model = ProcessRewardModel.load(prm_dir)
    scores = model.score([p for p, _ in todo], [c for _, c in todo], [[s.end for s in st] for st in steps])
    rows = [{"problem_id": p.id, "steps": [{"end": s.end, "text": s.text, "score": round(x, 6)} for s, x in zip(st, sc)],
             "min": round(min(sc), 6) if sc else None} for (p, _), st, sc in zip(todo, steps, scores)]  # fmt: skip
    if out_path:
        write_jsonl_atomic(out_path, rows)
    table = Table("problem", "steps", "min", "scores", box=None, pad_edge=False)
    for row in rows[:50]:
        table.add_row(cell(row["problem_id"]), str(len(row["steps"])), "-" if row["min"] is None else f"{row['min']:.3f}",
                      cell(" ".join(f"{s['score']:.2f}" for s in row["steps"])))  # fmt: skip
    out.print(table)
    if len(rows) > 50:
        err.print(f"(the first 50 of {len(rows)} shown)")


@prm.command("eval")
@click.option("--prm", "prm_dir", required=True, type=click.Path(), help="A PRM directory (prm train's).")
@click.option("--labels", "labels_path", required=True, type=click.Path(dir_okay=False),
              help="Held-out labels (prm label of another run): several samples per problem for reranking.")  # fmt: skip
@click.option("--aggregate", type=click.Choice(["min", "mean", "last"]), default="min", show_default=True,
              help="How a completion's step scores rank it for best-of-N.")  # fmt: skip
@click.option("--out", "out_path", type=click.Path(dir_okay=False), help="Write the figures as JSON here.")
def prm_eval(prm_dir: str, labels_path: str, aggregate: str, out_path: str | None) -> None:
    """Step-level AUC against the labels, and best-of-N reranking beside one sample, majority vote
    and the oracle."""
    from .io import write_text_atomic
    from .prm.evaluation import auc, rerank
    from .prm.labels import read_labels
    from .prm.model import ProcessRewardModel, check_prm_dir

    check_prm_dir(prm_dir)
    examples = read_labels(labels_path)
    model = ProcessRewardModel.load(prm_dir)
    scores = model.score(
        [e.problem for e in examples], [e.completion for e in examples], [e.ends for e in examples]
    )
    flat = [(x, y >= 0.5) for e, sc in zip(examples, scores) for x, y in zip(sc, e.labels)]
    area = auc([x for x, _ in flat], [y for _, y in flat])
    r = rerank(examples, scores, aggregate)
    figures = {"steps": len(flat), "good_steps": sum(y for _, y in flat), "auc": area, "problems": r.problems,
               "samples_per_problem": r.samples_per_problem, "single": r.single, f"best_of_n_{aggregate}": r.best_of_n,
               "majority": r.majority, "oracle": r.oracle}  # fmt: skip
    out.print(f"steps {len(flat)} ({figures['good_steps']} good); step AUC "
              + ("n/a (one kind of label only)" if area is None else f"{area:.3f}"))  # fmt: skip
    out.print(f"{r.problems} problems, {r.samples_per_problem:.1f} samples each: one sample {r.single:.1%}, "
              f"best-of-N by the PRM ({aggregate}) {r.best_of_n:.1%}, majority vote {r.majority:.1%}, "
              f"oracle {r.oracle:.1%}")  # fmt: skip
    if out_path:
        write_text_atomic(out_path, json.dumps(figures, indent=2) + "\n")


# ------------------------------------------------------------------------------------- selfplay


@cli.command(context_settings={"max_content_width": 110})
@click.option(
    "--model",
    default="tiny",
    show_default=True,
    help="The first round's model: tiny, a model directory or a hub name.",
)
@click.option(
    "--tiny-size", default="tiny", show_default=True, help="Size of the built-in model when --model tiny."
)
@click.option(
    "--task",
    "-t",
    "tasks",
    default="is_palindrome,max_subarray",
    show_default=True,
    help="Tasks, comma-separated; each code task brings its debug_<task>.",
)
@click.option(
    "--difficulty", "-d", default="1-3", show_default=True, help="A difficulty or an inclusive range."
)
@click.option("--rounds", type=int, default=3, show_default=True)
@click.option("--steps-per-round", type=int, default=10, show_default=True, help="GRPO steps per round.")
@click.option(
    "--targeting",
    type=click.Choice(["weakness", "uniform"]),
    default="weakness",
    show_default=True,
    help="weakness: the weakest cells and their debug problems; uniform: every cell alike (the control).",
)
@click.option("--weak-cells", type=int, default=3, show_default=True, help="Cells a round targets.")
@click.option(
    "--keep", type=float, default=0.25, show_default=True, help="Share of a round's problems from every cell."
)
@click.option("--eval-count", type=int, default=4, show_default=True, help="Held-out problems per cell.")
@click.option("--eval-samples", type=int, default=2, show_default=True, help="Samples per held-out problem.")
@click.option("--prompts-per-step", type=int, default=4, show_default=True)
@click.option("--num-generations", type=int, default=8, show_default=True)
@click.option("--max-completion-length", type=int, default=256, show_default=True)
@click.option(
    "--temperature", type=float, default=1.0, show_default=True, help="Of rollouts and held-out sampling."
)
@click.option("--lr", type=float, default=2e-5, show_default=True)
@click.option("--beta", type=float, default=0.04, show_default=True, help="KL weight.")
@click.option(
    "--propose",
    type=float,
    default=0.0,
    show_default=True,
    help="Share of a round's problems that ask the policy to propose Countdown puzzles (needs countdown), "
    "rewarded by their learnability for the model entering the round.",
)
@click.option(
    "--solver-samples", type=int, default=8, show_default=True, help="Solver attempts per proposed puzzle."
)
@click.option(
    "--proposer-reward",
    type=click.Choice(["learnability", "validity"]),
    default="learnability",
    show_default=True,
    help="What a proposal earns: 4p(1-p) of the solver's success rate p, or 1 for any valid puzzle (the control).",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--out",
    default="runs/selfplay",
    show_default=True,
    help="The run's directory (a stopped run resumes there).",
)
def selfplay(tasks: str, **options: Any) -> None:
    """Self-play in rounds: evaluate, profile the weaknesses, train on targeted problems (debug
    problems with injected bugs among them), repeat. Each round's report goes to
    OUT/round-R/report.md, the plot across rounds to OUT/selfplay.png."""
    from .selfplay import SelfPlayConfig, run_selfplay

    cfg = SelfPlayConfig(tasks=[t for t in tasks.split(",") if t.strip()], **options)
    state = run_selfplay(cfg, say=lambda message: err.print(one_line(message), markup=False, highlight=False))
    out.print(f"{len(state['rounds'])} rounds done in {cfg.out} (plot: {cfg.out}/selfplay.png)")


# ----------------------------------------------------------------------------------- experiment


def _seed_list(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    try:
        seeds = [int(s) for s in value.replace(",", " ").split()]
    except ValueError:
        raise click.BadParameter(f"seeds are integers, comma-separated: got {value!r}") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise click.BadParameter(f"give distinct seeds >= 0, comma-separated: got {value!r}")
    return seeds


@cli.command(context_settings={"max_content_width": 110})
@click.argument("name", metavar="NAME", type=click.Choice(list(RECIPES)))
@click.option("--seeds", default="0", show_default=True, callback=_seed_list, help="Comma-separated.")
@click.option(
    "--out", default=None, help="The run directory (a stopped run resumes there).  [default: runs/NAME]"
)
@click.option(
    "--scale",
    type=click.Choice(["cpu", "gpu"]),
    default="cpu",
    show_default=True,
    help="cpu: the built-in model; gpu: a hub model (--model).",
)
@click.option("--model", default=None, help="The gpu scale's model: a hub name or a local directory.")
@click.option("--smoke", is_flag=True, help="A few steps and problems: checks every stage, measures nothing.")
def experiment(name: str, seeds: list[int], out: str | None, **options: Any) -> int:
    """The original experiments as recipes: loop-validation (every stage of the GRPO loop
    checked), hard-problems (GRPO on tasks SFT left out, with the forgetting check, the
    distillation arm and the more-SFT control), token-budget-sweep (GRPO, Dr. GRPO and the hybrid
    at three completion budgets on Countdown). Prints the tables and writes OUT/report.md."""
    from .recipes import run_recipe
    from .recipes.common import RecipeOptions

    opts = RecipeOptions(seeds=seeds, out=Path(out or f"runs/{name}"), **options)
    tables, ok = run_recipe(name, opts, say=lambda m: err.print(one_line(m), markup=False, highlight=False))
    click.echo(tables)
    click.echo(f"\nreport: {opts.out / 'report.md'}")
    return 0 if ok else 1


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
    except Exception as e:  # the machine's failures are the user's to fix; anything else is ours
        from .resources import machine_failure

        if (failure := machine_failure(e, Path.cwd())) is None:
            raise
        where = f" ({e.filename})" if isinstance(e, OSError) and e.filename else ""
        return _user_error(
            f"{failure.reason}{where}; files are written whole or not at all, so none was left half-written"
        )


if __name__ == "__main__":
    raise SystemExit(main())
