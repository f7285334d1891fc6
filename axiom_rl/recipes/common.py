"""What every recipe shares: its options, its results file, held-out evaluation and its tables."""

from __future__ import annotations

import fcntl
import json
import math
import shutil
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..io import write_text_atomic

Say = Callable[[str], None]
SCALES = ("cpu", "gpu")


@dataclass
class RecipeOptions:
    """How one recipe runs: which seeds, where, at which scale, and whether in its smoke mode."""

    seeds: list[int] = field(default_factory=lambda: [0])
    out: Path = Path("runs/experiment")
    scale: str = "cpu"
    """cpu: the built-in model, trained from scratch where the recipe needs it; gpu: a hub model."""
    model: str | None = None
    """The model of the gpu scale (a hub name or a local directory); the recipe's default if None."""
    smoke: bool = False
    """A few steps and problems: checks that every stage runs, measures nothing."""

    def check(self) -> None:
        if self.scale not in SCALES:
            raise UserError(f"unknown scale {self.scale!r}; choose from: {', '.join(SCALES)}")
        if not self.seeds:
            raise UserError("give at least one seed")
        if any(s < 0 for s in self.seeds):
            raise UserError(f"seeds must be >= 0, got {self.seeds}")
        if self.model is not None and self.scale == "cpu":
            raise UserError("--model is the gpu scale's; the cpu scale uses the built-in model")
        if self.out.exists() and not self.out.is_dir():
            raise UserError(f"{self.out} is a file, not a run directory")


class Results:
    """OUT/results.json: one entry per (seed, arm), written after each arm, so a stopped recipe
    resumes at the first arm it had not finished."""

    def __init__(self, out: Path) -> None:
        self.path = out / "results.json"
        self.data: dict[str, Any] = self._read()

    def _read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise UserError(f"{self.path} is not a results file ({e}); give another --out") from None
        if not isinstance(data, dict):
            raise UserError(f"{self.path} is not a results file; give another --out")
        return data

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def put(self, key: str, value: Any) -> None:
        """Under a lock, the file as it is now with this entry: two runs writing to one OUT keep
        each other's entries."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.data = self._read()
            self.data[key] = value
            write_text_atomic(self.path, json.dumps(self.data, indent=1) + "\n")


def quiet(message: str) -> None:
    pass


def once(results: Results, key: str, work: Callable[[], Any], say: Say) -> Any:
    """`work()`'s value, computed the first time and read from results.json after."""
    value = results.get(key)
    if value is None:
        start = time.perf_counter()
        value = work()
        results.put(key, value)
        say(f"{key}: done in {time.perf_counter() - start:.0f}s")
    return value


def sft_model(directory: Path, settings: dict[str, Any]) -> Path:
    """SFT with these settings into `directory`, once: a finished model is reused, a stopped
    run's remains are removed first. No checkpoints unless the settings ask (`save_every`)."""
    from ..config import SFTConfig
    from ..train.sft import sft

    final = directory / "final_model"
    if not (final / "axiom_rl.json").exists():
        shutil.rmtree(directory, ignore_errors=True)
        sft(SFTConfig(**{"save_every": 0, **settings}, output_dir=str(directory)), say=quiet)
    return final


def grpo_model(directory: Path, settings: dict[str, Any], progress: Any = None, say: Say = quiet) -> Any:
    """A GRPO run from scratch into `directory` (a stopped run's remains are removed): its
    TrainResult. A run stopped by a signal (Ctrl-C, SIGTERM) before its final model is an
    interruption, not a result: the recipe stops, and runs this arm again when resumed."""
    from ..config import TrainConfig
    from ..train.grpo import train

    shutil.rmtree(directory, ignore_errors=True)
    result = train(TrainConfig(**settings, output_dir=str(directory)), progress=progress, say=say)
    if result.stopped_early:  # the trainer wrote a checkpoint, not a final model
        raise KeyboardInterrupt(f"{directory} stopped at step {result.steps}")
    return result


def evaluated_attempts(
    db: Path, run: str, settings: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Evaluate (or finish evaluating) into `db` under `run`: its summary per task and
    difficulty (eval.evaluate.summarize's rows), and every attempt of the run."""
    from ..config import EvalConfig
    from ..eval.evaluate import evaluate
    from ..eval.store import ResultsDB

    _, summary = evaluate(EvalConfig(**settings, db=str(db), run_name=run), say=quiet)
    with ResultsDB(str(db)) as store:
        return summary, store.attempts(store.require_run(run))


def training_signal(metrics: Sequence[dict[str, Any]]) -> dict[str, float]:
    """What a GRPO run had to learn from: mean reward, the share of groups whose rewards were
    all equal (no gradient from them), training accuracy over the first and the last tenth of
    its steps, mean completion length."""
    if not metrics:
        return {}
    tenth = max(1, len(metrics) // 10)

    def mean(key: str, rows: Sequence[dict[str, Any]] = metrics) -> float:
        return statistics.mean(float(m.get(key, math.nan)) for m in rows)

    return {
        "steps": len(metrics),
        "reward_mean": mean("reward_mean"),
        "zero_std_frac": mean("zero_std_frac"),
        "accuracy_first": mean("accuracy", metrics[:tenth]),
        "accuracy_last": mean("accuracy", metrics[-tenth:]),
        "completion_len_mean": mean("completion_len_mean"),
    }


def mean_spread(values: Sequence[float], scale: float = 100.0, unit: str = "%", digits: int = 1) -> str:
    """'mean ± sd' over seeds (the sd of one value is not printed)."""
    values = [v * scale for v in values if v is not None and not math.isnan(v)]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}{unit}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}{unit}"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub table; the first column left-aligned, the others right."""
    head = "| " + " | ".join(header) + " |"
    rule = "| --- | " + " | ".join("---:" for _ in header[1:]) + " |"
    body = ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join([head, rule, *body])


def write_report(out: Path, title: str, sections: Sequence[str]) -> Path:
    path = out / "report.md"
    write_text_atomic(path, f"# {title}\n\n" + "\n\n".join(s.strip() for s in sections) + "\n")
    return path
