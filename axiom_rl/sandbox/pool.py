"""The trusted parent's side of the sandbox: a pool of worker slots, each a long-lived monitor.

`Sandbox` starts one `server.py` process per slot (interpreter start-up and imports paid once per
slot, not per job) and keeps a socket to each. At most `workers` jobs run at once (default: the
number of CPUs this process may use); a job takes a free slot, sends one JSON line and reads one
back. A monitor that dies or stops answering is killed and started again, and the job it was
running is run again on the fresh one; a job whose second run fails too gets an `internal_error`
(the verifier's fault, never the submission's). With one slot per CPU
(the default), each slot's processes keep to a CPU of their own (slot_cpus). Thread-safe.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import json
import math
import os
import queue
import site
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from . import codec
from .framing import LineReader, memory_file

SERVER = Path(__file__).with_name("server.py")
# Started as root, every worker slot runs submissions as a uid of its own from this range.
UID_BASE, UID_COUNT = 61000, 4096


@dataclass(frozen=True)
class Limits:
    """Resource limits for one submission. CPU limits are exact (kernel-enforced); wall-clock
    limits are `wall_factor` times larger, so a loaded machine does not fail correct programs,
    and still stop code that sleeps or blocks."""

    call_timeout: float = 2.0
    """CPU seconds for loading the code, and for each test call."""
    cpu_s: float = 6.0
    """CPU seconds for the whole submission (no call gets more than what is left of it)."""
    wall_factor: float = 3.0
    """Wall-clock limits are this many times the CPU limits."""
    memory_mb: int = 1024
    """Address-space limit of each of the submission's processes (RLIMIT_AS)."""
    nproc: int = 4
    """Processes and threads the submission may have at once (per-slot uid; enforced when started
    as root or in a user namespace). The kernel's limits on CPU time and memory are per process,
    so a job may use up to nproc times them (the wall clock ends it all the same, and it cannot
    leave its slot's CPU): kept small for that reason. A task that needs more, raise it."""
    output_bytes: int = 1 << 20
    """stdout+stderr beyond this kills the submission."""
    disk_mb: int = 16
    """Size of its private /tmp, and the largest file it may write."""
    result_mb: int = 32
    """Largest total size of the results it may send back."""

    def with_timeout(self, seconds: float | None) -> Limits:
        """The `--timeout` of the CLI: CPU seconds for the whole submission, any one call may use
        all of it. None leaves the limits as they are."""
        if seconds is None:
            return self
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {seconds}")
        return replace(self, cpu_s=float(seconds), call_timeout=float(seconds))


DEFAULT_LIMITS = Limits()


@functools.lru_cache(maxsize=64)
def _as_dict(limits: Limits) -> dict[str, Any]:
    """`limits` as the job line carries them (read only). dataclasses.asdict deep-copies each field:
    0.065 ms a job, which the same few limits need once."""
    return asdict(limits)


