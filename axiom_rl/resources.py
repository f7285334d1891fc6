"""When the machine, not the program, is why something failed: its storage (a full disk, a quota,
read-only media, a failing device) or its memory.

Those are the user's to fix, and deserve one line that says so, but the libraries report them in
their own ways. Memory: Python's MemoryError, torch's "DefaultCPUAllocator: can't allocate
memory" (a RuntimeError) and torch.OutOfMemoryError on a GPU ("CUDA out of memory"). Storage:
Python raises OSError with the errno; safetensors wraps the OS error's text ("No space left on
device (os error 28)"); torch's zip writer loses the error and raises "unexpected pos N vs M"
when a write comes up short; sqlite3 says "database or disk is full", "attempt to write a
readonly database", or, when the disk fills as it writes its WAL, just "disk I/O error".
`machine_failure` reads all of them.
"""

from __future__ import annotations

import contextlib
import errno
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError

REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EFBIG: "a file grew past the size this system allows",
    errno.EIO: "the device reported an input/output error",
}
# What libraries print where they keep only the message: the OS's own text and the Rust form.
_TEXTS = (
    (re.compile(r"os error (\d+)\)"), None),
    (re.compile(r"No space left on device|database or disk is full"), errno.ENOSPC),
    (re.compile(r"Disk quota exceeded"), errno.EDQUOT),
    (re.compile(r"Read-only file system|attempt to write a readonly database"), errno.EROFS),
)
# Failures that name no cause: torch.save's writer after a short write, SQLite's I/O error (which
# is what a full disk gives while it writes its WAL). A nearly full disk is then the likely cause.
_UNNAMED = {
    re.compile(r"unexpected pos \d+ vs \d+"): "a write came up short (a full or failing disk)",
    re.compile(r"^disk I/O error$"): REASONS[errno.EIO],
}
_NEARLY_FULL = 1 << 20  # bytes free below which a short write is put down to a full disk


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _free_bytes(where: Path) -> int | None:
    for place in (where, *where.parents):
        with contextlib.suppress(OSError):
            return shutil.disk_usage(place).free
    return None


def storage_failure(error: BaseException, where: str | Path) -> str | None:
    """Why `error` happened, in words, when the storage holding `where` is the reason; else None
    (a bug of ours, or anything else, keeps its traceback)."""
    for e in _chain(error):
        if isinstance(e, OSError) and e.errno in REASONS:
            return REASONS[e.errno]
        text = str(e)
        for pattern, number in _TEXTS:
            if match := pattern.search(text):
                number = number if number is not None else int(match.group(1))
                if number in REASONS:
                    return REASONS[number]
        for pattern, otherwise in _UNNAMED.items():
            if pattern.search(text):
                free = _free_bytes(Path(where))
                return REASONS[errno.ENOSPC] if free is not None and free < _NEARLY_FULL else otherwise
    return None


_NO_MEMORY = re.compile(
    r"can't allocate memory: you tried to allocate (\d+) bytes|out of memory", re.IGNORECASE
)


def out_of_memory(error: BaseException) -> str | None:
    """Out of memory, in words (with the allocation that failed where the error names it); else None."""
    for e in _chain(error):
        if isinstance(e, MemoryError):
            return "out of memory"
        if isinstance(e, RuntimeError) and (match := _NO_MEMORY.search(str(e))):
            wanted = (
                f" (an allocation of {int(match.group(1)) / 2**20:,.0f} MiB failed)" if match.group(1) else ""
            )
            return "out of memory" + wanted
    return None


@dataclass(frozen=True)
class MachineFailure:
    reason: str  # what ran out or failed, in words
    memory: bool  # memory rather than storage: the remedy differs


def machine_failure(error: BaseException, where: str | Path) -> MachineFailure | None:
    """What of the machine failed, when memory or the storage holding `where` is why `error`
    happened; else None."""
    if (reason := out_of_memory(error)) is not None:
        return MachineFailure(reason, memory=True)
    if (reason := storage_failure(error, where)) is not None:
        return MachineFailure(reason, memory=False)
    return None


@contextlib.contextmanager
def machine_errors(where: str | Path, then: Callable[[MachineFailure], str]) -> Iterator[None]:
    """Turn a failure of the storage under `where`, or of memory, into a one-line UserError,
    `then(failure)`; anything else goes on as it was."""
    try:
        yield
    except UserError:
        raise
    except Exception as error:
        if (failure := machine_failure(error, where)) is None:
            raise
        raise UserError(then(failure)) from error
