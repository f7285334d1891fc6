"""The sandbox's process side: one long-lived monitor per worker slot, one fresh fork per job.

Started by `axiom_rl.sandbox.pool.Sandbox` as `python -E -s -B server.py CHANNEL_FD SETTINGS`, once
per worker slot, with a scrubbed environment, in a session of its own. Stdlib only.

    parent (trusted; holds the expected outputs, which never come here)
      └─ monitor, one per slot (this file's main loop: interpreter and common modules loaded
         │  once; trusted; reads a job, enforces limits, reports, waits for the next job)
         ├─ judge (one per slot, forked before any job; assert-style tests the parent cannot
         │         replay (judging.py): runs each job's trusted test code, in which the
         │         candidate function is an RPC stub)
         └─ candidate (per job, untrusted: a fresh fork in fresh namespaces; answers with plain
                       data only, and is killed, with everything it started, at the end)

Untrusted code never runs in the monitor, so nothing of one submission reaches the next: each
candidate is forked from the monitor's clean state. The monitor forks as little as possible
(one process per job), because with a preloaded interpreter the cost of a job
is mostly the kernel's work to fork and tear down a process. See `axiom_rl/sandbox/__init__.py`
for the policy: what is and is not covered.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import errno
import gc
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import stat
import struct
import sys
import sysconfig
import tempfile
import time
import traceback
from collections.abc import Callable

import codec  # sibling modules: the script's directory is sys.path[0] until we drop it below
import judging
import landlock_rules
import syscall_filter

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(codec.__file__)):
    sys.path.pop(0)  # nothing else of ours is importable by submissions

# Modules a submission commonly imports, loaded once here so each fork gets them for free.
PRELOAD = [
    "math",
    "cmath",
    "re",
    "collections",
    "itertools",
    "functools",
    "heapq",
    "bisect",
    "string",
    "typing",
    "json",
    "random",
    "statistics",
    "fractions",
    "decimal",
    "operator",
    "copy",
    "hashlib",
    "datetime",
    "array",
    "dataclasses",
    "enum",
    "textwrap",
    "unicodedata",
    "numbers",
    "struct",
    "abc",
    "types",
    "weakref",
    "contextlib",
]

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
# statvfs flags a read-only remount must repeat (in a user namespace the kernel locks them).
KEPT_MOUNT_FLAGS = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (the shared table from 424 on)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
# All of /dev a submission sees (see _minimal_dev).
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEVICE_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
)
# World-writable places a submission could otherwise leave files in: each gets a private tmpfs.
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
# All a submission sees of the host's tree with namespaces, where these exist: the system's
# programs, libraries and configuration, the kernel's views, and (see _interpreter_dirs) the
# interpreter's own directories. Not home directories, projects, data sets, run outputs, or
# problem files with their expected outputs (see _visible_root).
SYSTEM_DIRS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/nix",  # package stores: an interpreter's libraries live there on NixOS
    "/gnu",  # and on Guix
)
MNT_DETACH = 2
NAMESPACED_WORKDIR = "/tmp"  # with namespaces, a job's directory: its own tmpfs there

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def setns(fd: int, flags: int) -> None:
    _check(_libc.setns(fd, flags), "setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def b(s: str | None) -> bytes | None:
        return None if s is None else s.encode()

    _check(_libc.mount(b(source), b(target), b(fstype), ctypes.c_ulong(flags), b(data)), f"mount {target}")


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), "prctl")


# ------------------------------------------------------------------ framing: one JSON value per line


def send_line(fd: int, obj: object) -> None:
    view = memoryview((json.dumps(obj, separators=(",", ":")) + "\n").encode())
    while view:
        view = view[os.write(fd, view) :]


class LineReader:
    """Newline-framed JSON from a file descriptor, with a cap on the bytes it will take."""

    def __init__(self, fd: int, max_bytes: int = 64 << 20, take_fds: bool = False) -> None:
        self.fd, self.buf, self.total, self.max_bytes, self.eof = fd, b"", 0, max_bytes, False
        # A socket to receive descriptors sent along with the bytes (see take_fds).
        self.sock = socket.socket(fileno=os.dup(fd)) if take_fds else None
        self.fds: list[int] = []

    def take_fds(self) -> list[int]:
        """The descriptors received so far, handed over to the caller."""
        fds, self.fds = self.fds, []
        return fds

    def fill(self) -> None:
        """One read() into the buffer (call when select says the fd is readable)."""
        if self.sock is not None:
            chunk, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 4)
            self.fds += fds
        else:
            chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            self.eof = True
            return
        self.total += len(chunk)
        if self.total > self.max_bytes:
            raise ValueError("too much data")
        self.buf += chunk

    def pop(self) -> object | None:
        """The next complete message in the buffer, if any (ValueError on garbage)."""
        if b"\n" not in self.buf:
            return None
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def read(self, timeout: float | None) -> object | None:
        """Block for the next message; None on EOF or timeout (see .eof)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            msg = self.pop()
            if msg is not None or self.eof:
                return msg
            if deadline is not None:  # without a deadline, read() itself blocks: no select needed
                wait = max(0.0, deadline - time.monotonic())
                if not select.select([self.fd], [], [], wait)[0]:
                    return None
            self.fill()


# ------------------------------------------------------------------ isolating the candidate