@dataclass
class RunResult:
    """What the monitor reported about one job (turned into a Verdict by `axiom_rl.verifier`)."""

    messages: list[Any]
    reason: str = ""
    why: str = ""  # what was wrong with the results, where `reason` is "protocol"
    # How the candidate ended ({"code", "signal"}), where it stopped before reporting everything;
    # None where it reported everything (its end then overlaps the report: server.Forker).
    exit: dict[str, Any] | None = None
    judge_exit: dict[str, Any] | None = None
    output: str = ""
    wall_s: float = 0.0
    internal_error: str = ""


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the submission)."""


class _UidClaims:
    """Root mode: a uid for each worker slot that no other slot on this machine runs as, in this
    pool or another process's (a data-parallel rank on the same host, an evaluation beside a
    training run). Numbered by slot alone, two pools both ran slot 0 as 61000 and shared its
    process limit. A uid is claimed with an flock on a file in a root-only directory; the kernel
    drops the lock when this process ends, however it ends."""

    def __init__(self) -> None:
        self._held: dict[int, int] = {}  # uid -> the locked file's descriptor

    @staticmethod
    def _directory() -> Path:
        for parent in ("/run", tempfile.gettempdir()):
            path = Path(parent) / "axiom-rl-sandbox-uids"
            with contextlib.suppress(OSError):
                path.mkdir(mode=0o700, exist_ok=True)
                info = path.lstat()  # ours, a real directory, closed to others: no one can plant links
                if (
                    path.is_dir()
                    and not path.is_symlink()
                    and info.st_uid == os.geteuid()
                    and not info.st_mode & 0o022
                ):
                    return path
        raise SandboxError("no private directory to claim sandbox uids in (/run or the temp directory)")

    def claim(self) -> int:
        directory = self._directory()
        for uid in range(UID_BASE, UID_BASE + UID_COUNT):
            if uid in self._held:
                continue
            fd = os.open(directory / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._held[uid] = fd
            return uid
        raise SandboxError(f"all {UID_COUNT} sandbox uids from {UID_BASE} are in use on this machine")

    def release(self) -> None:
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()


class _Slot:
    """One monitor process and the socket to it."""

    def __init__(self, index: int, isolation: dict, uid: int | None = None, cpu: int | None = None) -> None:
        self.index, self.uid, self.isolation, self.cpu = index, uid, isolation, cpu
        ours, theirs = socket.socketpair()
        settings = {
            **isolation,
            "uid": uid,
            "cpu": cpu,
            # The monitor runs without the site module (-S): what it would have set up, from
            # ours (see server.py: use_site).
            "site": {"prefix": sys.prefix, "exec_prefix": sys.exec_prefix, "dirs": site.getsitepackages()},
            "fallback_tmp": tempfile.gettempdir(),
            # The caller's own directories, hidden from submissions that run as its uid (no root).
            "private_dirs": [str(Path.home()), os.environ.get("XDG_RUNTIME_DIR", "")],
        }
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115  (read only if the monitor fails to start)
        self.proc = subprocess.Popen(
            [sys.executable, "-E", "-S", "-B", str(SERVER), str(theirs.fileno()), json.dumps(settings)],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},  # nothing of ours leaks in
            cwd="/",
            start_new_session=True,  # Ctrl-C in the terminal reaches the parent, not the monitors
        )
        theirs.close()
        self.sock = ours
        # The monitor is trusted, and what it reports is bounded by the limits it enforces: no cap
        # on the bytes read over the slot's life.
        self.reports = LineReader(ours.fileno(), max_bytes=sys.maxsize)
        self.hello: dict[str, Any] = {}

    def wait_ready(self, timeout: float = 60.0) -> None:
        self.hello = self.reports.read(timeout) or {}
        if not self.hello.get("ready"):
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.stderr.seek(0)
            why = self.stderr.read().decode(errors="replace")[-2000:]
            self.kill()
            raise SandboxError(f"sandbox worker failed to start: {why}")

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()  # the monitor reads EOF and exits
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity: a container's or `taskset`'s share, not
    every core of the machine as os.cpu_count() says)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _slots(workers: int | None) -> int:
    return max(1, workers or len(usable_cpus()))  # default: one per core this process may use


def slot_cpus(slots: int, pin: bool | None) -> list[int | None]:
    """The CPU each slot's processes keep to (monitor, forker, judge, candidates), or None.

    A job hops from process to process (monitor, forker, candidate, judge, monitor): on the same
    CPU each hop is a plain switch, while waking a process on another, idle CPU of a VM waits for
    the hypervisor. Pinned, HumanEval's checks ran 6-11% faster on 2 cores (docs/benchmarks.md).
    `pin` None (the default) pins only a pool that has exactly one slot per CPU this process may
    use: a smaller pool (or several of them, in processes of their own) would all start at the
    first CPUs and crowd them, and a larger one is better placed by the scheduler."""
    cpus = usable_cpus()
    if not hasattr(os, "sched_setaffinity") or pin is False or (pin is None and slots != len(cpus)):
        return [None] * slots
    return [cpus[i % len(cpus)] for i in range(slots)]


def pool_size(workers: int | None, jobs: int) -> int:
    """Slots for a pool that will run at most `jobs` at once: `workers` (default: one per core),
    never more than that, since each slot is a monitor process to start and hold."""
    return max(1, min(_slots(workers), jobs))


class Sandbox:
    """A pool of sandboxed workers. Use as a context manager, or call close()."""

    def __init__(
        self,
        workers: int | None = None,
        limits: Limits = DEFAULT_LIMITS,
        namespaces: bool = True,
        syscall_filter: bool = True,
        pin_cpus: bool | None = None,
    ) -> None:
        """`namespaces` and `syscall_filter` off weaken isolation (tests and benchmarks compare
        them); each is also off where the kernel refuses it, which `isolation` then says.
        `pin_cpus`: keep each slot's processes to one CPU (see slot_cpus; by default, only when
        there is one slot per CPU)."""
        self.workers = _slots(workers)
        self._pin_cpus = pin_cpus
        self.limits = limits
        # scratch_mb: the size of the scratch tmpfs mounts that a slot started as root keeps for
        # its jobs (those with another disk limit get mounts of their own).
        self._isolation = {
            "namespaces": namespaces,
            "syscall_filter": syscall_filter,
            "scratch_mb": limits.disk_mb,
        }
        self._free: queue.Queue[_Slot] = queue.Queue()
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self.isolation = ""
        self._started = False
        self._closed = False
        self._uids = _UidClaims()
        # The sandbox's own failures, newest last (at most 100): each cost a job a second run.
        self.failures: list[str] = []
        atexit.register(self.close)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Sandbox:
        with self._lock:
            if self._started:
                return self
            if self._closed:
                raise SandboxError("the sandbox is closed")
            uids = [self._uids.claim() if os.geteuid() == 0 else None for _ in range(self.workers)]
            cpus = slot_cpus(self.workers, self._pin_cpus)
            slots = [
                _Slot(i, self._isolation, uid, cpu) for i, (uid, cpu) in enumerate(zip(uids, cpus))
            ]  # in parallel
            try:
                for slot in slots:
                    slot.wait_ready()
            except SandboxError:
                for slot in slots:
                    slot.kill()
                self._uids.release()
                raise
            self._slots = slots
            for slot in slots:
                self._free.put(slot)
            self.isolation = slots[0].hello["isolation"]
            self._started = True
        return self

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for slot in self._slots:
                slot.close()
            self._slots = []
            self._uids.release()  # after the monitors: no submission runs as these uids any more

    @property
    def uids(self) -> list[int | None]:
        """The uid each worker slot runs submissions as (None where not root: a user namespace)."""
        return [slot.uid for slot in self._slots]

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _replace(self, slot: _Slot) -> _Slot:
        """Kill a monitor that failed and start a fresh one in its place."""
        slot.kill()
        fresh = _Slot(slot.index, slot.isolation, slot.uid, slot.cpu)
        fresh.wait_ready()
        with self._lock:
            self._slots = [fresh if s is slot else s for s in self._slots]
        return fresh

    # ------------------------------------------------------------------ jobs

    def _run(self, job: dict[str, Any], limits: Limits, tests: dict[str, Any] | None = None) -> RunResult:
        """Run `job` on a free slot. `tests` (assert-style: test code and prelude) travel in a
        memory file that the monitor hands to its judge unread: never in the monitor's memory,
        which each candidate starts as a copy of.

        A slot that fails (its monitor dies or stops answering) is replaced and the job run again
        on a fresh one, once: only a failure that repeats is reported as an internal_error. Nothing
        a submission sends can make its monitor fail (its lines are decoded within a budget: see
        framing.ValueBudget), so what repeats is the sandbox's own fault."""
        result = self._run_once(job, limits, tests)
        if result.internal_error and not self._closed:
            self._record_failure(result.internal_error)
            result = self._run_once(job, limits, tests)
            if result.internal_error:
                self._record_failure(f"again: {result.internal_error}")
        return result

    def _record_failure(self, why: str) -> None:
        with self._lock:
            self.failures.append(why)
            del self.failures[:-100]

    def _run_once(self, job: dict[str, Any], limits: Limits, tests: dict[str, Any] | None) -> RunResult:
        if not self._started:
            self.start()
        slot = self._free.get()
        try:
            if self._closed:
                return RunResult([], internal_error="the sandbox is closed")
            try:
                line = (json.dumps(dict(job, limits=_as_dict(limits)), separators=(",", ":")) + "\n").encode()
                if tests is None:
                    slot.sock.sendall(line)
                else:
                    _send_with_memory_file(slot.sock, line, json.dumps(tests).encode())
                # The monitor enforces the limits; this deadline only catches a monitor that hangs.
                report = slot.reports.read(limits.cpu_s * limits.wall_factor + 30.0)
                if report is None:
                    raise SandboxError("the sandbox worker stopped answering")
            except (OSError, ValueError, SandboxError) as e:
                why = f"sandbox failure: {type(e).__name__}: {e}"
                if not self._closed:
                    try:
                        slot = self._replace(slot)
                    except SandboxError as restart:
                        # The slot goes back killed (its socket closed): the next job sent to it
                        # fails at once and starts it again. Raised from here, this would have
                        # been the verifier's exception, not the job's internal_error.
                        why += f"; its restart failed too: {restart}"
                return RunResult([], internal_error=why)
            judge_exit = report.get("judge_exit") or {}
            if report["reason"] == "" and judge_exit.get("code") not in (0, None):
                # The judge (trusted test code's process) died on its own, before answering.
                return RunResult(
                    [], internal_error=f"the test harness crashed (exit code {judge_exit['code']})"
                )
            return RunResult(
                messages=report["messages"],
                reason=report["reason"],
                why=str(report.get("why", "")),
                exit=report["exit"],
                judge_exit=report.get("judge_exit"),
                output=report["output"],
                wall_s=report["wall_s"],
            )
        finally:
            self._free.put(slot)

    def run_calls(
        self,
        code: str,
        entry_point: str,
        calls: list[list[Any]],
        limits: Limits | None = None,
        replay: bool = False,
        encoded: bool = False,
    ) -> RunResult:
        """Run `code`, then call `entry_point(*args)` for each args in `calls`.

        Result messages: {"load": ...}, then {"i", "ok", "value" (codec-encoded) | "kind", "error"}
        per call, then {"done": true}. Expected outputs are not sent: compare in the caller.

        `replay`: the calls of assert-style tests that the caller runs over the answers
        (judging.replay_report). Their arguments travel codec-encoded, as the judge's do (tuples
        stay tuples), and the run stops at a call that runs out of time or memory. `encoded`:
        they are given encoded already (judging.encoded_replayable_calls).
        """
        job = {"mode": "io", "code": code, "entry_point": entry_point, "calls": calls}
        if replay:
            job.update(replay=True, calls=calls if encoded else [codec.encode(list(args)) for args in calls])
        return self._run(job, limits or self.limits)

    def run_tests(
        self, code: str, entry_point: str, test_code: str, prelude: str = "", limits: Limits | None = None
    ) -> RunResult:
        """Run assert-style `test_code` (HumanEval `check(candidate)` or bare asserts) in a judge
        process; the candidate runs `code` in another and is reached only through an RPC stub."""
        job = {"mode": "assert", "code": code, "entry_point": entry_point}
        return self._run(job, limits or self.limits, {"test_code": test_code, "prelude": prelude})


def _send_with_memory_file(sock: socket.socket, line: bytes, content: bytes) -> None:
    """`line`, with a memory file holding `content` attached to its first byte (SCM_RIGHTS)."""
    fd = memory_file(content, "axiom-tests")
    try:
        socket.send_fds(sock, [line[:1]], [fd])
    finally:
        os.close(fd)
    sock.sendall(line[1:])


def decode_value(encoded: Any) -> Any:
    """A candidate's return value, as plain data (raises ValueError if malformed)."""
    try:
        return codec.decode(encoded)
    except (TypeError, RecursionError, OverflowError, ValueError) as e:
        raise ValueError(f"malformed value: {e}") from None


_default: Sandbox | None = None
_default_lock = threading.Lock()


def default_sandbox() -> Sandbox:
    """A process-wide pool, started on first use and closed at exit."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = Sandbox().start()
        return _default
