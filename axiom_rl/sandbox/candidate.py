"""The untrusted side: what runs inside a candidate process, after isolation.isolate().

The submission is compiled and run in a namespace of its own, then called: on inputs the job
carries (io mode, one result line per call) or on the judge's requests (rpc mode). Each call runs
under a CPU timer taken from the submission's budget; every result leaves as plain data
(codec.py), serialised here so that a value that cannot be sent fails as its own call's error.
Nothing here is trusted by anyone: the monitor reads these lines with limits, and the parent or
the judge decides what they mean. Stdlib only.
"""

from __future__ import annotations

import builtins
import json
import os
import signal
import socket

import codec
import judging
from framing import LineReader, send_line, write_all


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
    write_all(fd, (text + "\n").encode())


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


# Arguments of every kind the codec carries, and a call that raises, for warm_up.
_WARM_UP_CODE = "def f(x):\n    if x == 'raise':\n        raise ValueError(x)\n    return x\n"
_WARM_UP_VALUES = [1, -(2**70), 2.5, float("nan"), "s", b"b", None, True, [1], (1,), {"k": 1}, {1}, 1j, "raise"]  # fmt: skip


def warm_up(rounds: int = 16) -> None:
    """Run this module's code on trusted, harmless jobs in the monitor, before it forks its forker
    (server.main), so that every candidate starts with it warm.

    CPython's adaptive interpreter (3.11+) writes into a function's code object as it warms up
    and specialises its instructions. Code that only candidates run was cold in each of them, and
    in a fresh fork every page such a write touches is copied. Warmed once here: about 50 fewer
    page faults and 0.12 ms less CPU in each candidate, 6% more HumanEval checks per second
    (docs/benchmarks.md). Costs the monitor 15 ms at its start; leaves no signal handler or timer
    behind."""
    previous = signal.getsignal(signal.SIGPROF)
    job = {"code": _WARM_UP_CODE, "entry_point": "f", "limits": {"call_timeout": 60.0, "cpu_s": 60.0}}
    plain = [[v] for v in _WARM_UP_VALUES if isinstance(v, (int, float, str, list, dict)) and v == v]
    replayed = [codec.encode([v]) for v in _WARM_UP_VALUES]
    requests = b"".join(
        json.dumps({"args": codec.encode([v], allow_objects=True), "kwargs": {"$d": []}}).encode() + b"\n"
        for v in _WARM_UP_VALUES
    )
    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        for _ in range(rounds):
            candidate_io({**job, "mode": "io", "calls": plain}, sink)
            candidate_io({**job, "mode": "io", "calls": replayed, "replay": True}, sink)
            candidate_io({**job, "mode": "io", "calls": [], "code": "def f(:"}, sink)  # a syntax error
            ours, judge = socket.socketpair()
            with ours, judge:
                judge.sendall(requests)
                judge.shutdown(socket.SHUT_WR)
                candidate_rpc({**job, "mode": "assert"}, ours.fileno())
    finally:
        os.close(sink)
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
