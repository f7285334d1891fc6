"""The trusted parent's side of the sandbox: a pool of workers behind one fork server.

`Sandbox` starts `server.py` once (interpreter start-up and imports paid once), then sends it one
end of a fresh socketpair per job. At most `workers` jobs run at once (default: the number of
cores); each gets a slot number, which the server turns into a uid of its own. Calls are
thread-safe: the verifier drives the pool from a thread per worker.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from . import codec

SERVER = Path(__file__).with_name("server.py")


@dataclass(frozen=True)
class Limits:
    """Resource limits for one submission. CPU limits are exact (kernel-enforced); wall-clock
    limits are `wall_factor` times larger, so a loaded machine does not fail correct programs,
    and still stop code that sleeps or blocks."""

    call_timeout: float = 2.0
    """CPU seconds for loading the code, and for each test call."""
    cpu_s: float = 6.0
    """CPU seconds for the whole submission (RLIMIT_CPU: the process is killed past it)."""
    wall_factor: float = 3.0
    """Wall-clock limits are this many times the CPU limits."""
    memory_mb: int = 1024
    """Address-space limit of the candidate process (RLIMIT_AS)."""
    nproc: int = 16
    """Processes the submission may have at once (per-slot uid; enforced when started as root
    or in a user namespace)."""
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
        if seconds <= 0:
            raise ValueError("timeout must be positive")
        return replace(self, cpu_s=float(seconds), call_timeout=float(seconds))


DEFAULT_LIMITS = Limits()


@dataclass
class RunResult:
    """What the monitor reported about one job (parsed further by `axiom_rl.verifier`)."""

    messages: list[Any]
    reason: str = ""
    exit: dict[str, Any] | None = None
    judge_exit: dict[str, Any] | None = None
    output: str = ""
    wall_s: float = 0.0
    internal_error: str = ""


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the submission)."""


class Sandbox:
    """A pool of sandboxed workers. Use as a context manager, or call close()."""

    def __init__(
        self, workers: int | None = None, limits: Limits = DEFAULT_LIMITS, namespaces: bool = True
    ) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.limits = limits
        self._namespaces = namespaces
        self._lock = threading.Lock()
        self._slots: queue.Queue[int] = queue.Queue()
        for i in range(self.workers):
            self._slots.put(i)
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctrl: socket.socket | None = None
        self.isolation = ""
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115  (the server's stderr, read if it fails to start)
        self._closed = False
        atexit.register(self.close)

    # ------------------------------------------------------------------ lifecycle

    def _start(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        settings = {"namespaces": self._namespaces, "fallback_tmp": tempfile.gettempdir()}
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        self._proc = subprocess.Popen(
            [sys.executable, "-E", "-s", "-B", str(SERVER), str(child.fileno()), json.dumps(settings)],
            pass_fds=[child.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=env,
            cwd="/",
            start_new_session=True,  # Ctrl-C in the terminal reaches us, not the server
        )
        child.close()
        parent.settimeout(60)
        try:
            hello = json.loads(parent.recv(4096) or b"{}")
        except (OSError, ValueError):
            hello = {}
        if not hello.get("ready"):
            self._proc.kill()
            self._stderr.seek(0)
            raise SandboxError(
                "sandbox server failed to start: " + self._stderr.read().decode(errors="replace")[-2000:]
            )
        parent.settimeout(None)
        self._ctrl = parent
        self.isolation = hello["isolation"]

    def start(self) -> Sandbox:
        with self._lock:
            if self._ctrl is None:
                self._start()
        return self

    def close(self) -> None:
        with self._lock:
            if self._ctrl is not None:
                self._ctrl.close()
                self._ctrl = None
            if self._proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=5)
                if self._proc.poll() is None:
                    self._proc.kill()
                    self._proc.wait()
                self._proc = None
            self._closed = True

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ jobs

    def _dispatch(self, end: socket.socket) -> None:
        """Hand one socket end to the server, restarting it once if it died."""
        with self._lock:
            for attempt in range(2):
                if self._ctrl is None:
                    self._start()
                try:
                    socket.send_fds(self._ctrl, [b"J"], [end.fileno()])  # type: ignore[arg-type]
                    return
                except OSError:
                    if attempt:
                        raise
                    self._ctrl.close()  # type: ignore[union-attr]
                    self._ctrl = None
                    if self._proc is not None:
                        self._proc.kill()
                        self._proc.wait()

    def _run(self, job: dict[str, Any], limits: Limits) -> RunResult:
        slot = self._slots.get()
        ours, theirs = socket.socketpair()
        try:
            job = dict(job, slot=slot, limits=asdict(limits))
            try:
                self._dispatch(theirs)
            except (OSError, SandboxError) as e:
                return RunResult([], internal_error=f"sandbox unavailable: {e}")
            theirs.close()
            ours.sendall((json.dumps(job, separators=(",", ":")) + "\n").encode())
            # The monitor enforces the limits; this is only a safety net against a stuck monitor.
            deadline = time.monotonic() + limits.cpu_s * limits.wall_factor + 30.0
            data = bytearray()
            while not data.endswith(b"\n"):
                ours.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    chunk = ours.recv(1 << 20)
                except TimeoutError:
                    return RunResult([], internal_error="the sandbox monitor did not answer in time")
                if not chunk:
                    return RunResult([], internal_error="the sandbox monitor exited without a report")
                data += chunk
            report = json.loads(data)
            return RunResult(
                messages=report["messages"],
                reason=report["reason"],
                exit=report["exit"],
                judge_exit=report.get("judge_exit"),
                output=report["output"],
                wall_s=report["wall_s"],
            )
        except (OSError, ValueError, KeyError) as e:
            return RunResult([], internal_error=f"sandbox failure: {type(e).__name__}: {e}")
        finally:
            ours.close()
            with contextlib.suppress(OSError):
                theirs.close()
            self._slots.put(slot)

    def run_calls(
        self, code: str, entry_point: str, calls: list[list[Any]], limits: Limits | None = None
    ) -> RunResult:
        """Run `code`, then call `entry_point(*args)` for each args in `calls`.

        Result messages: {"load": ...}, then {"i", "ok", "value" (codec-encoded) | "kind", "error"}
        per call, then {"done": true}. Expected outputs are not sent: compare in the caller.
        """
        return self._run(
            {"mode": "io", "code": code, "entry_point": entry_point, "calls": calls}, limits or self.limits
        )

    def run_tests(
        self, code: str, entry_point: str, test_code: str, prelude: str = "", limits: Limits | None = None
    ) -> RunResult:
        """Run assert-style `test_code` (HumanEval `check(candidate)` or bare asserts) in a judge
        process; the candidate runs `code` in another and is reached only through an RPC stub."""
        job = {
            "mode": "assert",
            "code": code,
            "entry_point": entry_point,
            "test_code": test_code,
            "prelude": prelude,
        }
        return self._run(job, limits or self.limits)


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
