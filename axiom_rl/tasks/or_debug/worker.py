"""Solver workers: solves of model-written repairs run in child processes with limits.

A repaired model comes from a policy's answer, so solving it is running hostile input through a
C++ library. Each solve therefore happens in a worker process (`worker.main` in a child
Python) with an address-space limit, HiGHS's own time limit, and a
watchdog in the parent: a worker that does not answer in time is killed and replaced, and the
solve is reported as a timeout; one that dies is reported as a crash. Neither is an exception in
the trainer. Workers are reused (a solve of a small model takes milliseconds; starting a worker,
a fraction of a second) and shared by threads through a queue.

Requests and replies are single JSON lines: the model as `LinearModel.to_dict()` (checked again
by the worker), never LP text.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import select
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from .model import LinearModel
from .solve import TIME_LIMIT

MEMORY_BYTES = 2 << 30  # address space: HiGHS and numpy load in ~0.5 GiB; a tiny model needs little more
START_TIMEOUT_S = 60.0
GRACE_S = 5.0  # on top of HiGHS's own time limit, before the watchdog kills a worker
MAX_REPLY_BYTES = 1 << 16
CRASHED = "crashed"


@dataclass(frozen=True)
class SolveReply:
    status: str  # solve.py's statuses, or CRASHED
    objective: float | None = None
    detail: str = ""
    iis: tuple[str, ...] | None = None  # when asked for and the model is infeasible


def _limit_memory() -> None:
    """Called by the worker itself before it reads any request (a preexec_fn would not be safe
    in the threads that start workers)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class SolverWorker:
    def __init__(self, grace_s: float = GRACE_S) -> None:
        self.grace_s = grace_s
        package_root = str(Path(__file__).resolve().parents[3])
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
            p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from axiom_rl.tasks.or_debug.worker import main; main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        if self._read(START_TIMEOUT_S) != {"ready": True}:
            self.kill()
            raise RuntimeError("the solver worker did not start (is highspy installed?)")

    def _read(self, timeout: float) -> dict | None:
        """One reply line within `timeout` seconds, or None (no answer, or the worker died)."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline(MAX_REPLY_BYTES)
        try:
            reply = json.loads(line)
        except ValueError:
            return None
        return reply if isinstance(reply, dict) else None

    def solve(self, model: LinearModel, time_limit: float, iis: bool = False) -> SolveReply:
        assert self.proc.stdin is not None
        request = {"model": model.to_dict(), "time_limit": time_limit, "iis": iis}
        # An IIS takes a solve per constraint at most (the deletion filter), each under the limit.
        allowed = time_limit * (len(model.constraints) + 2 if iis else 1) + self.grace_s
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            self.kill()
            return SolveReply(CRASHED, detail="the solver worker had exited")
        reply = self._read(allowed)
        if reply is None:
            alive = self.proc.poll() is None
            self.kill()
            if alive:
                return SolveReply(TIME_LIMIT, detail=f"no answer from the solver in {allowed:g} s")
            return SolveReply(CRASHED, detail="the solver crashed on this model")
        status, objective, names = reply.get("status"), reply.get("objective"), reply.get("iis")
        if (
            not isinstance(status, str)
            or not (objective is None or isinstance(objective, (int, float)))
            or not (names is None or (isinstance(names, list) and all(isinstance(n, str) for n in names)))
        ):
            self.kill()
            return SolveReply(CRASHED, detail="the solver worker answered nonsense")
        return SolveReply(
            status, objective, str(reply.get("detail", ""))[:200], None if names is None else tuple(names)
        )

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):  # a request still buffered for a dead worker
                    stream.close()


class SolverPool:
    """Up to `size` workers, started when first needed, shared by threads."""

    def __init__(self, size: int, grace_s: float = GRACE_S) -> None:
        self.size, self.grace_s = size, grace_s
        self._idle: queue.SimpleQueue[SolverWorker] = queue.SimpleQueue()
        self._started = 0
        self._lock = threading.Lock()
        self._all: list[SolverWorker] = []

    def _take(self) -> SolverWorker:
        with self._lock:
            start = self._started < self.size and self._idle.empty()
            if start:
                self._started += 1
        if not start:
            return self._idle.get()
        try:
            worker = SolverWorker(self.grace_s)
        except Exception:
            with self._lock:
                self._started -= 1
            raise
        with self._lock:
            self._all.append(worker)
        return worker

    def solve(self, model: LinearModel, time_limit: float = 2.0, iis: bool = False) -> SolveReply:
        """Solve `model`; with `iis`, also find an IIS when it is infeasible (solve.find_iis)."""
        worker = self._take()
        try:
            return worker.solve(model, time_limit, iis)
        finally:
            if worker.alive:
                self._idle.put(worker)
            else:  # replaced on a later call
                with self._lock:
                    self._started -= 1
                    self._all.remove(worker)

    def close(self) -> None:
        with self._lock:
            workers, self._all, self._started = self._all, [], 0
        for w in workers:
            w.kill()


class _Shared:
    """The process's pool, made on first use (not a setting: it holds worker processes)."""

    lock = threading.Lock()
    pool: SolverPool | None = None


def solver_pool() -> SolverPool:
    """The process's pool (its size: the CPUs this process may use, at most 4)."""
    with _Shared.lock:
        if _Shared.pool is None:
            _Shared.pool = SolverPool(max(1, min(4, len(os.sched_getaffinity(0)))))
            atexit.register(_Shared.pool.close)
        return _Shared.pool


def main() -> None:
    """The worker's loop: a request per line on stdin, a reply per line on stdout."""
    _limit_memory()
    from .model import ModelError
    from .solve import INFEASIBLE, find_iis, solve_model

    # Replies go to a copy of stdout; fd 1 itself goes to stderr, so that nothing the solver
    # library prints can be taken for a reply.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    from .solve import new_highs

    new_highs()  # loaded before "ready": the first solve is not charged for it

    out.write(b'{"ready": true}\n')
    out.flush()
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
            model = LinearModel.from_dict(request["model"])
            time_limit = float(request["time_limit"])
            solution = solve_model(model, time_limit)
            reply = {"status": solution.status, "objective": solution.objective}
            if request.get("iis") is True and solution.status == INFEASIBLE:
                reply["iis"] = find_iis(model, time_limit)
        except (ModelError, ValueError, KeyError, TypeError) as e:
            reply = {"status": "other", "detail": f"{type(e).__name__}: {e}"[:200]}
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()
