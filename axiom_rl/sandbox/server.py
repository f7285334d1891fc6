"""The sandbox's process side: a fork server, a trusted monitor per job, and the untrusted child.

Started by `axiom_rl.sandbox.pool.Sandbox` as `python -E -s -B server.py CTRL_FD SETTINGS`, with a
scrubbed environment, in a session of its own. Stdlib only. The process tree of one job:

    parent (trusted; holds the expected outputs, which never come here)
      └─ zygote (main loop below: interpreter and common modules loaded once, then fork per job)
           └─ monitor (trusted, one per job: reads the job, enforces limits, reports)
                ├─ judge (assert-style tests only: runs the trusted test code; the candidate
                │         function it calls is an RPC stub)
                └─ candidate (untrusted: runs the submitted code, answers with plain data only)

The parent hands the zygote one end of a fresh socketpair per job; the forked monitor reads the
job from it and writes the result back on it. See `axiom_rl/sandbox/__init__.py` for the policy:
what is and is not covered.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import ctypes
import json
import os
import resource
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback

import codec  # sibling module: the script's directory is sys.path[0] until we drop it below

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
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
# World-writable places a submission could otherwise leave files in: each gets a private tmpfs.
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


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

    def __init__(self, fd: int, max_bytes: int = 64 << 20) -> None:
        self.fd, self.buf, self.total, self.max_bytes, self.eof = fd, b"", 0, max_bytes, False

    def fill(self) -> None:
        """One read() into the buffer (call when select says the fd is readable)."""
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
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.fd], [], [], wait)[0]:
                return None
            self.fill()


# ------------------------------------------------------------------ isolating one process


def _covered_by(path: str, dirs: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def _keep_python_visible(paths: list[str], covered: list[str]) -> None:
    """Bind the interpreter's directories back where a tmpfs we mounted hid them (read-only)."""
    for path in paths:
        if _covered_by(path, covered):
            fd = _PATH_FDS[path]
            os.makedirs(path, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


_PATH_FDS: dict[str, int] = {}


def isolate(
    cfg: dict, limits: dict, *, uid: int | None, namespaces: bool, new_pid_ns: bool, workdir: str
) -> None:
    """Make the calling, freshly forked process a sandboxed one."""
    os.setsid()
    if namespaces:
        unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC)
        mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates to the host
        # O_PATH handles on the interpreter's directories, taken before anything is covered.
        for p in cfg["python_paths"]:
            _PATH_FDS[p] = os.open(p, os.O_PATH | os.O_DIRECTORY)
        covered = []
        for d in SCRATCH_DIRS:
            if os.path.isdir(d) and not os.path.islink(d):
                mount(
                    "tmpfs",
                    d,
                    "tmpfs",
                    MS_NOSUID | MS_NODEV,
                    f"size={limits['disk_mb']}m,nr_inodes=4096,mode=1777",
                )
                covered.append(d)
        if uid is not None:
            # An unprivileged uid cannot enter e.g. /root (mode 700) where pyenv lives: cover such
            # directories with an empty tmpfs; the interpreter is bound back just below.
            for top in cfg["blocked_dirs"]:
                mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=64k")
                covered.append(top)
        _keep_python_visible(cfg["python_paths"], covered)
        for fd in _PATH_FDS.values():
            os.close(fd)
        if new_pid_ns:
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # shows only our processes
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
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if uid is not None or not cfg["root"]:
        # NPROC counts per uid (root is exempt): with a uid per slot it caps this submission alone.
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["nproc"], limits["nproc"]))
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # setuid programs cannot raise privileges
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # set after setuid, which clears it
    prctl(PR_SET_DUMPABLE, 0)  # no ptrace, no /proc/<pid>/mem from same-uid processes
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(
        {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
    )
    if not namespaces:
        _install_audit_guard()


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
    """Raised inside the candidate when one call has used up its CPU time."""


def _on_cpu_alarm(signum: int, frame: object) -> None:
    raise CallTimeout()


def _kind(e: BaseException) -> str:
    if isinstance(e, CallTimeout):
        return "timeout"
    if isinstance(e, MemoryError):
        return "memory_limit"
    return "runtime_error"


def _describe(e: BaseException) -> str:
    return (f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)[:300]


def _load(code: str, entry_point: str, call_timeout: float) -> tuple[object, dict, dict]:
    """Compile and run the submission: (its function or None, its namespace, a status message)."""
    signal.signal(signal.SIGPROF, _on_cpu_alarm)
    try:
        compiled = compile(code, "<submission>", "exec")
    except MemoryError as e:
        return None, {}, {"load": "memory_limit", "error": _describe(e)}
    except (SyntaxError, ValueError, OverflowError, RecursionError) as e:
        return None, {}, {"load": "syntax_error", "error": _describe(e)}
    namespace: dict = {"__name__": "__submission__", "__builtins__": builtins}
    signal.setitimer(signal.ITIMER_PROF, call_timeout)
    try:
        exec(compiled, namespace)
    except BaseException as e:
        signal.setitimer(signal.ITIMER_PROF, 0)
        return None, {}, {"load": _kind(e), "error": _describe(e)}
    signal.setitimer(signal.ITIMER_PROF, 0)
    fn = namespace.get(entry_point)
    if not callable(fn):
        return None, {}, {"load": "runtime_error", "error": f"no function named {entry_point!r} is defined"}
    return fn, namespace, {"load": "ok"}


def _call(fn: object, args: list, kwargs: dict, call_timeout: float) -> dict:
    start = time.process_time()
    signal.setitimer(signal.ITIMER_PROF, call_timeout)
    try:
        value = fn(*args, **kwargs)  # type: ignore[operator]
        signal.setitimer(signal.ITIMER_PROF, 0)
        encoded = codec.encode(value)
        json.dumps(encoded)  # e.g. an int too long to print fails here, not in send_line
    except (codec.EncodeError, ValueError, OverflowError) as e:
        signal.setitimer(signal.ITIMER_PROF, 0)
        return {"ok": False, "kind": "runtime_error", "error": f"result cannot be returned: {e}"[:300]}
    except BaseException as e:
        signal.setitimer(signal.ITIMER_PROF, 0)
        return {"ok": False, "kind": _kind(e), "error": _describe(e), "exc": type(e).__name__}
    return {"ok": True, "value": encoded, "cpu": round(time.process_time() - start, 6)}


def candidate_io(job: dict, out_fd: int) -> None:
    """Run the submission on each input in turn, one result line per call."""
    timeout = job["limits"]["call_timeout"]
    fn, _, status = _load(job["code"], job["entry_point"], timeout)
    send_line(out_fd, status)
    if fn is None:
        return
    for i, args in enumerate(job["calls"]):
        send_line(out_fd, dict(_call(fn, args, {}, timeout), i=i))
    send_line(out_fd, {"done": True})


def candidate_rpc(job: dict, sock_fd: int) -> None:
    """Answer the judge's calls: each request carries arguments, each reply a value or an error."""
    timeout = job["limits"]["call_timeout"]
    fn, namespace, status = _load(job["code"], job["entry_point"], timeout)
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
        send_line(sock_fd, _call(fn, list(args), dict(kwargs), timeout))


# ------------------------------------------------------------------ the judge (trusted test code)


class CandidateFailed(Exception):
    """The candidate could not answer (it crashed, timed out, or sent something malformed)."""


class CandidateStub:
    """Stands in for the submitted function inside the test code: every call is an RPC, and only
    plain data comes back, so no object the submission made ever reaches an `assert`."""

    def __init__(self, fd: int, reader: LineReader, wall_timeout: float) -> None:
        self.fd, self.reader, self.wall_timeout, self.dead, self.calls = fd, reader, wall_timeout, "", 0

    def _fail(self, why: str) -> CandidateFailed:
        self.dead = why
        return CandidateFailed(why)

    def __call__(self, *args: object, **kwargs: object) -> object:
        if self.dead:
            raise CandidateFailed(self.dead)
        self.calls += 1
        try:
            request = {
                "args": codec.encode(list(args), allow_objects=True),
                "kwargs": codec.encode(kwargs, allow_objects=True),
            }
            send_line(self.fd, request)
            reply = self.reader.read(self.wall_timeout)
        except (OSError, ValueError, codec.EncodeError) as e:
            raise self._fail(f"candidate connection failed: {e}") from None
        if reply is None:
            raise self._fail("candidate exited" if self.reader.eof else "timeout")
        if not isinstance(reply, dict) or "ok" not in reply:
            raise self._fail("candidate sent a malformed reply")
        if reply["ok"]:
            try:
                return codec.decode(reply.get("value"))
            except Exception:
                raise self._fail("candidate returned malformed data") from None
        if reply.get("kind") in ("timeout", "memory_limit"):
            raise self._fail(reply["kind"])
        # A builtin exception type is re-raised by name, for tests that expect e.g. ValueError.
        exc = getattr(builtins, str(reply.get("exc")), None)
        if not (isinstance(exc, type) and issubclass(exc, Exception)):
            exc = CandidateFailed
        raise exc(str(reply.get("error", "candidate raised"))[:300])


def instrument(test_code: str) -> tuple[object, int]:
    """Wrap each test statement -- a top-level statement containing `assert` -- so that a failing
    one is recorded and the next still runs (partial credit). Targets the body of `check` when
    the code defines it (HumanEval), else the module body (MBPP's list of asserts)."""
    tree = ast.parse(test_code)
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    owner = check if check is not None else tree
    count, body = 0, []
    for stmt in owner.body:
        if any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
            handler = ast.ExceptHandler(
                type=ast.Name("BaseException", ast.Load()),
                name="__axiom_e__",
                body=ast.parse(f"__axiom_record__({count}, __axiom_e__)").body,
            )
            ok = ast.parse(f"__axiom_record__({count}, None)").body
            body.append(ast.Try(body=[stmt, *ok], handlers=[handler], orelse=[], finalbody=[]))
            count += 1
        else:
            body.append(stmt)
    owner.body = body
    return compile(ast.fix_missing_locations(tree), "<tests>", "exec"), count


def judge(job: dict, sock_fd: int, out_fd: int) -> None:
    """Run the trusted test code against the candidate and report how many tests passed."""
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
    if not isinstance(status, dict) or status.get("load") != "ok":
        status = (
            status if isinstance(status, dict) else {"load": "runtime_error", "error": "malformed status"}
        )
        send_line(out_fd, {"load": str(status.get("load")), "error": str(status.get("error", ""))[:300]})
        return
    stub = CandidateStub(sock_fd, reader, wall)
    outcomes: dict[int, str] = {}

    def record(i: int, exc: BaseException | None) -> None:
        if exc is None:
            outcomes[i] = ""
        elif isinstance(exc, AssertionError):
            outcomes[i] = "assertion failed" + (f": {str(exc)[:200]}" if str(exc) else "")
        else:
            outcomes[i] = _describe(exc)

    try:
        code, total = instrument(job["test_code"])
    except SyntaxError as e:
        send_line(out_fd, {"load": "ok", "internal": f"the test code does not parse: {e}"})
        return
    namespace: dict = {"__name__": "__tests__", "__axiom_record__": record, "__builtins__": builtins}
    aborted = ""
    try:
        if job.get("prelude"):
            exec(compile(job["prelude"], "<prelude>", "exec"), namespace)
        namespace[job["entry_point"]] = stub
        exec(code, namespace)
        if callable(namespace.get("check")):
            namespace["check"](stub)
    except BaseException as e:
        aborted = _describe(e)
    if total == 0:  # nothing to count: passing means the tests ran to the end
        total, outcomes = 1, {0: aborted}
    failures = [outcomes.get(i, aborted or "not reached") for i in range(total)]
    send_line(
        out_fd,
        {
            "load": "ok",
            "passed": sum(1 for f in failures if not f),
            "total": total,
            "errors": [f for f in failures if f][:5],
            "aborted": aborted,
            "candidate": stub.dead,
        },
    )


# ------------------------------------------------------------------ the monitor (trusted, one per job)


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
    # processes that left its session. Without namespaces, its process group is the best we have.
    for kill in (os.kill, os.killpg):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)