def isolate(cfg: dict, limits: dict, uid: int | None, workdir: str) -> None:
    """Make the calling, freshly forked process a sandboxed one (it is init of a new pid
    namespace when namespaces are on)."""
    os.setsid()
    if cfg["namespaces"]:
        flags = CLONE_NEWNS | CLONE_NEWIPC
        if cfg["slot_netns"] >= 0:
            setns(cfg["slot_netns"], CLONE_NEWNET)  # the slot's empty network namespace (root mode)
            os.close(cfg["slot_netns"])
        else:
            flags |= CLONE_NEWNET
        # A copy of the slot's prepared mount tree (see _mount_template): private, and with the
        # interpreter reachable; what follows mounts only what must be fresh for every job.
        setns(cfg["mount_template"], CLONE_NEWNS)
        os.close(cfg["mount_template"])
        unshare(flags)
        # O_PATH handles on interpreter directories the scratch mounts would cover (a venv in
        # /tmp, say), taken before they are covered, to bind them back.
        handles = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in cfg["python_under_scratch"]}
        for d in cfg["scratch_dirs"]:
            mount(
                "tmpfs",
                d,
                "tmpfs",
                MS_NOSUID | MS_NODEV,
                f"size={limits['disk_mb']}m,nr_inodes=4096,mode=1777",
            )
        for path, fd in handles.items():
            _bind_read_only(fd, path)
        if cfg["null_is_a_file"] and cfg["scratch_dirs"]:
            _own_dev_null(cfg["scratch_dirs"])
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # shows only our processes
    _limit(limits, nproc=uid is not None or not cfg["root"])
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # setuid programs cannot raise privileges
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # set after setuid, which clears it
    prctl(PR_SET_DUMPABLE, 0)  # no ptrace, no /proc/<pid>/mem from same-uid processes
    if cfg["landlock_ruleset"] >= 0:  # no namespaces: writes only in its own directory
        landlock_rules.restrict_self(cfg["landlock_ruleset"])
        os.close(cfg["landlock_ruleset"])
    if cfg["syscall_filter"]:
        cfg["syscall_filter"].install()  # last: the set-up above needs mount and setns
    os.chdir(workdir)  # the environment is already the submission's: see submission_environment
    if not cfg["namespaces"]:
        _reach_through_handles(cfg["path_handles"])
        _install_audit_guard()


def submission_environment(workdir: str) -> None:
    """Make the monitor's environment exactly what a submission gets, so that each forked
    candidate inherits it as it is. Done in the monitor, once (or per job without namespaces,
    where the directory changes), because in a fresh fork the same few dictionary operations
    cost about 0.25 ms: every page they touch is copied on write there."""
    os.environ.clear()
    os.environ.update(
        {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
    )


def _own_dev_null(scratch_dirs: list[str]) -> None:
    """Where the host's /dev/null is a plain file (some containers and VMs), give this job one of
    its own in its scratch space: the template's, read-only, would refuse writes, and a writable
    one there would carry data from one job to the next."""
    shm = [d for d in scratch_dirs if d == "/dev/shm"]  # out of sight of /tmp's listing
    null = os.path.join((shm or scratch_dirs)[0], ".null")
    os.close(os.open(null, os.O_CREAT | os.O_WRONLY, 0o666))
    os.chmod(null, 0o666)  # past the umask: the submission's uid writes it
    mount(null, "/dev/null", None, MS_BIND)


def _reach_through_handles(handles: dict[str, int]) -> None:
    """Weak mode, started as root: the interpreter may live where the slot's uid cannot enter (a
    pyenv or venv under /root), and with no mount namespace it cannot be bound back. Modules the
    monitor preloaded work anyway; for any other import, each such sys.path entry is reached
    through /proc/self/fd/N, a handle the monitor opened: the kernel resolves that link to the
    directory itself, without checking the directories above it, and the process may follow
    its own descriptors' links even when it is not dumpable. Read access only, as a bind would
    give; the files inside keep their own permissions."""
    if not handles:
        return
    for i, entry in enumerate(sys.path):
        for path, fd in handles.items():
            if _is_within(entry, path):
                sys.path[i] = f"/proc/self/fd/{fd}{entry[len(path) :]}"
                break
    sys.path_importer_cache.clear()


def _is_within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _bind_read_only(fd: int, path: str) -> None:
    """Mount the directory open as O_PATH `fd` at `path`, read-only."""
    os.makedirs(path, exist_ok=True)
    mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.close(fd)


def _read_only_tree() -> None:
    """Make every mount of this (private) mount namespace read-only, whatever its other flags.

    Without root a submission runs as the caller's own uid, so permissions alone would let it
    write anything the caller can (a home directory, the project); as root, in world-writable
    places outside the scratch directories. The scratch directories and /proc are mounted fresh,
    and writable, over this tree for each job."""
    attr = struct.pack("=QQQQ", MOUNT_ATTR_RDONLY, 0, 0, 0)  # struct mount_attr: set, clear, ...
    if _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, attr, len(attr)) == 0:
        return
    if ctypes.get_errno() not in (errno.ENOSYS, errno.EINVAL):
        _check(-1, "mount_setattr /")
    _read_only_mounts_one_by_one()


def _read_only_mounts_one_by_one() -> None:
    """_read_only_tree on kernels before 5.12 (no mount_setattr): a read-only bind remount of each
    mount point, repeating the flags it has."""
    with open("/proc/self/mountinfo") as f:
        # The kernel writes space, tab, newline and backslash in a mount point as octal escapes.
        points = [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[4]) for line in f]
    for point in sorted(set(points), key=lambda p: p.count("/")):
        try:
            flags = os.statvfs(point).f_flag
            kept = sum(ms for st, ms in KEPT_MOUNT_FLAGS if flags & st)
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)
        except OSError as e:
            # A mount point this process cannot reach (under a directory it may not enter, or
            # covered by a later mount) is one its submissions cannot reach either.
            if e.errno not in (errno.EACCES, errno.ENOENT):
                raise


