"""Files written atomically, JSONL read with line numbers.

Nothing axiom-rl writes (problems, results, checkpoints, reports) is ever left half-written:
data goes to a temporary file in the same directory, is flushed to disk, then renamed over
the destination in one step.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .errors import UserError


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w") -> Iterator[TextIO]:
    """Open a temporary sibling of `path` for writing; rename it over `path` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)


def write_jsonl_atomic(path: str | os.PathLike[str], rows: Iterable[Any]) -> int:
    """Write one JSON value per line; returns the number of lines."""
    n = 0
    with atomic_open(path) as f:
        for row in rows:
            f.write(row if isinstance(row, str) else json.dumps(row, ensure_ascii=True))
            f.write("\n")
            n += 1
    return n


@dataclass(frozen=True)
class JsonlLine:
    """One line of a JSONL file: its 1-based number and either a value or why it is bad."""

    lineno: int
    value: Any = None
    error: str | None = None


def read_jsonl(path: str | os.PathLike[str]) -> list[JsonlLine]:
    """Every non-blank line of `path`, parsed; malformed lines carry an error, not an exception."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise UserError(f"expected a file, got a directory: {path}") from None
    except UnicodeDecodeError:
        raise UserError(f"not a UTF-8 text file: {path}") from None
    lines = []
    for i, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            lines.append(JsonlLine(i, value=json.loads(raw)))
        except json.JSONDecodeError as e:
            lines.append(JsonlLine(i, error=f"not valid JSON ({e.msg} at column {e.colno})"))
    return lines
