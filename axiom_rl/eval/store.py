"""Evaluation results in SQLite: runs, problems, attempts.

    runs      id, name (unique), created, model, config (JSON: what was evaluated and how)
    problems  id, task, difficulty, json (the problem itself, so a database is self-contained)
    attempts  run_id, problem_id, sample  (primary key: a rerun never duplicates an attempt)
              completion, reward, status, passed, total, tokens, latency_s, detail

Write-ahead logging; each batch of attempts is one transaction, so an interrupted evaluation
keeps every batch it finished and the database is never half-written. A file that exists but is
not an axiom-rl database is refused, never modified.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..io import create_whole, ensure_dir
from ..resources import storage_failure
from ..types import Problem

APP_ID = 0x61786D72  # "axmr": SQLite's application_id header field marks our databases
SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created TEXT NOT NULL,
    model TEXT NOT NULL,
    config TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS problems (
    id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    difficulty INTEGER NOT NULL,
    json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    problem_id TEXT NOT NULL REFERENCES problems(id),
    sample INTEGER NOT NULL,
    completion TEXT NOT NULL,
    reward REAL NOT NULL,
    status TEXT NOT NULL,
    passed INTEGER NOT NULL,
    total INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    latency_s REAL NOT NULL,
    detail TEXT NOT NULL,
    PRIMARY KEY (run_id, problem_id, sample)
);
CREATE INDEX IF NOT EXISTS attempts_by_problem ON attempts(problem_id);
CREATE INDEX IF NOT EXISTS problems_by_task ON problems(task, difficulty);
"""


@dataclass(frozen=True)
class Attempt:
    problem_id: str
    sample: int
    completion: str
    reward: float
    status: str
    passed: int
    total: int
    tokens: int
    latency_s: float
    detail: str = ""


@dataclass(frozen=True)
class Run:
    id: int
    name: str
    created: str
    model: str
    config: dict[str, Any]


def _new_database(path: Path) -> None:
    """An empty results database at `path` (an empty or absent file): marked as ours, with the
    schema, in write-ahead-log mode (readers never wait for a writer). Closed, so its log is
    folded back in and the file alone is the database."""
    conn = sqlite3.connect(path, timeout=30)
    try:
        with conn:
            conn.execute(f"PRAGMA application_id={APP_ID}")
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            conn.executescript(SCHEMA)
        conn.execute("PRAGMA journal_mode=WAL")  # recorded in the file: every later connection uses it
    finally:
        conn.close()


# SQLite's words for a file (or the disk under it) in trouble, rather than a query in error.
_STORAGE_TROUBLE = ("malformed", "not a database", "disk is full", "readonly", "disk I/O error")


def _storage_error(path: Path, error: BaseException) -> UserError | None:
    """A one-line user error for a damaged database or a full or read-only disk, else None."""
    if isinstance(error, sqlite3.DatabaseError) and any(w in str(error) for w in _STORAGE_TROUBLE):
        reason = storage_failure(error, path)
        said = f"{reason} (SQLite: {error})" if reason and reason not in str(error) else str(error)
        return UserError(f"results database {path}: {said}")
    return None