def _prepared_namespace(flag: int, kind: str, prepare: Callable[[], None] | None = None) -> int:
    """A namespace made once per slot by a helper child (unshare, then `prepare` inside it), which
    candidates then enter or copy. Returns a file descriptor on it: kept open by the monitor, it
    keeps the namespace alive after the helper has exited."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            ours.close()
            unshare(flag)
            if prepare is not None:
                prepare()
            socket.send_fds(theirs, [b"x"], [os.open(f"/proc/self/ns/{kind}", os.O_RDONLY)])
            os._exit(0)
        except BaseException:
            with contextlib.suppress(BaseException):
                traceback.print_exc()
            os._exit(1)
    theirs.close()
    _, fds, _, _ = socket.recv_fds(ours, 1, 1)
    ours.close()
    _, status = os.waitpid(pid, 0)
    if not fds or not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        raise OSError(f"could not prepare the sandbox's {kind} namespace")
    return fds[0]


def _slot_netns() -> int:
    """An empty network namespace for this slot's candidates, created once (root mode)."""
    return _prepared_namespace(CLONE_NEWNET, "net")


def _mount_template(cfg: dict) -> int:
    """A mount namespace prepared once per slot, which every candidate copies: recursively private
    (nothing mounted in a copy propagates to the host), read-only throughout, with a /dev of its
    own, and holding only SYSTEM_DIRS and the interpreter's directories (_visible_root). Where
    this machine's pivot_root number is not known here, the host's whole tree instead, with the
    directories an unprivileged uid cannot enter (e.g. /root, where pyenv lives) covered by an
    empty tmpfs and the interpreter bound back. Doing this once instead of per job saves about
    half a millisecond of every verification. A candidate cannot change the template: it only
    ever holds a copy, and the template's own mounts are root's and read-only to it.
    """

    def prepare() -> None:
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        if cfg["visible_dirs"]:
            _visible_root(cfg["visible_dirs"], cfg["scratch_dirs"])
        else:
            _cover_blocked_dirs(cfg["blocked_dirs"], cfg["python_paths"])
        _minimal_dev(cfg["scratch_dirs"])
        _read_only_tree()

    return _prepared_namespace(CLONE_NEWNS, "mnt", prepare)


def _visible_root(visible: list[str], mount_points: list[str]) -> None:
    """Make this mount namespace's root a tmpfs that holds `visible` alone, each bound from the
    host's tree with whatever is mounted under it (a top-level symbolic link such as /bin ->
    usr/bin is copied as a link), and empty directories at `mount_points`; then detach the host's
    root. A submission that knows where a problem file or a run's outputs are still finds
    nothing there: permissions would not stop it, since such files are usually world-readable
    (and, without root, it runs as their owner)."""
    links, handles = {}, {}
    for path in visible:
        if os.path.islink(path) and os.path.dirname(path) == "/":
            links[path] = os.readlink(path)
        elif os.path.isdir(path):
            handles[path] = os.open(path, os.O_PATH | os.O_DIRECTORY)  # before anything covers it
    staging = "/tmp"  # any directory: its tmpfs becomes the root
    mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m,nr_inodes=4096")
    for path, target in links.items():
        os.symlink(target, staging + path)
    for path, fd in handles.items():
        os.makedirs(staging + path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", staging + path, None, MS_BIND | MS_REC)
        os.close(fd)
    for path in mount_points:  # those inside a bound directory are made there later (/dev/shm)
        if not any(_is_within(path, top) for top in handles):
            os.makedirs(staging + path, exist_ok=True)
    os.chdir(staging)
    # pivot_root(".", "."): the new root goes under the old one, which is then detached.
    _check(_libc.syscall(syscall_filter.number("pivot_root"), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detaching the host's root")
    os.chdir("/")


def _cover_blocked_dirs(blocked: list[str], python_paths: list[str]) -> None:
    """The host's tree, with each of `blocked` covered by an empty tmpfs and the interpreter's
    paths inside bound back (where _visible_root cannot be used)."""
    handles = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in python_paths}
    for top in blocked:
        mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=64k")
    for path, fd in handles.items():
        if any(_is_within(path, top) for top in blocked):
            _bind_read_only(fd, path)
        else:
            os.close(fd)


def _minimal_dev(scratch_dirs: list[str]) -> None:
    """Cover /dev with a tmpfs that holds only DEVICES, bound from the host's, the usual links, and
    mount points for the scratch directories under it.

    The host's /dev holds more than any task needs, within reach of a submission's permissions:
    without root it has the caller's groups (disk, video, input: a disk, the webcam, keyboards),
    and some nodes are open to everyone on some distributions (/dev/kvm, GPU render nodes,
    /dev/kmsg, the kernel's log). A read-only mount does not protect a device node."""
    handles = {}
    for name in DEVICES:
        with contextlib.suppress(OSError):
            handles[name] = os.open(f"/dev/{name}", os.O_PATH | os.O_CLOEXEC)
    mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=64k,nr_inodes=64")
    for name, fd in handles.items():
        with open(f"/dev/{name}", "w"):
            pass  # a file to bind the node onto
        mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, MS_BIND)
        os.close(fd)
    for link, target in DEVICE_LINKS:
        os.symlink(target, f"/dev/{link}")
    for path in scratch_dirs:
        if _is_within(path, "/dev"):
            os.makedirs(path, exist_ok=True)


# Without root or namespaces: what RLIMIT_NPROC allows a submission beyond the caller's threads.
NPROC_SLACK = 64
_thread_count: tuple[float, int] = (-1.0, 0)  # (when, how many): see _caller_threads


def _caller_threads(max_age: float = 0.5) -> int:
    """Threads whose real uid is ours, as RLIMIT_NPROC counts them (read from /proc at most every
    `max_age` seconds: it takes about 25 µs a process, milliseconds on a desktop)."""
    global _thread_count
    when, count = _thread_count
    if time.monotonic() - when > max_age:
        me, count = str(os.getuid()), 0
        for entry in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError, ValueError, KeyError), open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if line.startswith(("Uid:", "Threads:")))
                if fields["Uid"].split()[0] == me:  # the real uid, first of four
                    count += int(fields["Threads"])
        _thread_count = (time.monotonic(), count)
    return count


