"""Isolating a candidate: the kernel's namespaces, mounts, limits and filters around each fork,
and what the monitor prepares once so that each fork pays only for what must be fresh.

- `isolate` makes a freshly forked process a sandboxed one (see the policy in __init__.py);
- the slot's templates (a network namespace, a mount tree) are made once and entered or copied;
- the probes find out, once at start, what this kernel allows (namespaces, the seccomp filter,
  Landlock), and the directory helpers what of the host's tree a submission may see.

Thin ctypes wrappers for the system calls Python's os module lacks. Stdlib only.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import resource
import signal
import socket
import struct
import sys
import sysconfig
import time
import traceback
from collections.abc import Callable

import landlock_rules
import syscall_filter

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
# Where the interpreter's directories that lie under a scratch directory appear in the view of the
# tree (see moved_python_dirs): one numbered directory each.
MOVED_PYTHON_ROOT = "/.python"
# The package this module belongs to: two levels up (axiom_rl/sandbox/isolation.py).
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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


def isolate(cfg: dict, limits: dict, uid: int | None, workdir: str, fresh_mounts: bool = True) -> None:
    """Make the calling, freshly forked process a sandboxed one (it is init of a new pid
    namespace when namespaces are on).

    `fresh_mounts` False (see uses_slot_scratch): the candidate enters the slot's template mount
    namespace itself, whose scratch directories the slot's forker empties after each job,
    instead of a copy of it with scratch tmpfs mounts and a /proc of its own."""
    os.setsid()
    if cfg["namespaces"]:
        # No IPC namespace where the seccomp filter refuses all it holds (syscall_filter.DENIED_IPC).
        flags = (CLONE_NEWNS if fresh_mounts else 0) | (0 if cfg["syscall_filter"] else CLONE_NEWIPC)
        if cfg["slot_netns"] >= 0:
            setns(cfg["slot_netns"], CLONE_NEWNET)  # the slot's empty network namespace (root mode)
            os.close(cfg["slot_netns"])
        else:
            flags |= CLONE_NEWNET
        # The slot's prepared mount tree (see mount_template): private, and with the interpreter
        # reachable. With fresh mounts a copy of it, in which what follows mounts only what must
        # be fresh for every job.
        setns(cfg["mount_template"], CLONE_NEWNS)
        os.close(cfg["mount_template"])
        if flags:
            unshare(flags)
    if cfg["namespaces"] and fresh_mounts:
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # shows only our processes
        # O_PATH handles on interpreter directories the scratch mounts would cover (a venv in
        # /tmp, say), taken before they are covered, to bind them back.
        handles = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in cfg["python_under_scratch"]}
        for d in cfg["scratch_dirs"]:
            mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, scratch_options(limits["disk_mb"]))
        for path, fd in handles.items():
            _bind_read_only(fd, path)
        if cfg["null_is_a_file"] and cfg["scratch_dirs"]:
            _own_dev_null(cfg["scratch_dirs"])
    apply_limits(limits, nproc=uid is not None or not cfg["root"])
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
        reach_through_handles(cfg["path_handles"])
        _install_audit_guard(cfg["hidden_dirs"])


def submission_environment(workdir: str) -> None:
    """Make the monitor's environment exactly what a submission gets, so that each forked
    candidate inherits it as it is. Done in the monitor, once (or per job without namespaces,
    where the directory changes), because in a fresh fork the same few dictionary operations
    cost about 0.25 ms: every page they touch is copied on write there."""
    os.environ.clear()
    os.environ.update(
        {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
    )
    # One thread for the numerical libraries a submission may import: it has one CPU, and a
    # thread per core of the machine would run into its process limit (Limits.nproc).
    os.environ.update(dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1"))


def scratch_options(disk_mb: int) -> str:
    """A scratch tmpfs's mount options: `disk_mb` of space, a bounded number of files."""
    return f"size={disk_mb}m,nr_inodes=4096,mode=1777"


def uses_slot_scratch(cfg: dict, limits: dict) -> bool:
    """Whether a job runs in the slot's template mount namespace itself, on the slot's scratch
    tmpfs mounts (emptied after each job: empty_slot_scratch), rather than in a fresh copy with
    mounts of its own. A job's mount namespace with any mount in it cost about 0.4 ms of the
    machine's CPU a job (its set-up and teardown), 11% of HumanEval's throughput. Only where the
    slot has them (root mode: see mount_template) and the job's disk limit is the one they were
    made with."""
    return bool(cfg["slot_scratch"]) and limits["disk_mb"] == cfg["slot_scratch_mb"]


