"""A seccomp filter for submissions: the kernel refuses them the system calls that a program
solving a task never needs and that make up most of the kernel's attack surface.

Namespaces and a uid of its own decide what a submission can *reach*; this filter decides what
it can *ask the kernel to do* at all, and it holds for native code as much as for Python (ctypes,
an extension module, a program it runs), and for every process it starts: a filter is inherited
and cannot be removed. Refused calls fail with EPERM; nothing is killed, so a program that merely
probes gets an ordinary error.

Refused:
- new namespaces (unshare, setns, clone with a CLONE_NEW* flag): unprivileged user namespaces are
  the usual first step of a kernel privilege escalation, and a submission that owns one (the
  non-root mode) could otherwise mount inside it;
- mounting and changing roots (mount, umount2, pivot_root, chroot, the new mount API);
- other processes' memory and descriptors (ptrace, process_vm_readv/writev, pidfd_getfd);
- kernel subsystems with a long record of exploitable bugs that no task needs: bpf,
  perf_event_open, userfaultfd, io_uring, the key rings (add_key, request_key, keyctl);
- administration: modules, kexec, reboot, swap, quotas, accounting, the clock, the host name,
  syslog, raw port I/O, file handles (open_by_handle_at);
- System V IPC and POSIX message queues (DENIED_IPC), so that a job needs no IPC namespace;
- new sockets (socket), of any family: no network even where namespaces are unavailable, and
  no Unix socket of the host's, which a read-only mount does not protect (a Docker daemon's,
  reachable by a caller in the docker group, is root on the host; a desktop session's bus can
  start programs). A `socketpair`, as multiprocessing and asyncio use, still works;
- on x86-64, the x32 and i386 system-call tables, which would otherwise sidestep the numbers
  checked here.

clone3 answers ENOSYS instead: its flags sit in memory that a filter cannot read, and glibc falls
back to clone (whose flags it can) for threads, fork and posix_spawn.

Written as a classic BPF program by hand (about 150 instructions: a binary search over the system
call numbers) rather than through libseccomp, so the sandbox needs no system library for it. Where the
architecture is not one listed here, or the kernel refuses filters, no filter is installed and
the sandbox's description of its isolation says so.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass

# Numbers from the kernel's uapi headers: x86_64 from asm/unistd_64.h, aarch64 from the generic
# table (asm-generic/unistd.h). tests/test_sandbox.py checks them against the headers.
DENIED: dict[str, tuple[int | None, int | None]] = {  # name: (x86_64, aarch64)
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438),
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "socket": (41, 198),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "reboot": (169, 142),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "quotactl": (179, 60),
    "quotactl_fd": (443, 443),
    "acct": (163, 89),
    "settimeofday": (164, 170),
    "clock_settime": (227, 112),
    "clock_adjtime": (305, 266),
    "adjtimex": (159, 171),
    "sethostname": (170, 161),
    "setdomainname": (171, 162),
    "syslog": (103, 116),
    "vhangup": (153, 58),
    "lookup_dcookie": (212, 18),
    "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264),
    "fanotify_init": (300, 262),
    "iopl": (172, None),
    "ioperm": (173, None),
    # Channels between jobs that run at once on different worker slots (other uids, other
    # namespaces), through files both can read: a lock on a read-only file, or a watch that
    # tells when the other opens or reads one (fcntl's locks, leases and F_NOTIFY: ARG_CHECKS).
    "flock": (73, 32),
    "inotify_init": (253, None),
    "inotify_init1": (294, 26),
    "inotify_add_watch": (254, 27),
    # Leaving the worker slot's CPU, which a job's spinning children used to starve the job
    # verified beside it; and leaving the job's session.
    "sched_setaffinity": (203, 122),
    "setsid": (112, 157),
}
# Refused too where the submission shares the host's pid space and file system (no namespaces):
# there the uid may be the caller's own, and Python audit hooks, which native code can get
# around, were all that kept it from running programs or signalling the caller's processes.
DENIED_ON_SHARED_HOST: dict[str, tuple[int | None, int | None]] = {
    "execve": (59, 221),
    "execveat": (322, 281),
    "kill": (62, 129),
    "tkill": (200, 130),
    "rt_sigqueueinfo": (129, 138),
    "pidfd_open": (434, 434),
    "pidfd_send_signal": (424, 424),
}
# System V IPC and POSIX message queues, everything an IPC namespace holds, refused everywhere:
# without a namespace of its own they are the host's, outlive the submission (state for the
# next one) and are named by guessable ids; with them refused, a job needs no IPC namespace of
# its own (one a job cost about 0.05 ms of CPU to make and tear down: isolation.isolate). The
# standard library has no interface to either.
DENIED_IPC: dict[str, tuple[int | None, int | None]] = {
    "shmget": (29, 194),
    "shmat": (30, 196),
    "shmctl": (31, 195),
    "semget": (64, 190),
    "semop": (65, 193),
    "semctl": (66, 191),
    "semtimedop": (220, 192),
    "msgget": (68, 186),
    "msgsnd": (69, 189),
    "msgrcv": (70, 188),
    "msgctl": (71, 187),
    "mq_open": (240, 180),
    "mq_unlink": (241, 181),
    "mq_timedsend": (242, 182),
    "mq_timedreceive": (243, 183),
    "mq_notify": (244, 184),
    "mq_getsetattr": (245, 185),
}
# System calls refused for some values of one argument: name -> ((x86_64, aarch64), the
# argument's index, the values refused). Its low 32 bits are compared.
F_LOCKS = (5, 6, 7, 36, 37, 38)  # F_GETLK, F_SETLK, F_SETLKW and their open-file (OFD) forms
F_SETLEASE, F_GETLEASE, F_NOTIFY = 1024, 1025, 1026
PR_SET_DUMPABLE = 4
RLIMIT_CORE = 4
ARG_CHECKS: dict[str, tuple[tuple[int | None, int | None], int, tuple[int, ...]]] = {
    "fcntl": ((72, 25), 1, (*F_LOCKS, F_SETLEASE, F_GETLEASE, F_NOTIFY)),
    # Dumpable again, a crash could write a core file where the host's core pattern pipes to a
    # program (RLIMIT_CORE does not hold a pipe back, but for the value 1 the sandbox sets, which
    # the submission may not change).
    "prctl": ((157, 167), 0, (PR_SET_DUMPABLE,)),
    "setrlimit": ((160, 164), 0, (RLIMIT_CORE,)),
    "prlimit64": ((302, 261), 1, (RLIMIT_CORE,)),
}
CHECKED_ARGS: dict[str, tuple[int, int]] = {
    "clone": (56, 220),
    "clone3": (435, 435),
    "tgkill": (234, 131),  # shared host: its own process only (raise() and abort() use it)
    "rt_tgsigqueueinfo": (297, 240),
}

_ARCH = {  # platform.machine(): (index in the tables above, AUDIT_ARCH_*)
    "x86_64": (0, 0xC000003E),
    "aarch64": (1, 0xC00000B7),
}
X32_SYSCALL_BIT = 0x40000000
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
# NS, CGROUP, UTS, IPC, USER, PID, NET (CLONE_NEWTIME, 0x80, shares its bit with CSIGNAL: not checked)

# Classic BPF, as in linux/filter.h and linux/seccomp.h.
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_NR, _ARCH_OFFSET, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (arg 0's low half, little-endian)
_ARG_SIZE = 8  # each argument is 64 bits; the low half of argument i is at _ARG0 + 8 i
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _search(keys: list[int], targets: dict[int, int], here: int) -> list[tuple[int, int, int, int]]:
    """A binary search over the sorted system-call numbers `keys`, as instructions that jump to
    `targets[nr]` (an absolute index) for each key and to targets[-1] for any other number.
    `here` is the index of the first instruction. Returned as (code, k, jt, jf) with absolute
    targets in jt/jf, made relative by program()."""
    if len(keys) == 1:
        return [(_JEQ_K, keys[0], targets[keys[0]], targets[-1])]
    mid = len(keys) // 2
    left = _search(keys[:mid], targets, here + 1)
    right_start = here + 1 + len(left)
    right = _search(keys[mid:], targets, right_start)
    return [(_JGE_K, keys[mid], right_start, here + 1), *left, *right]


OWN_PID = object()  # stands for the submission's pid in a program, filled in as it is installed


@dataclass(frozen=True)
class Program:
    code: bytes  # sock_filter instructions
    own_pid_at: tuple[int, ...] = ()  # byte offsets of the constants that hold the submission's pid


def program(machine: str | None = None, shared_host: bool = False) -> Program | None:
    """The filter for this machine's architecture (None where it has no table here).

    `shared_host`: the submission runs without namespaces, so in the host's pid space and file
    system. It may then also not run programs (execve) or signal any process but its own.

    The kernel runs the filter on every system call the submission makes (and, when it is
    installed, on every system-call number, to cache those always allowed), so the numbers are
    found by binary search: about seven comparisons, not one per refused call.
    """
    arch = _ARCH.get(machine or platform.machine())
    if arch is None:
        return None
    col, audit_arch = arch
    denied = [
        *DENIED.values(),
        *DENIED_IPC.values(),
        *(DENIED_ON_SHARED_HOST.values() if shared_host else ()),
    ]
    refused = sorted({numbers[col] for numbers in denied if numbers[col] is not None})
    checked = {name: numbers[col] for name, numbers in CHECKED_ARGS.items()}
    if not shared_host:
        del checked["tgkill"], checked["rt_tgsigqueueinfo"]
    by_value = {
        numbers[col]: (arg, values)
        for numbers, arg, values in ARG_CHECKS.values()
        if numbers[col] is not None
    }
    keys = sorted([*refused, *checked.values(), *by_value])
    x32 = col == 0  # x86-64: x32 calls carry a high bit on its own numbers
    tree = 5 if x32 else 4  # where the search starts
    tail = tree + 2 * len(keys) - 1  # the endings follow it
    # Instructions as (code, k, jt, jf), jump targets absolute (made relative below). BPF jumps
    # only forward, so the checks of arguments come first among the endings, then the returns.
    checks: list[tuple[int, object, int | str, int | str]] = []
    targets: dict[int, int | str] = {nr: "eperm" for nr in refused}
    targets[-1] = "allow"
    targets[checked["clone3"]] = "enosys"  # its flags sit in memory a filter cannot read: glibc
    # then falls back to clone, whose flags it can
    targets[checked["clone"]] = tail + len(checks)
    checks += [(_LD_W_ABS, _ARG0, 0, 0), (_JSET_K, CLONE_NEW_FLAGS, "eperm", "allow")]  # new namespaces
    for name in ("tgkill", "rt_tgsigqueueinfo"):
        if name in checked:
            targets[checked[name]] = tail + len(checks)
            checks += [(_LD_W_ABS, _ARG0, 0, 0), (_JEQ_K, OWN_PID, "allow", "eperm")]  # its own pid
    for nr, (arg, values) in sorted(by_value.items()):
        targets[nr] = tail + len(checks)
        checks.append((_LD_W_ABS, _ARG0 + _ARG_SIZE * arg, 0, 0))
        for i, value in enumerate(values):  # refused if equal to one, else on to the next
            last = i == len(values) - 1
            checks.append((_JEQ_K, value, "eperm", "allow" if last else tail + len(checks) + 1))
    returns = {"enosys": _RET_ERRNO | errno.ENOSYS, "allow": _RET_ALLOW, "eperm": _RET_ERRNO | errno.EPERM}
    ends = {name: tail + len(checks) + i for i, name in enumerate(returns)}
    head = [
        (_LD_W_ABS, _ARCH_OFFSET, 0, 0),
        (_JEQ_K, audit_arch, 3, 2),  # another ABI (i386 through int 0x80, say): refused
        (_RET_K, _RET_ERRNO | errno.EPERM, 0, 0),
        (_LD_W_ABS, _NR, 0, 0),
    ]
    if x32:
        head.append((_JGE_K, X32_SYSCALL_BIT, "eperm", tree))
    resolved = {nr: ends[t] if isinstance(t, str) else t for nr, t in targets.items()}
    insns = [*head, *_search(keys, resolved, tree), *checks, *((_RET_K, k, 0, 0) for k in returns.values())]
    assert len(head) == tree and len(insns) == tail + len(checks) + len(returns)
    out, own_pid_at = [], []
    for i, (code, k, jt, jf) in enumerate(insns):
        if code in (_JEQ_K, _JGE_K, _JSET_K):  # absolute targets -> offsets past this instruction
            jt, jf = (ends[j] if isinstance(j, str) else j for j in (jt, jf))
            jt, jf = jt - i - 1, jf - i - 1
            assert 0 <= jt < 256 and 0 <= jf < 256, (i, jt, jf)
        if k is OWN_PID:
            own_pid_at.append(8 * i + 4)  # the k field of this sock_filter
            k = 0
        out.append(_insn(code, k, jt, jf))
    return Program(b"".join(out), tuple(own_pid_at))


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_libc = ctypes.CDLL(None, use_errno=True)


class Filter:
    """A filter program ready to install: its kernel structure is built once, in the monitor, so a
    freshly forked candidate only fills in its pid (if the program asks for it) and makes one
    prctl call."""

    def __init__(self, filter_program: Program) -> None:
        code = filter_program.code
        self._own_pid_at = filter_program.own_pid_at
        self._buffer = ctypes.create_string_buffer(code, len(code))
        self._fprog = _SockFprog(len(code) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))
        self._ref = ctypes.byref(self._fprog)
        self._prctl = _libc.prctl

    def install(self) -> None:
        """Install it on the calling process (and whatever it starts from now on). Needs
        no_new_privs set, or CAP_SYS_ADMIN; raises OSError where the kernel refuses."""
        for offset in self._own_pid_at:  # this process's copy of the buffer
            struct.pack_into("=I", self._buffer, offset, os.getpid())
        if self._prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self._ref, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"seccomp filter: {os.strerror(err)}")


def number(name: str, machine: str | None = None) -> int | None:
    """The number of system call `name` on this machine's architecture (None where this module
    has no table for it, or the call is not in one)."""
    arch = _ARCH.get(machine or platform.machine())
    checked_by_value = {name: numbers for name, (numbers, _, _) in ARG_CHECKS.items()}
    numbers = {**DENIED, **DENIED_IPC, **DENIED_ON_SHARED_HOST, **CHECKED_ARGS, **checked_by_value}.get(name)
    return None if arch is None or numbers is None else numbers[arch[0]]


def for_this_machine(shared_host: bool = False) -> Filter | None:
    """The filter for this architecture, or None where there is no table for it."""
    filter_program = program(shared_host=shared_host)
    return Filter(filter_program) if filter_program is not None else None