def _limit(limits: dict, nproc: bool) -> None:
    mb = limits["memory_mb"] << 20
    cpu = int(limits["cpu_s"]) + 1
    for res, value in (
        (resource.RLIMIT_AS, (mb, mb)),
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_FSIZE, ((limits["disk_mb"] << 20),) * 2),
        (resource.RLIMIT_NOFILE, (256, 256)),
        (resource.RLIMIT_CORE, (0, 0)),
    ):
        resource.setrlimit(res, value)
    if nproc:
        # NPROC counts per uid (root is exempt): with a uid per slot it caps this submission alone.
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["nproc"], limits["nproc"]))


def _install_audit_guard() -> None:
    """Weak mode only: refuse sockets, new programs and ctypes from Python code.

    Audit hooks cannot be removed from Python, but native code could get around them: that is
    why this mode is reported as weaker.
    """
    blocked = (
        "socket.",
        "subprocess.",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "ctypes.",
        "os.kill",
        "os.killpg",
    )

    def hook(event: str, args: tuple) -> None:
        if event.startswith(blocked):
            raise PermissionError(f"{event} is not allowed in the sandbox")

    sys.addaudithook(hook)


def _keep_only_fds(keep: list[int]) -> None:
    last = 2
    for fd in sorted(keep):
        if fd > last + 1:
            os.closerange(last + 1, fd)
        last = max(last, fd)
    os.closerange(last + 1, 65536)


def _redirect_stdio(out_fd: int | None) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null if out_fd is None else out_fd, 1)
    os.dup2(null if out_fd is None else out_fd, 2)
    os.close(null)


# ------------------------------------------------------------------ the untrusted side


class CallTimeout(BaseException):
    """Raised inside the candidate when a call has used up its CPU time."""


def _on_cpu_alarm(signum: int, frame: object) -> None:
    raise CallTimeout()


class _Budget:
    """CPU time for one submission: each call's timer gets at most what is left, so a run of
    timing-out calls stops at the submission's limit, not at calls x per-call limit.

    The time a call used is read back from the timer when it is disarmed (two syscalls a call).
    """

    def __init__(self, limits: dict) -> None:
        self.call, self.left, self.armed = limits["call_timeout"], limits["cpu_s"], 0.0

    def arm(self) -> bool:
        self.armed = min(self.call, self.left)
        if self.armed <= 0:
            return False
        signal.setitimer(signal.ITIMER_PROF, self.armed)
        return True

    def disarm(self) -> float:
        """Stop the timer; returns the CPU seconds used since arm()."""
        remaining = signal.setitimer(signal.ITIMER_PROF, 0)[0]
        # The kernel rounds timers up to a clock tick: "remaining" may exceed what was armed.
        used = self.armed if remaining == 0 else max(0.0, self.armed - remaining)
        self.left -= used
        return used


def _kind(e: BaseException) -> str:
    if isinstance(e, CallTimeout):
        return "timeout"
    if isinstance(e, MemoryError):
        return "memory_limit"
    return "runtime_error"


def _load(code: str, entry_point: str, budget: _Budget) -> tuple[object, dict, dict]:
    """Compile and run the submission: (its function or None, its namespace, a status message)."""
    signal.signal(signal.SIGPROF, _on_cpu_alarm)
    try:
        compiled = compile(code, "<submission>", "exec")
    except MemoryError as e:
        return None, {}, {"load": "memory_limit", "error": judging.describe(e)}
    except (SyntaxError, ValueError, OverflowError, RecursionError) as e:
        return None, {}, {"load": "syntax_error", "error": judging.describe(e)}
    namespace: dict = {"__name__": "__submission__", "__builtins__": builtins}
    budget.arm()
    try:
        exec(compiled, namespace)
    except BaseException as e:
        budget.disarm()
        return None, {}, {"load": _kind(e), "error": judging.describe(e)}
    budget.disarm()
    fn = namespace.get(entry_point)
    if not callable(fn):
        return None, {}, {"load": "runtime_error", "error": f"no function named {entry_point!r} is defined"}
    return fn, namespace, {"load": "ok"}


def _call(fn: object, args: list, kwargs: dict, budget: _Budget) -> dict:
    if not budget.arm():
        return {"ok": False, "kind": "timeout", "error": "the submission's CPU time is used up"}
    try:
        value = fn(*args, **kwargs)  # type: ignore[operator]
        cpu = budget.disarm()
        # Serialised here, once: e.g. an int too long to print fails now, as this call's error.
        encoded = json.dumps(codec.encode(value), separators=(",", ":"))
    except (codec.EncodeError, ValueError, OverflowError) as e:
        budget.disarm()
        return {"ok": False, "kind": "runtime_error", "error": f"result cannot be returned: {e}"[:300]}
    except BaseException as e:
        budget.disarm()
        return {"ok": False, "kind": _kind(e), "error": judging.describe(e), "exc": type(e).__name__}
    return {"ok": True, "value": _Raw(encoded), "cpu": round(cpu, 6)}


class _Raw(str):
    """Already-serialised JSON, spliced into a message as it is."""


def _send_result(fd: int, result: dict) -> None:
    raw = result.pop("value", None)
    text = json.dumps(result, separators=(",", ":"))
    if raw is not None:
        text = text[:-1] + ',"value":' + raw + "}"
    view = memoryview((text + "\n").encode())
    while view:
        view = view[os.write(fd, view) :]


def candidate_io(job: dict, out_fd: int) -> None:
    """Run the submission on each input in turn, one result line per call.

    A replayed job (assert-style tests the parent runs over the answers: judging.py) has its
    arguments codec-encoded, as the judge's calls are, and stops at a call that ran out of time
    or memory, after which the judge would have called no more."""
    budget = _Budget(job["limits"])
    fn, _, status = _load(job["code"], job["entry_point"], budget)
    send_line(out_fd, status)
    if fn is None:
        return
    replay = bool(job.get("replay"))
    for i, args in enumerate(job["calls"]):
        result = _call(fn, codec.decode(args) if replay else args, {}, budget)
        _send_result(out_fd, dict(result, i=i))
        if replay and result.get("kind") in ("timeout", "memory_limit"):
            break
    send_line(out_fd, {"done": True})


