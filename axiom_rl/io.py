"""Files and directories written atomically, JSONL read with line numbers.

Nothing axiom-rl writes (problems, results, checkpoints, models, reports) is ever left
half-written: data goes to a temporary sibling, is flushed to disk, then renamed over the
destination in one step. What lands there has the permissions a plain `open()` or `mkdir()`
would have given it (the umask's), or, for a file replaced, the permissions it had: the
private 0600 / 0700 of a temporary file never leaks into the result.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import stat
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .errors import UserError


def ensure_dir(path: str | os.PathLike[str], exist_ok: bool = True) -> Path:
    """`mkdir -p path`; a place that cannot hold it (read-only, not ours, a file in the way) is
    the user's to fix: a one-line UserError, not a traceback."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=exist_ok)
    except OSError as e:
        raise UserError(f"cannot create directory {path}: {e.strerror or e}") from None
    return path


def current_umask() -> int:
    """The process's umask, read from /proc without changing it: os.umask can only read it by
    setting it, which races with other threads creating files. Without /proc it does that, and
    puts the old value back at once."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _final_mode(path: Path, default: int) -> int:
    """The permissions `path` should end with: its current ones if it exists, else `default`
    (0o666 for a file, 0o777 for a directory) less the umask, as open() and mkdir() do."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return default & ~current_umask()


def _temporary_sibling(path: Path, make: Any) -> Any:
    """`make` (tempfile.mkstemp or mkdtemp) of a hidden temporary next to `path`, in the same
    directory so that the final rename stays on one file system."""
    ensure_dir(path.parent)
    try:
        return make(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w") -> Iterator[TextIO]:
    """Open a temporary sibling of `path` for writing; rename it over `path` on success."""
    path = Path(path)
    fd, tmp = _temporary_sibling(path, tempfile.mkstemp)
    try:
        os.fchmod(fd, _final_mode(path, 0o666))
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary sibling of directory `path` to fill; on success its files are
    flushed to disk, given the umask's permissions, and it takes `path`'s place. On failure it
    is removed and `path`, if it existed, is left as it was. An existing `path` is renamed aside
    first and deleted only once the new one is in place.
    """
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise UserError(f"{path} exists and is not a directory")
    tmp = Path(_temporary_sibling(path, tempfile.mkdtemp))
    old: Path | None = None
    try:
        yield tmp
        umask = current_umask()
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
            # Every entry as open() and mkdir() would make it: safetensors, for one, writes 0600.
            if not f.is_symlink():
                f.chmod((0o777 if f.is_dir() else 0o666) & ~umask)
        tmp.chmod(0o777 & ~umask)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old)  # a directory may be renamed over an empty one
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            if path.exists():
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(old, path)  # put the previous one back
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def hold_run_dir(run_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Create run directory `run_dir` if needed and hold it for this process: while held, a second
    holder (a resume started while the run still goes on, a second run given the same directory)
    gets a one-line error instead of writing beside the first. The hold is an flock on
    `run_dir/.lock`, which the kernel drops when the process ends, however it ends: no stale locks."""
    path = ensure_dir(run_dir)
    try:
        fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        _lock(fd, path)
        remove_dead_temporaries(path)
        yield path
    finally:
        os.close(fd)  # drops the lock


_TEMPORARY = re.compile(r"^\..+\.(tmp|old)$")  # _temporary_sibling's and atomic_directory's names


def temporaries_in(run_dir: Path) -> list[Path]:
    """The hidden temporaries (`.step-N.*.tmp`, `.final_model.*.tmp`, `.metrics.jsonl.*.tmp`, a
    replaced directory's `.*.old`) in `run_dir` and its checkpoints: a writer's work in progress,
    or what one killed mid-write left."""
    return [
        entry
        for folder in (run_dir, run_dir / "checkpoints")
        for entry in (folder.iterdir() if folder.is_dir() else ())
        if _TEMPORARY.match(entry.name) and not entry.is_symlink()
    ]


def remove_dead_temporaries(run_dir: Path) -> list[Path]:
    """The temporaries (temporaries_in) that a writer killed mid-write left in `run_dir`: called
    by the run directory's holder, so no live writer owns them (a 1.7B model's is some 20 GB per
    crash). Returns what it removed."""
    removed = temporaries_in(run_dir)
    for entry in removed:
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    return removed


def remove_if_abandoned(directory: Path, lock: Path) -> bool:
    """Remove `directory` if no live process holds `lock` (an flock, as hold_run_dir and
    holding() take): what a killed process was building. A held one is another process's work
    in progress and stays. A missing lock file counts as free (a writer older than the lock).
    Returns whether it was removed."""
    import fcntl

    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return False  # cannot tell: leave it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    try:
        shutil.rmtree(directory, ignore_errors=True)
        if not lock.is_relative_to(directory):
            lock.unlink(missing_ok=True)
    finally:
        os.close(fd)
    return not directory.exists()


@contextlib.contextmanager
def holding(lock: Path) -> Iterator[None]:
    """Hold the flock on `lock` (created if needed) for the block: remove_if_abandoned leaves
    what it guards alone. The kernel drops it when the process ends, however it ends."""
    import fcntl

    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def check_not_held(run_dir: str | os.PathLike[str]) -> None:
    """The one-line error of hold_run_dir, now, without holding or creating anything: so that a
    run in progress is what a user hears about, not what is missing from it so far."""
    try:
        fd = os.open(Path(run_dir) / ".lock", os.O_RDONLY)
    except OSError:
        return  # never held (or unreadable: hold_run_dir will say)
    try:
        _lock(fd, Path(run_dir))
    finally:
        os.close(fd)


def _lock(fd: int, path: Path) -> None:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UserError(
            f"{path} is in use by another axiom-rl process; wait for it to end, or choose another --output-dir"
        ) from None


def create_whole(path: str | os.PathLike[str], build: Callable[[Path], None]) -> bool:
    """Create file `path` whole, or leave the one that is there: `build` fills a temporary
    sibling, which is then hard-linked into place, which never replaces a file. So a concurrent
    creator (two evaluations starting on one new database) sees either no file or a finished
    one, and one of them wins. Returns whether this call created it."""
    path = Path(path)
    fd, tmp = _temporary_sibling(path, tempfile.mkstemp)
    os.close(fd)
    try:
        os.chmod(tmp, _final_mode(path, 0o666))
        build(Path(tmp))
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: a rename, checked first
            if path.exists():
                return False
            os.replace(tmp, path)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


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
    """Every non-blank line of `path`, parsed; malformed lines carry an error, not an exception.
    A gzip-compressed file is read as its contents (HumanEval ships as HumanEval.jsonl.gz)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise UserError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise UserError(f"expected a file, got a directory: {path}") from None
    except PermissionError:
        raise UserError(f"cannot read {path}: permission denied") from None
    if data.startswith(b"\x1f\x8b"):  # gzip's magic number
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):  # (gzip.BadGzipFile is an OSError)
            raise UserError(f"not a readable gzip file: {path}") from None
    try:
        text = data.decode("utf-8-sig")  # (a byte-order mark, as some editors write, is dropped)
    except UnicodeDecodeError:
        raise UserError(f"not a UTF-8 text file: {path}") from None
    lines = []
    for i, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            lines.append(JsonlLine(i, value=json.loads(raw)))
        except json.JSONDecodeError as e:
            # Some of json's messages end in "at" ("Unterminated string starting at"): one "at".
            where = "column" if e.msg.endswith(" at") else "at column"
            lines.append(JsonlLine(i, error=f"not valid JSON ({e.msg} {where} {e.colno})"))
    return lines
