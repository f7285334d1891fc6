"""Where a run reports besides its own files: TensorBoard and Weights & Biases (`report_to`).

metrics.jsonl, samples.jsonl and train.log are always written (runlog.py); these are views of
the same rows. Each gets the run's settings once (its hyperparameters), every step's figures under
sections (`train/`, `time/`, `reward/`, `status/`, `source/`), and the samples with their prompts.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import secrets
import string
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..io import write_text_atomic

# report_to's names, and the module each needs
LOGGERS = {"tensorboard": "tensorboard", "wandb": "wandb"}


def installed(name: str) -> bool:
    return importlib.util.find_spec(LOGGERS[name]) is not None


def parse_report_to(text: str) -> list[str]:
    """'auto' -> TensorBoard where it is installed; 'none' -> nothing; else the names given,
    each of which must be installed: a logger asked for by name and missing stops the run before
    it starts, with the line that installs it."""
    words = [w.strip() for w in str(text).split(",") if w.strip()]
    if words in (["auto"], []):
        return [name for name in ("tensorboard",) if installed(name)]
    if words == ["none"]:
        return []
    for word in words:
        if word not in LOGGERS:
            raise UserError(f"unknown report_to {word!r}; choose from: auto, none, {', '.join(LOGGERS)}")
        if not installed(word):
            raise UserError(
                f"report_to {word}: {LOGGERS[word]} is not installed (pip install {LOGGERS[word]})"
            )
    return list(dict.fromkeys(words))


def section(key: str) -> str:
    """A metric's tag: grouped as the dashboards show them."""
    if "/" in key:
        return key
    if key.startswith("time_"):
        return "time/" + key[len("time_") :]
    return "train/" + key


def _finite_numbers(row: dict[str, Any]) -> dict[str, float]:
    return {
        section(k): float(v)
        for k, v in row.items()
        if k != "step" and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def _samples_markdown(rows: list[dict[str, Any]]) -> str:
    """A table of the samples for TensorBoard's text tab (cells cut, pipes escaped)."""

    def cell(value: Any, width: int = 300) -> str:
        text = "" if value is None else str(value)
        return text[:width].replace("|", "\\|").replace("\n", "⏎")

    lines = ["| problem | prompt | completion | status | reward |", "| --- | --- | --- | --- | ---: |"]
    for r in rows:
        prompt = cell(r.get("prompt")) if "prompt" in r else ""
        lines.append(
            f"| {cell(r['problem_id'])} | {prompt} | {cell(r['completion'])} | {r['status']} | {r['reward']:.3f} |"
        )
    return "\n".join(lines)


class TensorBoardLogger:
    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        settings = "\n".join(f"| {k} | {json.dumps(v)} |" for k, v in config.items())
        self.writer.add_text("config", "| option | value |\n| --- | --- |\n" + settings, 0)

    def metrics(self, step: int, row: dict[str, Any]) -> None:
        for tag, value in _finite_numbers(row).items():
            self.writer.add_scalar(tag, value, step)

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        self.writer.add_text("samples", _samples_markdown(rows), step)

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """A W&B run named after the run directory, its files under it (WANDB_MODE=offline keeps
    them there; WANDB_PROJECT names the project, axiom-rl by default). A resumed run continues
    the same W&B run: its id is kept in the run directory."""

    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        import wandb

        id_file = run_dir / "wandb-id.txt"
        if id_file.exists():
            run_id = id_file.read_text(errors="replace").strip()
            if not re.fullmatch(r"[a-z0-9]{1,64}", run_id):
                raise UserError(f"{id_file} does not hold a W&B run id (lower-case letters and digits)")
        else:  # W&B's own ids: eight lower-case letters and digits
            run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
            write_text_atomic(id_file, run_id + "\n")
        self.wandb = wandb
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "axiom-rl"), name=run_dir.name, id=run_id, resume="allow",
            dir=str(run_dir), config=config, reinit="create_new",
        )  # fmt: skip

    def metrics(self, step: int, row: dict[str, Any]) -> None:
        self.run.log(_finite_numbers(row), step=step)

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        columns = ["problem_id", "prompt", "completion", "status", "reward"]
        table = self.wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in rows])
        self.run.log({"samples": table}, step=step)

    def close(self) -> None:
        self.run.finish()


def open_loggers(names: list[str], run_dir: Path, config: dict[str, Any]) -> list[Any]:
    makers = {"tensorboard": TensorBoardLogger, "wandb": WandbLogger}
    return [makers[name](run_dir, config) for name in names]