def candidate_rpc(job: dict, sock_fd: int) -> None:
    """Answer the judge's calls: each request carries arguments, each reply a value or an error."""
    budget = _Budget(job["limits"])
    fn, namespace, status = _load(job["code"], job["entry_point"], budget)
    send_line(sock_fd, status)
    if fn is None:
        return
    classes = {k: v for k, v in namespace.items() if isinstance(v, type)}
    reader = LineReader(sock_fd)
    while True:
        try:
            request = reader.read(None)
        except ValueError:
            return
        if not isinstance(request, dict):
            return
        try:
            args = codec.decode(request["args"], allow_objects=True, classes=classes)
            kwargs = codec.decode(request["kwargs"], allow_objects=True, classes=classes)
        except Exception as e:
            send_line(sock_fd, {"ok": False, "kind": "runtime_error", "error": f"bad arguments: {e}"[:300]})
            continue
        _send_result(sock_fd, _call(fn, list(args), dict(kwargs), budget))


# ------------------------------------------------------------------ the judge (trusted test code)


class CandidateStub(judging.Stub):
    """The candidate inside the test code: every call is an RPC to its process."""

    def __init__(self, fd: int, reader: LineReader, wall_timeout: float) -> None:
        super().__init__()
        self.fd, self.reader, self.wall_timeout = fd, reader, wall_timeout

    def _exchange(self, args: tuple, kwargs: dict) -> object:
        try:
            request = {
                "args": codec.encode(list(args), allow_objects=True),
                "kwargs": codec.encode(kwargs, allow_objects=True),
            }
            send_line(self.fd, request)
            return self.reader.read(self.wall_timeout)
        except (OSError, ValueError, codec.EncodeError) as e:
            raise self._fail(f"candidate connection failed: {e}") from None

    def _no_reply(self) -> str:
        return "candidate exited" if self.reader.eof else "timeout"


def judge_loop(channel: int) -> None:
    """The judge process of a slot: forked once, it runs one job's test code at a time.

    Each job arrives as a JSON line with the candidate's socket attached (SCM_RIGHTS); the answer
    goes back as one line. Test code runs in a fresh namespace per job (judging.run_tests).
    """
    sock = socket.socket(fileno=channel)
    buf, fds = b"", []
    while True:
        msg, got, _, _ = socket.recv_fds(sock, 1 << 20, 2)
        if not msg:
            return
        buf, fds = buf + msg, fds + got
        if not buf.endswith(b"\n"):
            continue
        job = json.loads(buf)
        try:
            job.update(_read_tests(fds[1]))
            report = judge(job, fds[0])
        finally:
            for fd in fds:
                os.close(fd)
        buf, fds = b"", []
        send_line(channel, report)


def _read_tests(fd: int) -> dict:
    """The test code and prelude, from the memory file the parent wrote them to."""
    chunks = []
    while chunk := os.pread(fd, 1 << 20, sum(map(len, chunks))):
        chunks.append(chunk)
    return json.loads(b"".join(chunks))


def judge(job: dict, sock_fd: int) -> dict:
    """Run the trusted test code against the candidate; return how many tests passed."""
    limits = job["limits"]
    wall = limits["call_timeout"] * limits["wall_factor"] + 1.0
    reader = LineReader(sock_fd, limits["result_mb"] << 20)
    try:
        status = reader.read(wall)
    except ValueError:
        status = {"load": "runtime_error", "error": "candidate sent garbage"}
    if status is None:
        status = (
            {"load": "runtime_error", "error": "candidate exited while loading"}
            if reader.eof
            else {"load": "timeout", "error": "loading took too long"}
        )
    failed = judging.load_failure(status)
    if failed is not None:
        return failed
    stub = CandidateStub(sock_fd, reader, wall)
    return judging.run_tests(job["test_code"], job["entry_point"], stub, job.get("prelude") or "")


# ------------------------------------------------------------------ one job


def _fork(fn, *args) -> int:  # type: ignore[no-untyped-def]
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn(*args)
        except BaseException:
            code = 70
            with contextlib.suppress(BaseException):
                traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def _reap(pid: int) -> dict:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return {"code": None, "signal": None}
    if os.WIFSIGNALED(status):
        return {"code": None, "signal": os.WTERMSIG(status)}
    return {"code": os.WEXITSTATUS(status), "signal": None}


def _kill(pid: int) -> None:
    # The candidate is init of its pid namespace: killing it kills everything it started, even
    # processes that left its session. Without namespaces, its process group goes with it here,
    # and whatever left the group with _kill_orphans.
    for kill in (os.kill, os.killpg):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)