def empty_slot_scratch(fds: list[int]) -> bool:
    """Remove everything in the slot's scratch directories (open as `fds`) once a job's processes
    are all dead, and reset the directories' times, which the job could set by making files: the
    next job finds them as the first did. As root, no permission a submission set can stop it
    (immutable flags need a capability it does not have). False if anything was left (the
    caller then stops using them)."""
    clean = True
    for top in fds:
        if os.fstat(top).st_mtime_ns == 0:
            continue  # untouched: an entry made or removed would have set its time to now
        clean = empty_directory(top) and clean
        try:
            os.utime(top, ns=(0, 0))
        except OSError:
            clean = False
    return clean


def empty_directory(top: int) -> bool:
    """Remove what is inside the directory open as `top`, once every process that could write
    there is dead: a job's scratch directories, its directory in weak mode. Iteratively, so that
    no depth of directories exhausts the stack (a recursive walk hit Python's limit on a tree
    1,000 deep and took the monitor down), and never through a link (a link to the caller's own
    files would have them changed). Each subdirectory is given its access back before it is
    entered: without root, one the submission closed to itself (chmod 0) would stop the removal,
    and the next job could open it again and read what was left. False if anything stayed."""
    entered: list[tuple[int, str]] = []  # the subdirectories being emptied: (descriptor, name)
    try:
        while True:
            fd = entered[-1][0] if entered else top
            sub = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):  # (no process left to swap it for a link)
                        os.chmod(entry.name, 0o700, dir_fd=fd)
                        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                        sub = (os.open(entry.name, flags, dir_fd=fd), entry.name)
                        break
                    os.unlink(entry.name, dir_fd=fd)
            if sub is not None:
                entered.append(sub)
                continue
            if not entered:
                return True
            fd, name = entered.pop()
            os.close(fd)
            os.rmdir(name, dir_fd=entered[-1][0] if entered else top)
    except OSError:
        for fd, _ in entered:
            os.close(fd)
        return False


def _own_dev_null(scratch_dirs: list[str]) -> None:
    """Where the host's /dev/null is a plain file (some containers and VMs), give this job one of
    its own in its scratch space: the template's, read-only, would refuse writes, and a writable
    one there would carry data from one job to the next."""
    shm = [d for d in scratch_dirs if d == "/dev/shm"]  # out of sight of /tmp's listing
    null = os.path.join((shm or scratch_dirs)[0], ".null")
    os.close(os.open(null, os.O_CREAT | os.O_WRONLY, 0o666))
    os.chmod(null, 0o666)  # past the umask: the submission's uid writes it
    mount(null, "/dev/null", None, MS_BIND)


def reach_through_handles(handles: dict[str, int]) -> None:
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
            if is_within(entry, path):
                sys.path[i] = f"/proc/self/fd/{fd}{entry[len(path) :]}"
                break
    sys.path_importer_cache.clear()


def is_within(path: str, directory: str) -> bool:
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
    places outside the scratch directories. The scratch directories (and /proc) are mounted
    writable over this tree: for each job, or once in the template (mount_template)."""
    attr = struct.pack("=QQQQ", MOUNT_ATTR_RDONLY, 0, 0, 0)  # struct mount_attr: set, clear, ...
    if _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, attr, len(attr)) == 0:
        return
    if ctypes.get_errno() not in (errno.ENOSYS, errno.EINVAL):
        _check(-1, "mount_setattr /")
    read_only_mounts_one_by_one()


def read_only_mounts_one_by_one() -> None:
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


def _prepared_namespace(
    flag: int, kind: str, prepare: Callable[[], list[int]] | None = None, descriptors: int = 0
) -> tuple[int, list[int]]:
    """A namespace made once per slot by a helper child (unshare, then `prepare` inside it), which
    candidates then enter or copy. Returns a file descriptor on it (kept open by the monitor, it
    keeps the namespace alive after the helper has exited) and the `descriptors` that `prepare`
    opened inside it."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            ours.close()
            unshare(flag)
            namespace = os.open(f"/proc/self/ns/{kind}", os.O_RDONLY)  # (prepare may take /proc away)
            opened = prepare() if prepare is not None else []
            socket.send_fds(theirs, [b"x"], [namespace, *opened])
            os._exit(0)
        except BaseException:
            with contextlib.suppress(BaseException):
                traceback.print_exc()
            os._exit(1)
    theirs.close()
    _, fds, _, _ = socket.recv_fds(ours, 1, 1 + descriptors)
    ours.close()
    _, status = os.waitpid(pid, 0)
    if len(fds) != 1 + descriptors or not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        raise OSError(f"could not prepare the sandbox's {kind} namespace")
    return fds[0], fds[1:]


