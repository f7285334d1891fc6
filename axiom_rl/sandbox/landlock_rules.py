"""Landlock rules for a submission that runs without namespaces: it may read only the system's
and the interpreter's directories (and its own), write only inside its own directory, run no
program, and, on kernels that can scope them, signal no process and reach no abstract Unix
socket outside itself.

Without namespaces there is no private mount tree to make read-only or to show only some
directories in, and no pid namespace to hide the host's processes; without root the submission
runs as the caller's own uid. Permissions alone would let it read and write anything the caller
can (a home directory, the project, a problem file with its expected outputs) and signal the
caller's processes (the trainer). Landlock (Linux 5.13+) is the kernel's way for an unprivileged
process to give up access to the file system, and it holds for native code as for Python.

Rights are asked by the kernel's Landlock ABI version: reads, writes, removals, creations and
execution (1), renames and links across directories (2), truncation (3), TCP (4), device ioctls
(5), signals and abstract Unix sockets outside the sandbox (6). Where the kernel has no Landlock,
nothing is restricted here and the sandbox's description of its isolation says so.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct
from collections.abc import Sequence

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE = 1 << 4, 1 << 5
MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = (1 << n for n in range(6, 13))
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

_WRITES_V1 = (
    WRITE_FILE
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_CHAR
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SOCK
    | MAKE_FIFO
    | MAKE_BLOCK
    | MAKE_SYM
)
READS = READ_FILE | READ_DIR
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # what a rule on a file may grant

_libc = ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 where it has none (or it is switched off)."""
    version = _libc.syscall(SYS_CREATE_RULESET, None, 0, CREATE_RULESET_VERSION)
    return max(version, 0)


def _os_error(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"landlock {what}: {os.strerror(err)}")


class Rules:
    """The rights this kernel's ABI can take away, worked out once (in the monitor)."""

    def __init__(self, abi: int) -> None:
        self.abi = abi
        self.writes = _WRITES_V1 | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)
        self.handled_fs = self.writes | READS | EXECUTE | (IOCTL_DEV if abi >= 5 else 0)
        self.handled_net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
        self.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0

    def describe(self) -> str:
        signals = ", no signals out" if self.scoped else ""
        return (
            f"Landlock ABI {self.abi} (reads only the system's and the interpreter's files, "
            f"writes only in its directory, no programs{signals})"
        )

    def ruleset(self, writable: str, readable: Sequence[str]) -> int:
        """A ruleset (a file descriptor) that lets a process read only under `writable`, the
        `readable` paths and /dev/null, and write only under `writable` and to /dev/null. Built
        once; each submission's process restricts itself with it (restrict_self)."""
        attr = struct.pack("=QQQ", self.handled_fs, self.handled_net, self.scoped)
        fd = _libc.syscall(SYS_CREATE_RULESET, attr, len(attr), 0)
        if fd < 0:
            raise _os_error("create_ruleset")
        try:
            self._allow(fd, writable, self.writes | READS)
            self._allow(fd, os.devnull, WRITE_FILE | TRUNCATE | READS)
            for path in readable:
                self._allow(fd, path, READS)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _allow(self, ruleset: int, path: str, rights: int) -> None:
        try:
            target = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # gone, or a dangling link: nothing to read there
        try:
            if not stat.S_ISDIR(os.fstat(target).st_mode):
                rights &= FILE_RIGHTS  # a rule on a file may only grant what applies to files
            rights &= self.handled_fs
            rule = struct.pack("=Qi", rights, target)  # struct landlock_path_beneath_attr, packed
            if rights and _libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, rule, 0) != 0:
                raise _os_error(f"add_rule {path}")
        finally:
            os.close(target)


def restrict_self(ruleset: int) -> None:
    """Restrict the calling process, and whatever it starts from now on, to a ruleset. Needs
    no_new_privs set; raises OSError where the kernel refuses."""
    if _libc.syscall(SYS_RESTRICT_SELF, ruleset, 0) != 0:
        raise _os_error("restrict_self")


def for_this_kernel() -> Rules | None:
    abi = abi_version()
    return Rules(abi) if abi > 0 else None