def _remove(path: str) -> None:
    """Remove what a job left in its directory (every process of the job is dead by then).

    Without root, a directory the submission took its own access to (chmod 0) would stop
    rmtree, and the next job could give itself access back and read what was left: access is
    given back first, directory by directory, never through a link (a link to the caller's own
    files would have them changed)."""
    if os.path.islink(path) or not os.path.isdir(path):
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    for top, dirs, _ in os.walk(path):  # top-down: each directory opened up before it is entered
        for name in dirs:
            sub = os.path.join(top, name)
            if not os.path.islink(sub):
                with contextlib.suppress(OSError):
                    os.chmod(sub, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def _children() -> set[int]:
    """The monitor's child processes."""
    pids: set[int] = set()
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                pids.update(int(p) for p in f.read().split())
    except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN
        return _children_by_parent()
    return pids


def _children_by_parent() -> set[int]:
    """_children, read from every process's parent (slower)."""
    me, pids = os.getpid(), set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as f:
            if int(f.read().rsplit(")", 1)[1].split()[1]) == me:  # field 4, the parent, after the name
                pids.add(int(entry))
    return pids


def _kill_orphans(keep: int) -> None:
    """Without namespaces: kill every process a job left behind. The monitor is their subreaper
    (see configure): a daemon that left the submission's session is re-parented to it, not to
    init, when its parent dies. Repeated, since one may fork while it is being killed."""
    for _ in range(1000):
        orphans = _children() - {keep}
        if not orphans:
            return
        for pid in orphans:
            _kill(pid)
            _reap(pid)


def run_job(job: dict, cfg: dict, tests_fd: int = -1) -> dict:
    """Run one job. For assert-style tests, `tests_fd` is a memory file the parent wrote the test
    code to: it goes to the judge unread, so the tests (and their expected values) are never in
    this process's memory, which every candidate is a copy of."""
    start = time.monotonic()
    limits, mode = job["limits"], job["mode"]
    if not cfg["namespaces"] and not cfg["root"]:
        # RLIMIT_NPROC counts every thread of the caller's uid here (no user namespace of its own
        # to count in): a limit of 16 would leave a desktop user's submission no thread at all.
        # The count is at most half a second old; the slack covers what the caller starts since.
        limits = {**limits, "nproc": limits["nproc"] + _caller_threads() + NPROC_SLACK}
    uid = cfg["uid"]
    workdir = NAMESPACED_WORKDIR
    if not cfg["namespaces"]:  # weak mode: a private directory on disk, removed afterwards
        workdir = tempfile.mkdtemp(dir=cfg["slot_dir"])
        if uid is not None:
            os.chown(workdir, uid, uid)
        submission_environment(workdir)
    out_r, out_w = os.pipe()
    if mode == "assert":
        judge_end, channel = (s.detach() for s in socket.socketpair())
        judge_chan = cfg["judge"].channel
        data = json.dumps(job, separators=(",", ":")).encode() + b"\n"
        # The socket and the tests' memory file ride on the first byte.
        socket.send_fds(judge_chan, [data[:1]], [judge_end, tests_fd])
        judge_chan.sendall(data[1:])
        os.close(judge_end)
        os.close(tests_fd)
        res_r = os.dup(judge_chan.fileno())  # the judge's answer arrives here
    else:
        res_r, channel = os.pipe()

    def run_candidate() -> None:
        _keep_only_fds(
            [
                channel,
                out_w,
                cfg["slot_netns"],
                cfg["mount_template"],
                cfg["landlock_ruleset"],
                *cfg["path_handles"].values(),
            ]
        )
        _redirect_stdio(out_w)
        isolate(cfg, limits, uid, workdir)
        (candidate_io if mode == "io" else candidate_rpc)(job, channel)

    if cfg["namespaces"]:
        unshare(CLONE_NEWPID)  # the candidate becomes init of a pid namespace of its own...
    try:
        cand_pid = _fork(run_candidate)
    finally:
        if cfg["namespaces"]:
            setns(cfg["own_pid_ns"], CLONE_NEWPID)  # ...and our next children are ours again
    os.close(channel)
    os.close(out_w)

    # Watch result lines, output volume, per-call progress and the wall clock. CPU time is capped
    # inside the candidate (a timer per call, RLIMIT_CPU overall); these wall-clock limits catch
    # code that sleeps or blocks, and are `wall_factor` times the CPU limits so that a busy
    # machine does not turn correct programs into timeouts.
    wall_total = limits["cpu_s"] * limits["wall_factor"] + 1.0
    wall_call = limits["call_timeout"] * limits["wall_factor"] + 1.0
    reader = LineReader(res_r, limits["result_mb"] << 20)
    messages: list = []
    output = bytearray()
    out_open, reason, finished = True, "", False
    last_progress = time.monotonic()
    while not finished:
        now = time.monotonic()
        if now - start > wall_total or (mode == "io" and now - last_progress > wall_call):
            reason = "timeout"
            break
        ready = select.select([res_r, out_r] if out_open else [res_r], [], [], 0.05)[0]
        if out_r in ready:
            chunk = os.read(out_r, 1 << 16)
            if not chunk:
                out_open = False
            elif len(output) + len(chunk) > limits["output_bytes"]:
                reason = "output_limit"
                break
            else:
                output += chunk
        if res_r in ready:
            try:
                reader.fill()
            except ValueError:
                reason = "result_limit"
                break
        try:
            while (msg := reader.pop()) is not None:
                messages.append(msg)
                last_progress = time.monotonic()
                if mode == "assert" or (
                    isinstance(msg, dict) and (msg.get("done") or msg.get("load", "ok") != "ok")
                ):
                    finished = True
                    break
        except ValueError:
            reason = "protocol"
            break
        if reader.eof and not finished:
            break
    _kill(cand_pid)
    exit_info = _reap(cand_pid)
    if not cfg["namespaces"]:
        _kill_orphans(keep=cfg["judge"].pid)
    judge_exit = None
    if mode == "assert" and not finished:
        # The judge did not answer in time (or its channel broke): it may still be running the
        # tests. Start a fresh one; the report says the candidate's fate, as usual.
        judge_exit = cfg["judge"].restart(cfg)
    os.close(res_r)
    os.close(out_r)
    if not cfg["namespaces"]:
        for name in os.listdir(cfg["slot_dir"]):  # its directory, and anything else it made there
            _remove(os.path.join(cfg["slot_dir"], name))
    return {
        "messages": messages,
        "reason": reason,
        "exit": exit_info,
        "judge_exit": judge_exit,
        "output": output[:2000].decode("utf-8", "replace"),
        "wall_s": round(time.monotonic() - start, 6),
    }


# ------------------------------------------------------------------ the monitor's start and loop


class Judge:
    """The slot's judge process (trusted test code), forked from the monitor before any job."""

    def __init__(self, cfg: dict) -> None:
        self.channel, self.pid = self._spawn(cfg)

    @staticmethod
    def _spawn(cfg: dict) -> tuple[socket.socket, int]:
        ours, theirs = socket.socketpair()

        def run() -> None:
            # The monitor's identity, so whatever the tests import loads as it would anywhere; its
            # own session; generous fixed limits (each job's time is enforced by the monitor).
            # The candidate cannot see it: they live in different pid namespaces.
            _keep_only_fds([theirs.fileno()])
            _redirect_stdio(None)
            os.setsid()
            _limit(cfg["judge_limits"], nproc=False)
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            prctl(PR_SET_DUMPABLE, 0)
            judge_loop(theirs.fileno())

        pid = _fork(run)
        theirs.close()
        return ours, pid

    def restart(self, cfg: dict) -> dict:
        with contextlib.suppress(OSError):
            self.channel.close()
        _kill(self.pid)
        status = _reap(self.pid)
        self.channel, self.pid = self._spawn(cfg)
        return status


def _enter_user_ns() -> None:
    """Non-root: become root of a new user namespace, which then owns the other namespaces."""
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER)
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _become_init_of_own_namespaces() -> None:
    """Non-root: enter a user namespace, once, and continue as init of a pid namespace it owns.

    Every job's namespaces are then created inside it; and after each candidate the monitor may
    setns() back to its own pid namespace, which needs privilege over that namespace's owner.
    The process that started us stays behind as a thin wrapper that exits as we do.
    """
    _enter_user_ns()
    unshare(CLONE_NEWPID)
    pid = os.fork()
    if pid:
        _keep_only_fds([])  # the channel belongs to the monitor alone: EOF must reach it
        _, status = os.waitpid(pid, 0)
        os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # if the wrapper is killed, so are we


