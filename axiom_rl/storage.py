"""When the storage, not the program, is why something failed: a full disk, a quota, read-only
media, a failing device.

Those are the user's to fix, and deserve one line that says so, but the libraries that write our
files report them in their own ways: Python raises OSError with the errno; safetensors wraps the
OS error's text ("No space left on device (os error 28)"); torch's zip writer loses the error and
raises "unexpected pos N vs M" when a write comes up short; sqlite3 says "database or disk is
full", "attempt to write a readonly database", or, when the disk fills as it writes its WAL, just
"disk I/O error". `storage_failure` reads all of them.
"""

from __future__ import annotations

import contextlib
import errno
import re
import shutil
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def storage_errors(where: str | Path, then: Callable[[str], str]) -> Iterator[None]:
    """Turn a failure of the storage under `where` into a one-line UserError, `then(reason)`;
    anything else goes on as it was."""
    try:
        yield
    except UserError:
        raise
    except Exception as error:
        reason = storage_failure(error, where)
        if reason is None:
            raise
        raise UserError(then(reason)) from error
