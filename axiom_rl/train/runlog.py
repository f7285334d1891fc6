"""What a run writes as it goes: metrics.jsonl, samples.jsonl, train.log, and what its loggers
(TensorBoard, W&B: loggers.py) show.

On resume, lines logged after the checkpoint's step are dropped (they belong to steps that will
run again), so the files read as one uninterrupted run.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..io import ensure_dir, write_text_atomic


def _truncate_jsonl(path: Path, last_step: int) -> list[int]:
    """Keep the rows of steps up to `last_step` (those after it will run again); drop only what
    cannot be a row: a torn line from a crash, bytes that are not UTF-8, a line that is not a JSON
    object. A torn line in the middle once dropped every valid row after it. Returns the steps
    up to `last_step` that have no row (a crash lost them: rows are flushed, checkpoints synced)."""
    if not path.exists():
        return []
    kept, steps = [], set()
    for raw in path.read_bytes().splitlines():
        try:
            row = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(row, dict) and isinstance(row.get("step", 0), int) and row.get("step", 0) <= last_step:
            kept.append(raw.decode("utf-8"))
            steps.add(row.get("step", 0))
    write_text_atomic(path, "".join(line + "\n" for line in kept))
    return [step for step in range(1, last_step + 1) if step not in steps]


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; keep them readable
    return value


class RunLog:
    """A run's files, and the loggers of `report_to` (loggers.py) fed the same rows."""

    def __init__(
        self,
        run_dir: str | Path,
        resume_step: int | None = None,
        report_to: Sequence[str] = (),
        config: dict[str, Any] | None = None,
    ) -> None:
        from .loggers import open_loggers

        self.dir = Path(run_dir)
        ensure_dir(self.dir)
        missing: list[int] = []
        if resume_step is not None:
            missing = _truncate_jsonl(self.dir / "metrics.jsonl", resume_step)
            _truncate_jsonl(self.dir / "samples.jsonl", resume_step)
        self._metrics = open(self.dir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        self._samples: Any = None  # opened on the first samples: an SFT run writes none
        self._log = open(self.dir / "train.log", "a", encoding="utf-8")  # noqa: SIM115
        if missing:  # said, not filled: the steps ran, their figures are gone
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            self.info(
                f"warning: metrics.jsonl has no row for step(s) {shown} (lost in a crash before the resume)"
            )
        self._loggers = open_loggers(list(report_to), self.dir, config or {})

    def info(self, message: str) -> None:
        self._log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")
        self._log.flush()

    def warning(self, message: str, say: Callable[[str], None]) -> None:
        """A warning, in train.log and through `say` on the console."""
        self.info(f"warning: {message}")
        say(f"warning: {message}")

    def failed(self, steps_done: int, error: BaseException) -> None:
        """Record the error that ended the run (the console's line is gone by the time the log is read)."""
        what = str(error) if isinstance(error, UserError) else f"{type(error).__name__}: {error}"
        self.info(f"failed after {steps_done} step(s): {what}")

    def metrics(self, row: dict[str, Any]) -> None:
        self._metrics.write(json.dumps({k: _jsonable(v) for k, v in row.items()}) + "\n")
        self._metrics.flush()
        for logger in self._loggers:
            logger.metrics(int(row["step"]), row)

    def samples(self, rows: list[dict[str, Any]]) -> None:
        if self._samples is None:
            self._samples = open(self.dir / "samples.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        for row in rows:
            self._samples.write(json.dumps(row) + "\n")
        self._samples.flush()
        for logger in self._loggers if rows else ():
            logger.samples(int(rows[0]["step"]), rows)

    def close(self) -> None:
        for f in (self._metrics, self._samples, self._log):
            if f is not None:
                f.close()
        for logger in self._loggers:
            logger.close()