def _enter_user_ns() -> None:
    """Non-root: become root of a new user namespace, which then owns the other namespaces."""
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER)
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def monitor(conn_fd: int, cfg: dict) -> None:
    start = time.monotonic()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    job = LineReader(conn_fd).read(30.0)
    if not isinstance(job, dict):
        return
    slot, limits, mode = int(job.get("slot", 0)), job["limits"], job["mode"]
    namespaces = cfg["namespaces"]
    uid_c = cfg["uid_base"] + slot if cfg["drop_uid"] else None
    uid_j = cfg["uid_base"] + 1000 + slot if cfg["drop_uid"] else None
    workdir = "/tmp"
    if not namespaces:  # weak mode: a private directory on disk, removed afterwards
        workdir = tempfile.mkdtemp(prefix="axiom-sbx-", dir=cfg["fallback_tmp"])
        if uid_c is not None:
            os.chown(workdir, uid_c, uid_c)
    out_r, out_w = os.pipe()
    res_r, res_w = os.pipe()
    judge_pid = None
    if mode == "assert":
        judge_sock, cand_sock = socket.socketpair()
        j_fd, c_fd = judge_sock.detach(), cand_sock.detach()

        def run_judge() -> None:
            _keep_only_fds([j_fd, res_w])
            _redirect_stdio(None)
            # Forked before the user namespace below, so without root it cannot unshare: the
            # judge runs trusted code and the candidate cannot see it (separate pid namespace).
            isolate(
                cfg,
                dict(limits, nproc=max(4, limits["nproc"])),
                uid=uid_j,
                namespaces=namespaces and cfg["root"],
                new_pid_ns=False,
                workdir="/tmp" if namespaces and cfg["root"] else workdir,
            )
            judge(job, j_fd, res_w)

        judge_pid = _fork(run_judge)
        os.close(j_fd)
        os.close(res_w)
    if namespaces:
        if not cfg["root"]:
            _enter_user_ns()
        unshare(CLONE_NEWPID)  # the candidate becomes init of a pid namespace of its own

    def run_candidate() -> None:
        channel = c_fd if mode == "assert" else res_w
        _keep_only_fds([channel, out_w])
        _redirect_stdio(out_w)
        isolate(cfg, limits, uid=uid_c, namespaces=namespaces, new_pid_ns=namespaces, workdir=workdir)
        (candidate_rpc if mode == "assert" else candidate_io)(job, channel)

    cand_pid = _fork(run_candidate)
    os.close(c_fd if mode == "assert" else res_w)
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
    judge_exit = None
    if judge_pid is not None:
        _kill(judge_pid)
        judge_exit = _reap(judge_pid)
    if not namespaces:
        shutil.rmtree(workdir, ignore_errors=True)
    send_line(
        conn_fd,
        {
            "messages": messages,
            "reason": reason,
            "exit": exit_info,
            "judge_exit": judge_exit,
            "output": output[:2000].decode("utf-8", "replace"),
            "wall_s": round(time.monotonic() - start, 6),
        },
    )