def _on_read_only_storage(path: Path) -> bool:
    """Is `path` on a file system mounted read-only (a DVD, a read-only share or bind mount)?
    Nothing can change the file there, so readers may open it as immutable."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


class ResultsDB:
    def __init__(self, path: str | Path, create: bool = True) -> None:
        """Open the database at `path`, creating it unless `create` is False (readers: a
        misspelt name is an error, not a new empty database)."""
        self.path = Path(path)
        if not create and not self.path.exists():
            raise UserError(f"no such database: {path}")
        if self.path.is_dir():
            raise UserError(f"{path} is a directory, not a database file")
        if not self.path.exists() or self.path.stat().st_size == 0:
            ensure_dir(self.path.parent)
            try:
                create_whole(self.path, _new_database)
            except (OSError, sqlite3.Error) as e:  # a place it cannot be created
                raise UserError(f"cannot create database {path}: {e}") from None
            if self.path.stat().st_size == 0:  # an empty file was there already: it holds nothing
                _new_database(self.path)
        with open(self.path, "rb") as f:
            header = f.read(100)
        if not header.startswith(b"SQLite format 3\x00") or int.from_bytes(header[68:72], "big") != APP_ID:
            raise UserError(f"{path} exists and is not an axiom-rl results database; choose another --db")
        read_only = _on_read_only_storage(self.path)
        if read_only and create:
            raise UserError(
                f"results database {path} is on a read-only file system; choose a --db on writable storage"
            )
        try:
            if read_only:  # a WAL database opens only where SQLite may create its -shm file beside it
                uri = f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=ro&immutable=1"
                self.conn = sqlite3.connect(uri, uri=True, timeout=30)
            else:
                self.conn = sqlite3.connect(self.path, timeout=30)
            self.conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.OperationalError as e:  # a place it cannot be created, a read-only file
            raise UserError(f"cannot open database {path}: {e}") from None
        try:
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as e:
            self.conn.close()
            raise _storage_error(self.path, e) or e from None
        if version != SCHEMA_VERSION:
            raise UserError(
                f"{path} has schema version {version}; this axiom-rl reads version {SCHEMA_VERSION}"
            )

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> ResultsDB:
        return self

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        self.close()
        trouble = _storage_error(self.path, error) if error is not None else None
        if trouble is not None:
            raise trouble from None

    # ------------------------------------------------------------------ runs

    def get_run(self, name: str) -> Run | None:
        row = self.conn.execute(
            "SELECT id, name, created, model, config FROM runs WHERE name = ?", (name,)
        ).fetchone()
        return Run(row[0], row[1], row[2], row[3], json.loads(row[4])) if row else None

    def require_run(self, name: str) -> Run:
        run = self.get_run(name)
        if run is None:
            known = ", ".join(r.name for r in self.runs()) or "none"
            raise UserError(f"no run named {name!r} in {self.path} (runs: {known})")
        return run

    def runs(self) -> list[Run]:
        rows = self.conn.execute("SELECT id, name, created, model, config FROM runs ORDER BY id").fetchall()
        return [Run(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    def start_run(self, name: str, model: str, config: dict[str, Any]) -> Run:
        """A new run, or the existing one of that name if it was started with the same settings
        (an interrupted evaluation continues where it stopped)."""
        existing = self.get_run(name)
        if existing is not None:
            if existing.config != config or existing.model != model:
                raise UserError(f"run {name!r} already exists with other settings; choose another --run-name")
            return existing
        try:
            with self.conn:
                self.conn.execute(
                    "INSERT INTO runs (name, created, model, config) VALUES (?, ?, ?, ?)",
                    (name, time.strftime("%Y-%m-%dT%H:%M:%S"), model, json.dumps(config, sort_keys=True)),
                )
        except sqlite3.IntegrityError:  # another process started a run of that name since get_run
            return self.start_run(name, model, config)
        return self.require_run(name)

    # ------------------------------------------------------------------ problems and attempts

    def done(self, run: Run) -> set[tuple[str, int]]:
        rows = self.conn.execute(
            "SELECT problem_id, sample FROM attempts WHERE run_id = ?", (run.id,)
        ).fetchall()
        return {(r[0], r[1]) for r in rows}

    def add_batch(self, run: Run, problems: Iterable[Problem], attempts: Sequence[Attempt]) -> None:
        """One transaction: the problems (if new) and the attempts of a finished batch."""
        with self.conn:
            self.conn.executemany(
                "INSERT OR IGNORE INTO problems (id, task, difficulty, json) VALUES (?, ?, ?, ?)",
                [(p.id, p.task, p.difficulty, p.to_json()) for p in problems],
            )
            self.conn.executemany(
                "INSERT OR IGNORE INTO attempts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        run.id,
                        a.problem_id,
                        a.sample,
                        a.completion,
                        a.reward,
                        a.status,
                        a.passed,
                        a.total,
                        a.tokens,
                        a.latency_s,
                        a.detail,
                    )
                    for a in attempts
                ],
            )

    def attempts(self, run: Run) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            """SELECT a.problem_id, p.task, p.difficulty, a.sample, a.completion, a.reward, a.status,
                      a.passed, a.total, a.tokens, a.latency_s, a.detail
               FROM attempts a JOIN problems p ON p.id = a.problem_id
               WHERE a.run_id = ? ORDER BY p.task, p.difficulty, a.problem_id, a.sample""",
            (run.id,),
        ).fetchall()
        keys = (
            "problem_id",
            "task",
            "difficulty",
            "sample",
            "completion",
            "reward",
            "status",
            "passed",
            "total",
            "tokens",
            "latency_s",
            "detail",
        )
        return [dict(zip(keys, r)) for r in rows]

    def conflicting_problems(self, problems: Sequence[Problem]) -> list[str]:
        """Ids of `problems` that this database holds as a different problem. An id names one
        problem here: attempts, `eval show` and `sft --from-samples` read it back by id."""
        stored: dict[str, str] = {}
        ids = [p.id for p in problems]
        for start in range(0, len(ids), 500):  # under SQLite's limit on bound parameters
            chunk = ids[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            stored.update(self.conn.execute(f"SELECT id, json FROM problems WHERE id IN ({marks})", chunk))
        return [p.id for p in problems if p.id in stored and Problem.from_json(stored[p.id]) != p]

    def problem(self, problem_id: str) -> Problem:
        row = self.conn.execute("SELECT json FROM problems WHERE id = ?", (problem_id,)).fetchone()
        if row is None:
            raise KeyError(problem_id)
        return Problem.from_json(row[0])