def slot_netns() -> int:
    """An empty network namespace for this slot's candidates, created once (root mode)."""
    return _prepared_namespace(CLONE_NEWNET, "net")[0]


def mount_template(cfg: dict) -> tuple[int, list[int]]:
    """A mount namespace prepared once per slot, which every candidate copies or enters: recursively
    private (nothing mounted in a copy propagates to the host), read-only throughout, with a /dev
    of its own, and holding only SYSTEM_DIRS and the interpreter's directories (_visible_root).
    Where this machine's pivot_root number is not known here, the host's whole tree instead, with
    the directories an unprivileged uid cannot enter (e.g. /root, where pyenv lives) covered by an
    empty tmpfs and the interpreter bound back. Doing this once instead of per job saves about
    half a millisecond of every verification. A candidate cannot change the template: the
    template's mounts are root's and read-only to it, and it can mount nothing (no capability, and
    the system-call filter).

    With `cfg["slot_scratch_mb"]` (root mode: see server.configure) the template also holds the
    slot's own scratch tmpfs mounts, writable, which candidates use in place of fresh ones (see
    uses_slot_scratch), and no /proc: the host's would show every process on the machine, and a
    /proc of each job's own processes would be a mount per job. Returns the template and, then,
    the scratch directories opened (for empty_slot_scratch)."""
    slot_scratch = cfg["slot_scratch_mb"] > 0

    def prepare() -> list[int]:
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        if cfg["visible_dirs"]:
            _visible_root(cfg["visible_dirs"], cfg["scratch_dirs"], cfg["moved_python"])
        else:
            cover_blocked_dirs(cfg["blocked_dirs"], cfg["python_paths"])
        for path in cfg["hidden_dirs"]:
            hidden = cfg["moved_python"].get(path, path)  # (inside a moved directory: moved too)
            for old, new in cfg["moved_python"].items():
                if is_within(path, old):
                    hidden = new + path[len(old) :]
            mount("tmpfs", hidden, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=4k,nr_inodes=2")
        _minimal_dev(cfg["scratch_dirs"], proc_links=not slot_scratch)
        if slot_scratch:
            _check(_libc.umount2(b"/proc", MNT_DETACH), "detaching /proc")  # an empty directory now
        _read_only_tree()
        opened = []
        for d in cfg["scratch_dirs"] if slot_scratch else ():
            mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, scratch_options(cfg["slot_scratch_mb"]))
            opened.append(os.open(d, os.O_RDONLY | os.O_DIRECTORY))
            os.utime(opened[-1], ns=(0, 0))  # as empty_slot_scratch leaves them after each job
        return opened

    descriptors = len(cfg["scratch_dirs"]) if slot_scratch else 0
    return _prepared_namespace(CLONE_NEWNS, "mnt", prepare, descriptors)