def _succeeds_in_child(probe: Callable[[], None]) -> bool:
    """Whether `probe` returns without raising in a forked child (so that what it changes, a
    namespace entered, a filter installed, dies with the child). Tried once, at start."""
    pid = os.fork()
    if pid == 0:
        try:
            probe()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _probe_namespaces(root: bool) -> bool:
    """Can a child create the namespaces we need?"""

    def probe() -> None:
        if not root:
            _enter_user_ns()
        unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID)
        mount(None, "/", None, MS_REC | MS_PRIVATE)

    return _succeeds_in_child(probe)


def _probe_syscall_filter(shared_host: bool) -> syscall_filter.Filter | None:
    """The seccomp filter, if this architecture has one and the kernel accepts it.
    `shared_host`: for submissions without namespaces (see syscall_filter)."""
    sieve = syscall_filter.for_this_machine(shared_host)
    if sieve is None:
        return None

    def probe() -> None:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        sieve.install()

    return sieve if _succeeds_in_child(probe) else None


def _weak_mode_landlock(cfg: dict) -> tuple[landlock_rules.Rules | None, int]:
    """Without namespaces: Landlock rules and the slot's ruleset (a descriptor every candidate
    restricts itself with), if the kernel has Landlock and takes them. What a submission may
    read is what it would see with namespaces (_system_and_interpreter_dirs)."""
    rules = landlock_rules.for_this_kernel()
    if rules is None:
        return None, -1
    try:
        ruleset = rules.ruleset(cfg["slot_dir"], _system_and_interpreter_dirs())
    except OSError:
        return None, -1

    def probe() -> None:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        landlock_rules.restrict_self(ruleset)

    if _succeeds_in_child(probe):
        return rules, ruleset
    os.close(ruleset)
    return None, -1


def _outermost(paths: set[str]) -> list[str]:
    """`paths` less those inside another of them, sorted."""
    return sorted(p for p in paths if not any(_is_within(p, q) for q in paths if q != p))


def _caller_private_dirs(candidates: list[str]) -> list[str]:
    """The caller's home and runtime directories, to hide from submissions that run as the
    caller's uid (without root): existing directories other than "/", outermost only."""
    return _outermost({os.path.realpath(d) for d in candidates if d and os.path.isdir(d)} - {"/"})


def _python_paths() -> list[str]:
    """Every directory the interpreter imports from (its prefixes and sys.path), resolved,
    outermost only: what the host-tree view and the weaker mode must keep reachable."""
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path]
    return _outermost({os.path.realpath(p) for p in candidates if p and os.path.isdir(p)})


