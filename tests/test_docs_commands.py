"""Every `axiom-rl` command in a bash block of README.md and docs/*.md is one the command line
takes: its subcommand exists, each flag is one of that command's, and (for train, sft and eval)
every value converts to its option's type, YAML files included. A renamed flag, a removed
option or a doc's typo fails here. The commands that need no model run in full elsewhere
(tests/test_failures_recipe.py, tests/test_docs_python_api.py)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from axiom_rl.cli import cli
from axiom_rl.config import EvalConfig, SFTConfig, TrainConfig, build_config

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONFIGS = {"train": TrainConfig, "sft": SFTConfig, "eval": EvalConfig}


def documented_commands() -> list[tuple[str, list[str]]]:
    """(where, the words after `axiom-rl`) for each command line of each ```bash block, with the
    block's own VAR="..." settings put in; lines with placeholders (... or [--option]) are left out."""
    found = []
    for doc in DOCS:
        lines = doc.read_text(encoding="utf-8").splitlines()
        in_block, variables, pending, start = False, {}, "", 0
        for number, line in enumerate(lines, 1):
            if not in_block:
                in_block, variables = line.strip() == "```bash", {}
                continue
            if line.strip() == "```":
                in_block = False
                continue
            if not pending:
                start = number
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line, pending = (pending + line).split(" # ")[0].strip(), ""
            if m := re.fullmatch(r'([A-Z]+)="(.*)"', line):
                variables[m.group(1)] = m.group(2)
                continue
            for name, value in variables.items():
                line = line.replace(f"${name}", value)
            if not line.startswith("axiom-rl ") or "..." in line or "$" in line or "[--" in line:
                continue
            found.append((f"{doc.name}:{start}", shlex.split(line)[1:]))
    return found


COMMANDS = documented_commands()


def test_the_docs_hold_commands_to_check():
    assert len(COMMANDS) > 40 and {words[0] for _, words in COMMANDS} >= {
        "train",
        "sft",
        "eval",
        "problems",
        "verify",
        "failures",
        "quickstart",
    }


@pytest.mark.parametrize(("where", "words"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_a_documented_command_parses(where, words):
    command: click.Command = cli
    ctx = None
    args = list(words)
    try:
        while isinstance(command, click.Group) and args and not args[0].startswith("-"):
            name = args.pop(0)
            sub = command.get_command(click.Context(command), name)
            assert sub is not None, f"{where}: no command {name!r}"
            command = sub
        ctx = command.make_context("axiom-rl", args, resilient_parsing=False)
    except click.UsageError as e:
        pytest.fail(f"{where}: axiom-rl {' '.join(words)}: {e.format_message()}")
    if (
        words[0] in CONFIGS
        and isinstance(command, click.Command)
        and len(words) > 1
        and words[1] not in ("compare", "list", "show")
    ):
        params = {
            k: v for k, v in ctx.params.items() if v is not None and k not in ("config_path", "all_tasks")
        }
        yaml = ctx.params.get("config_path")
        build_config(CONFIGS[words[0]], ROOT / yaml if yaml else None, params)