def _visible_root(visible: list[str], mount_points: list[str], moved: dict[str, str]) -> None:
    """Make this mount namespace's root a tmpfs that holds `visible` alone, each bound from the
    host's tree with whatever is mounted under it (a top-level symbolic link such as /bin ->
    usr/bin is copied as a link), and empty directories at `mount_points`; then detach the host's
    root. A submission that knows where a problem file or a run's outputs are still finds
    nothing there: permissions would not stop it, since such files are usually world-readable
    (and, without root, it runs as their owner). A directory of `visible` that `moved` names is
    bound at the path it maps to instead of its own (see moved_python_dirs)."""
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
        target = staging + moved.get(path, path)
        os.makedirs(target, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        os.close(fd)
    for path in mount_points:  # those inside a bound directory are made there later (/dev/shm)
        if not any(is_within(path, top) for top in handles):
            os.makedirs(staging + path, exist_ok=True)
    os.chdir(staging)
    # pivot_root(".", "."): the new root goes under the old one, which is then detached.
    _check(_libc.syscall(syscall_filter.number("pivot_root"), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detaching the host's root")
    os.chdir("/")


def cover_blocked_dirs(blocked: list[str], python_paths: list[str]) -> None:
    """The host's tree, with each of `blocked` covered by an empty tmpfs and the interpreter's
    paths inside bound back (where _visible_root cannot be used)."""
    handles = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in python_paths}
    for top in blocked:
        mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=64k")
    for path, fd in handles.items():
        if any(is_within(path, top) for top in blocked):
            _bind_read_only(fd, path)
        else:
            os.close(fd)


def _minimal_dev(scratch_dirs: list[str], proc_links: bool = True) -> None:
    """Cover /dev with a tmpfs that holds only DEVICES, bound from the host's, the usual links
    (`proc_links`: they lead into /proc, and are left out where there is none), and mount points
    for the scratch directories under it.

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
    for link, target in DEVICE_LINKS if proc_links else ():
        os.symlink(target, f"/dev/{link}")
    for path in scratch_dirs:
        if is_within(path, "/dev"):
            os.makedirs(path, exist_ok=True)


# Without root or namespaces: what RLIMIT_NPROC allows a submission beyond the caller's threads.
NPROC_SLACK = 64
_thread_count: tuple[float, int] = (-1.0, 0)  # (when, how many): see caller_threads


def caller_threads(max_age: float = 0.5) -> int:
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


def apply_limits(limits: dict, nproc: bool) -> None:
    mb = limits["memory_mb"] << 20
    cpu = int(limits["cpu_s"]) + 1
    for res, value in (
        (resource.RLIMIT_AS, (mb, mb)),
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_FSIZE, ((limits["disk_mb"] << 20),) * 2),
        (resource.RLIMIT_NOFILE, (256, 256)),
        # 1, not 0: the kernel writes no core file under a page, and where the host's core
        # pattern pipes to a program it ignores RLIMIT_CORE, but for 1 (its mark for a crash
        # of the core handler itself). The seccomp filter keeps the submission from changing it.
        (resource.RLIMIT_CORE, (1, 1)),
    ):
        resource.setrlimit(res, value)
    if nproc:
        # NPROC counts per uid (root is exempt): with a uid per slot it caps this submission alone.
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["nproc"], limits["nproc"]))


def _install_audit_guard(hidden: list[str]) -> None:
    """Weak mode only: refuse sockets, new programs and ctypes from Python code, and opening files
    in `hidden` (axiom-rl's own directories, which Landlock cannot take out of the interpreter's
    that it lets a submission read).

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
        if event == "open" and isinstance(args[0], (str, bytes)):
            path = os.path.realpath(os.fsdecode(args[0]))
            if any(is_within(path, top) for top in hidden):
                raise PermissionError(f"{path} is not readable in the sandbox")

    sys.addaudithook(hook)


def keep_only_fds(keep: list[int]) -> None:
    last = 2
    for fd in sorted(keep):
        if fd > last + 1:
            os.closerange(last + 1, fd)
        last = max(last, fd)
    os.closerange(last + 1, 65536)


def redirect_stdio(out_fd: int | None) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null if out_fd is None else out_fd, 1)
    os.dup2(null if out_fd is None else out_fd, 2)
    os.close(null)


# ------------------------------------------------------------------ what this kernel allows, and what of the host a submission sees


def enter_user_ns() -> None:
    """Non-root: become root of a new user namespace, which then owns the other namespaces."""
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER)
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def become_init_of_own_namespaces() -> None:
    """Non-root: enter a user namespace, once, and continue as init of a pid namespace it owns.

    Every job's namespaces are then created inside it; and after each candidate the monitor may
    setns() back to its own pid namespace, which needs privilege over that namespace's owner.
    The process that started us stays behind as a thin wrapper that exits as we do.
    """
    enter_user_ns()
    unshare(CLONE_NEWPID)
    pid = os.fork()
    if pid:
        keep_only_fds([])  # the channel belongs to the monitor alone: EOF must reach it
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


def probe_namespaces(root: bool) -> bool:
    """Can a child create the namespaces we need?"""

    def probe() -> None:
        if not root:
            enter_user_ns()
        unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID)
        mount(None, "/", None, MS_REC | MS_PRIVATE)

    return _succeeds_in_child(probe)