def _interpreter_dirs() -> list[str]:
    """The interpreter's own directories: its prefixes (a venv's, and the installation it was
    made from) and its library paths, each as spelled and as resolved, for imports look them up
    as spelled. Not its other sys.path entries, such as an editable install's project directory:
    a submission needs the standard library and installed packages, not the project."""
    spelled = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    spelled |= {sysconfig.get_path(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return _outermost(
        {p for s in spelled if s and os.path.isdir(s) for p in (os.path.abspath(s), os.path.realpath(s))}
    )


def _system_and_interpreter_dirs() -> list[str]:
    """All of the host's tree a submission may see or read: SYSTEM_DIRS and _interpreter_dirs."""
    system = {d for d in SYSTEM_DIRS if os.path.lexists(d)}
    return _outermost(system | {d for d in _interpreter_dirs() if not any(_is_within(d, s) for s in system)})


def _blocked_dirs(paths: list[str]) -> list[str]:
    """Topmost directories above the interpreter's paths that other users cannot enter."""
    tops = set()
    for p in paths:
        cur = ""
        for part in os.path.abspath(p).split(os.sep)[1:]:
            cur += os.sep + part
            if cur != p and not os.stat(cur).st_mode & 0o001:
                tops.add(cur)
                break
    return sorted(tops)


def configure(settings: dict) -> tuple[dict, str]:
    root = os.geteuid() == 0
    namespaces = bool(settings.get("namespaces", True)) and _probe_namespaces(root)
    if namespaces and not root:
        _become_init_of_own_namespaces()
    paths = _python_paths()
    # The caller's home and runtime directories, hidden from submissions that run as its uid.
    private = [] if root else _caller_private_dirs(settings.get("private_dirs", []))
    cfg = {
        "root": root,
        "namespaces": namespaces,
        # Started as root, the pool claims a uid no other slot on the machine uses (pool.py: _UidClaims).
        "uid": int(settings["uid"]) if root else None,
        "fallback_tmp": settings.get("fallback_tmp") or tempfile.gettempdir(),
        "python_paths": paths,
        # Covered by an empty tmpfs in the template, the interpreter's paths inside bound back:
        # as root, what the slot's uid could not enter anyway; without root, the caller's home
        # directory (keys, tokens: everything the caller's own uid could otherwise read).
        "blocked_dirs": _blocked_dirs(paths) if root else (private if namespaces else []),
        "scratch_dirs": [d for d in SCRATCH_DIRS if os.path.isdir(d) and not os.path.islink(d)],
        # Some containers and VMs have a plain file there, not the device (see isolate).
        "null_is_a_file": not stat.S_ISCHR(os.stat(os.devnull).st_mode),
        "own_pid_ns": os.open("/proc/self/ns/pid", os.O_RDONLY) if namespaces else -1,
        # Reused across jobs only as root: an unprivileged candidate cannot change anything in it,
        # and every process of the previous job is dead before the slot runs the next one. In a
        # user namespace the candidate would own it, so there each job gets a fresh one.
        "slot_netns": _slot_netns() if namespaces and root else -1,
        "judge_limits": {"memory_mb": 4096, "cpu_s": 10**6, "disk_mb": 64, "nproc": 64},
        "syscall_filter": (
            _probe_syscall_filter(shared_host=not namespaces)
            if settings.get("syscall_filter", True)
            else None
        ),
    }
    # Only the system's and the interpreter's directories in a submission's view of the tree.
    cfg["visible_dirs"] = (
        _system_and_interpreter_dirs() if namespaces and syscall_filter.number("pivot_root") else []
    )  # left empty where this machine's pivot_root number is not known here (_mount_template)
    cfg["python_under_scratch"] = [
        p for p in cfg["visible_dirs"] or paths if any(_is_within(p, d) for d in cfg["scratch_dirs"])
    ]  # bound back over each job's scratch tmpfs (isolate)
    cfg["mount_template"] = _mount_template(cfg) if namespaces else -1
    cfg["slot_dir"], cfg["landlock"], cfg["landlock_ruleset"] = None, None, -1
    if not namespaces:
        # Each job's directory is made in this one, and whatever a job leaves in it removed after
        # it; Landlock lets candidates write here only (the slot's uid may pass through, as root).
        cfg["slot_dir"] = tempfile.mkdtemp(prefix="axiom-sbx-", dir=cfg["fallback_tmp"])
        if root:
            os.chmod(cfg["slot_dir"], 0o711)
        # Nothing makes the tree read-only or hides the host's processes: Landlock instead.
        cfg["landlock"], cfg["landlock_ruleset"] = _weak_mode_landlock(cfg)
    # Without namespaces nothing can be bound back: the candidate reaches what it may not enter
    # through handles opened here (see _reach_through_handles).
    cfg["path_handles"] = (
        {
            p: os.open(p, os.O_PATH | os.O_DIRECTORY)
            for p in paths
            if any(_is_within(p, top) for top in cfg["blocked_dirs"])
        }
        if not namespaces
        else {}
    )
    cfg["judge"] = Judge(cfg)
    if not namespaces:  # what a job's processes leave behind comes back to us (_kill_orphans)
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    return cfg, _isolation_summary(cfg, settings)


def _isolation_summary(cfg: dict, settings: dict) -> str:
    """One line for `Sandbox.isolation`: what holds a submission on this machine, and what does not."""
    if cfg["root"]:
        who = "an unprivileged uid per worker"
    elif cfg["namespaces"]:
        who = (
            "the caller's uid (user namespace), its home hidden"
            if cfg["blocked_dirs"]
            else "the caller's uid (user namespace)"
        )
    else:
        who = "the caller's uid"
    if cfg["syscall_filter"]:
        filtered = "a seccomp filter"
    elif not settings.get("syscall_filter", True):
        filtered = "no seccomp filter (switched off)"
    else:
        filtered = f"no seccomp filter ({'the kernel refused it' if syscall_filter.program() else 'none for this CPU'})"
    if cfg["namespaces"]:
        files = "only the system's and the interpreter's files" if cfg["visible_dirs"] else "the host's files"
        return f"namespaces (pid, net, mount, ipc), {files} (read-only) and a private tmpfs, {who}, rlimits, {filtered}"
    why = "the kernel refused" if settings.get("namespaces", True) else "switched off"
    landlock = (
        cfg["landlock"].describe()
        if cfg["landlock"]
        else "no Landlock (files its uid may write are writable)"
    )
    return f"WEAKER: no namespaces ({why}); {who}, rlimits, {filtered}, {landlock}, audit hooks"


def main() -> None:
    channel = int(sys.argv[1])
    settings = json.loads(sys.argv[2])
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            __import__(name)
    cfg, mode = configure(settings)
    submission_environment(NAMESPACED_WORKDIR)  # every job's, with namespaces
    # Everything loaded so far is shared with every fork: keep the collector off those pages.
    gc.collect()
    gc.freeze()
    send_line(channel, {"ready": True, "isolation": mode, "namespaces": cfg["namespaces"]})
    jobs = LineReader(channel, 1 << 30, take_fds=True)
    try:
        while True:
            try:
                job = jobs.read(None)
            except ValueError:
                break
            if job is None:
                break  # the parent went away
            fds = jobs.take_fds()
            if job.get("mode") == "assert":
                if len(fds) != 1:
                    break  # the parent sends each one's tests: it will replace a slot that quits
                send_line(channel, run_job(job, cfg, fds[0]))
            else:
                for fd in fds:
                    os.close(fd)
                send_line(channel, run_job(job, cfg))
    finally:
        if cfg["slot_dir"]:
            _remove(cfg["slot_dir"])


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        main()