# ------------------------------------------------------------------ the zygote


def _probe_namespaces(root: bool) -> bool:
    """Can a child create the namespaces we need? Tried once, at start."""
    pid = os.fork()
    if pid == 0:
        try:
            if not root:
                _enter_user_ns()
            unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID)
            mount(None, "/", None, MS_REC | MS_PRIVATE)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


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


def main() -> None:
    ctrl = socket.socket(fileno=int(sys.argv[1]))
    settings = json.loads(sys.argv[2])
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            __import__(name)
    root = os.geteuid() == 0
    namespaces = bool(settings.get("namespaces", True)) and _probe_namespaces(root)
    paths = sorted(
        {
            os.path.realpath(p)
            for p in [sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path]
            if p and os.path.isdir(p)
        }
    )
    # Keep only outermost directories: binding /a also brings /a/b along.
    paths = [p for p in paths if not any(p.startswith(q + os.sep) for q in paths if q != p)]
    cfg = {
        "root": root,
        "namespaces": namespaces,
        "drop_uid": root,
        "uid_base": int(settings.get("uid_base", 61000)),
        "fallback_tmp": settings.get("fallback_tmp") or tempfile.gettempdir(),
        "python_paths": paths,
        "blocked_dirs": _blocked_dirs(paths) if root else [],
    }
    if namespaces:
        who = "an unprivileged uid per worker" if root else "the caller's uid (user namespace)"
        mode = f"namespaces (pid, net, mount, ipc), private tmpfs, {who}, rlimits"
    else:
        who = "an unprivileged uid per worker" if root else "the caller's uid"
        mode = f"WEAKER: no namespaces (the kernel refused); {who}, rlimits, audit hooks against sockets"
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    ctrl.sendall(json.dumps({"ready": True, "isolation": mode, "namespaces": namespaces}).encode())
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctrl, 16, 4)
        except InterruptedError:
            continue
        except OSError:
            break
        if not msg:
            break  # the parent went away
        for fd in fds:
            if os.fork() == 0:
                code = 0
                try:
                    ctrl.close()
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for other in fds:
                        if other != fd:
                            os.close(other)
                    monitor(fd, cfg)
                except BaseException:
                    code = 70
                finally:
                    os._exit(code)
            os.close(fd)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        main()