def probe_syscall_filter(shared_host: bool) -> syscall_filter.Filter | None:
    """The seccomp filter, if this architecture has one and the kernel accepts it.
    `shared_host`: for submissions without namespaces (see syscall_filter)."""
    sieve = syscall_filter.for_this_machine(shared_host)
    if sieve is None:
        return None

    def probe() -> None:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        sieve.install()

    return sieve if _succeeds_in_child(probe) else None


def weak_mode_landlock(cfg: dict) -> tuple[landlock_rules.Rules | None, int]:
    """Without namespaces: Landlock rules and the slot's ruleset (a descriptor every candidate
    restricts itself with), if the kernel has Landlock and takes them. What a submission may
    read is what it would see with namespaces (system_and_interpreter_dirs)."""
    rules = landlock_rules.for_this_kernel()
    if rules is None:
        return None, -1
    try:
        ruleset = rules.ruleset(cfg["slot_dir"], system_and_interpreter_dirs())
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
    return sorted(p for p in paths if not any(is_within(p, q) for q in paths if q != p))


def caller_private_dirs(candidates: list[str]) -> list[str]:
    """The caller's home and runtime directories, to hide from submissions that run as the
    caller's uid (without root): existing directories other than "/", outermost only."""
    return _outermost({os.path.realpath(d) for d in candidates if d and os.path.isdir(d)} - {"/"})


def python_paths() -> list[str]:
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


def moved_python_dirs(under_scratch: list[str]) -> dict[str, str]:
    """Where each of the interpreter's directories that lie under a scratch directory (a venv in
    a project cloned under /tmp) appears in a submission's view: MOVED_PYTHON_ROOT/0, /1, ...

    Bound at its own path, it showed inside the submission's own /tmp, which must hold only what
    the submission writes there (and is emptied between jobs)."""
    return {path: f"{MOVED_PYTHON_ROOT}/{i}" for i, path in enumerate(under_scratch)}


def use_moved_python(moved: dict[str, str]) -> None:
    """In a candidate whose interpreter directories moved (moved_python_dirs): import from where
    they are now. The paths the interpreter was started with are rewritten; what it already
    imported stays loaded as it was."""

    def here(path: str) -> str:
        for old, new in moved.items():
            if is_within(path, old):
                return new + path[len(old) :]
        return path

    sys.path[:] = [here(p) for p in sys.path]
    for name in ("prefix", "exec_prefix", "base_prefix", "base_exec_prefix", "executable"):
        setattr(sys, name, here(getattr(sys, name)))
    sys.path_importer_cache.clear()


def package_dirs_within(visible: list[str]) -> list[str]:
    """axiom-rl's own directories that lie within `visible`: the package this sandbox runs from
    and any other copy of it on the interpreter's paths (a plain install in site-packages beside
    a checkout run from its own directory), each as spelled and as resolved, and beside each its
    installed metadata. Covered in a submission's view."""
    spelled = {PACKAGE_DIR, os.path.realpath(PACKAGE_DIR)}
    for top in {*sys.path, *(sysconfig.get_path(k) for k in ("purelib", "platlib"))}:
        copy = os.path.join(top or ".", os.path.basename(PACKAGE_DIR))
        if top and os.path.isfile(os.path.join(copy, "sandbox", "server.py")):
            spelled |= {os.path.abspath(copy), os.path.realpath(copy)}
    found = set()
    for package in spelled:
        parent = os.path.dirname(package)
        with contextlib.suppress(OSError):
            found.update(
                os.path.join(parent, name)
                for name in os.listdir(parent)
                if name.startswith(("axiom_rl-", "axiom_rl.")) and name.endswith((".dist-info", ".egg-info"))
            )
        found.add(package)
    return sorted(
        path
        for path in found
        if os.path.isdir(path) and not os.path.islink(path) and any(is_within(path, v) for v in visible)
    )


def system_and_interpreter_dirs() -> list[str]:
    """All of the host's tree a submission may see or read: SYSTEM_DIRS and _interpreter_dirs."""
    system = {d for d in SYSTEM_DIRS if os.path.lexists(d)}
    return _outermost(system | {d for d in _interpreter_dirs() if not any(is_within(d, s) for s in system)})


def blocked_dirs(paths: list[str]) -> list[str]:
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
