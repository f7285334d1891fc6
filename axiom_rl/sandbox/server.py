"""The sandbox's process side: one long-lived monitor per worker slot, one fresh fork per job.

Started by `axiom_rl.sandbox.pool.Sandbox` as `python -E -S -B server.py CHANNEL_FD SETTINGS`, once
per worker slot, with a scrubbed environment, in a session of its own, without the site module
(see use_site). Stdlib only.

    parent (trusted; holds the expected outputs, which never come here)
      └─ monitor, one per slot (this file's main loop: interpreter and common modules loaded
         │  once; trusted; reads a job, enforces limits, reports, waits for the next job)
         ├─ judge (one per slot, forked before any job; assert-style tests the parent cannot
         │         replay (judging.py): runs each job's trusted test code, in which the
         │         candidate function is an RPC stub)
         └─ forker (one per slot, forked before any job; never holds a job's data: see Forker)
              └─ candidate (per job, untrusted: a fresh fork in a fresh pid namespace, in
                            the slot's mount namespace; reads its job itself, answers the
                            monitor with plain data only, and is killed, with everything it
                            started, at the end)

Untrusted code never runs in the monitor or the forker, so nothing of one submission reaches the
next: each candidate is forked from the forker's clean state, which never held a job, and what it
wrote in its scratch directories is removed before the next one starts
(isolation.uses_slot_scratch). One process per job, because with a preloaded interpreter the cost
of a job is mostly the kernel's work to fork and tear down a process. See
`axiom_rl/sandbox/__init__.py` for the policy: what is and is not covered.

This file holds the monitor: its start (`configure`), its loop, one job (`run_job`), the forker
and the judge.
Beside it, imported as sibling modules (stdlib only, as this file is):
- isolation.py: what makes a fork a sandboxed process, and the probes of what this kernel allows;
- candidate.py: what runs inside the candidate, the only place the submission's code runs;
- framing.py: one JSON value per line between the processes;
- judging.py and codec.py, shared with the trusted parent; syscall_filter.py, landlock_rules.py.
"""

from __future__ import annotations

import contextlib
import gc
import json
import marshal
import os
import select
import signal
import socket
import stat
import sys
import time
import traceback

# Sibling modules: the script's directory is sys.path[0] until we drop it below.
import codec
import judging
import syscall_filter
from candidate import candidate_io, candidate_rpc, warm_up
from framing import LineReader, ValueBudget, memory_file, read_memory_file, send_line
from isolation import (
    CLONE_NEWPID,
    NAMESPACED_WORKDIR,
    NPROC_SLACK,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_PDEATHSIG,
    SCRATCH_DIRS,
    apply_limits,
    become_init_of_own_namespaces,
    blocked_dirs,
    caller_private_dirs,
    caller_threads,
    empty_directory,
    empty_slot_scratch,
    is_within,
    isolate,
    keep_only_fds,
    mount_template,
    moved_python_dirs,
    package_dirs_within,
    prctl,
    probe_namespaces,
    probe_syscall_filter,
    python_paths,
    redirect_stdio,
    setns,
    slot_netns,
    submission_environment,
    system_and_interpreter_dirs,
    unshare,
    use_moved_python,
    uses_slot_scratch,
    weak_mode_landlock,
)

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(codec.__file__)):
    sys.path.pop(0)  # nothing else of ours is importable by submissions

FD_SIZE = 4  # bytes of a descriptor in SCM_RIGHTS data (a C int)

# Modules a submission commonly imports, loaded once here so each fork gets them for free. Not
# `random` (nor `statistics`, which imports it): at import it registers an at-fork hook that
# reseeds it in every child, 46 page faults and about 0.09 ms of CPU in every candidate, which
# most submissions never use (none of HumanEval's or MBPP's solutions imports it); one that does
# pays its import, about 0.7 ms.
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


def use_site(prefix: str, exec_prefix: str, dirs: list[str]) -> None:
    """What the site module does for imports, without running code; the monitor runs without
    it (-S). The caller's prefixes (a venv's directory: `site` sets them, and what a submission
    may see of the tree follows them: isolation.system_and_interpreter_dirs), its site-packages
    directories and the directories their .pth files list go on sys.path; the .pth files'
    `import` lines (an editable install's finder, setuptools' distutils shim, whatever else an
    environment installs) do not run. Whatever they import would be loaded here, in trusted
    code, and be in every candidate's copy of this process: on one host they made every fork
    cost 0.4 ms more (193 mappings and 12.1 MB of private memory instead of 170 and 8.9). Also
    the builtins exit() and quit(), which a submission may call as it could anywhere."""
    import site  # with -S, importing it runs nothing

    site.setquit()
    sys.prefix, sys.exec_prefix = prefix, exec_prefix
    for top in dirs:
        if not os.path.isdir(top) or top in sys.path:
            continue
        sys.path.append(top)
        with contextlib.suppress(OSError):
            for name in sorted(n for n in os.listdir(top) if n.endswith(".pth")):
                with contextlib.suppress(OSError, UnicodeDecodeError), open(os.path.join(top, name)) as f:
                    for line in f.read().splitlines():
                        line = line.rstrip()
                        if not line or line.startswith(("#", "import ", "import\t")):
                            continue
                        path = os.path.abspath(os.path.join(top, line))
                        if os.path.isdir(path) and path not in sys.path:
                            sys.path.append(path)


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
        msg, got, _, _ = socket.recv_fds(sock, 1 << 16, 2)  # a job line: the tests come in a memory file
        if not msg:
            return
        buf, fds = buf + msg, fds + got
        if not buf.endswith(b"\n"):
            continue
        job = json.loads(buf)
        try:
            job.update(json.loads(read_memory_file(fds[1])))  # the test code and prelude, from the parent
            report = judge(job, fds[0])
        finally:
            for fd in fds:
                os.close(fd)
        buf, fds = b"", []
        send_line(channel, report)


def judge(job: dict, sock_fd: int) -> dict:
    """Run the trusted test code against the candidate; return how many tests passed."""
    limits = job["limits"]
    wall = limits["call_timeout"] * limits["wall_factor"] + 1.0
    reader = LineReader(sock_fd, limits["result_mb"] << 20, budget=ValueBudget())
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
    return exit_info(_wait(pid))


def _wait(pid: int) -> int:
    """Wait for a child; its wait status, or -1 if it was not ours to wait for."""
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return -1


def exit_info(status: int) -> dict:
    """A wait status as the report's exit code and signal (both None: not known)."""
    if status < 0:
        return {"code": None, "signal": None}
    if os.WIFSIGNALED(status):
        return {"code": None, "signal": os.WTERMSIG(status)}
    return {"code": os.WEXITSTATUS(status), "signal": None}


def _kill(pid: int) -> None:
    # The candidate is init of its pid namespace: killing it kills everything it started, even
    # processes that left its session. Without namespaces, its process group goes with it here,
    # and whatever left the group with _kill_orphans. (No context managers: see forker_loop.)
    try:  # noqa: SIM105
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    try:  # noqa: SIM105
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _remove(path: str) -> None:
    """Remove what a job left in its directory (every process of the job is dead by then): see
    isolation.empty_directory."""
    if os.path.islink(path) or not os.path.isdir(path):
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            empty_directory(fd)
        finally:
            os.close(fd)
        os.rmdir(path)


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


def _kill_orphans() -> None:
    """Without namespaces: kill every process a job left behind. The forker is their subreaper
    (see Forker): a daemon that left the submission's session is re-parented to it, not to
    init, when its parent dies. Repeated, since one may fork while it is being killed."""
    for _ in range(1000):
        orphans = _children()
        if not orphans:
            return
        for pid in orphans:
            _kill(pid)
            _reap(pid)


def run_job(job: dict, cfg: dict, tests_fd: int = -1) -> dict:
    """Run one job: the slot's forker starts its candidate (see Forker), this watches it. For
    assert-style tests, `tests_fd` is a memory file the parent wrote the test code to: it goes to
    the judge unread."""
    start = time.monotonic()
    limits, mode = job["limits"], job["mode"]
    if not cfg["namespaces"] and not cfg["root"]:
        # RLIMIT_NPROC counts every thread of the caller's uid here (no user namespace of its own
        # to count in): a limit of 16 would leave a desktop user's submission no thread at all.
        # The count is at most half a second old; the slack covers what the caller starts since.
        limits = {**limits, "nproc": limits["nproc"] + caller_threads() + NPROC_SLACK}
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
    # marshal, not JSON: the candidate reads it in half the time (0.16 against 0.33 ms of CPU and
    # 57 against 103 page faults, HumanEval's jobs). Plain data from here, read before the
    # candidate runs any of the submission.
    spec_fd = memory_file(marshal.dumps({"job": job, "limits": limits}), "axiom-job")
    try:
        cfg["forker"].start(spec_fd, channel, out_w)
    finally:
        for fd in (spec_fd, channel, out_w):
            os.close(fd)

    # Watch result lines, output volume, per-call progress and the wall clock. CPU time is capped
    # inside the candidate (a timer per call, RLIMIT_CPU overall); these wall-clock limits catch
    # code that sleeps or blocks, and are `wall_factor` times the CPU limits so that a busy
    # machine does not turn correct programs into timeouts.
    wall_total = limits["cpu_s"] * limits["wall_factor"] + 1.0
    wall_call = limits["call_timeout"] * limits["wall_factor"] + 1.0
    reader = LineReader(res_r, limits["result_mb"] << 20, budget=ValueBudget())
    messages: list = []
    output = bytearray()
    out_open, reason, why, finished = True, "", "", False
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
        except ValueError as e:  # not JSON, or more than the job's results may hold (ValueBudget)
            reason, why = "protocol", str(e)[:200]
            break
        if reader.eof and not finished:
            break
    # A candidate that reported everything needs no exit status: its end (the kill, the wait for
    # every process of the job, the clean-up) overlaps the report and the next job's arrival,
    # and the forker finishes it before it forks again. Without namespaces the job's directory
    # is on disk: it is gone before the report.
    exit_info = cfg["forker"].end(wait=not finished or not cfg["namespaces"])
    judge_exit = None
    if mode == "assert" and not finished:
        # The judge did not answer in time (or its channel broke): it may still be running the
        # tests. Start a fresh one; the report says the candidate's fate, as usual.
        judge_exit = cfg["judge"].restart(cfg)
    os.close(res_r)
    os.close(out_r)
    return {
        "messages": messages,
        "reason": reason,
        "why": why,
        "exit": exit_info,
        "judge_exit": judge_exit,
        "output": output[:2000].decode("utf-8", "replace"),
        "wall_s": round(time.monotonic() - start, 6),
    }


# ------------------------------------------------------------------ the monitor's start and loop


class Forker:
    """The slot's forking process, forked from the monitor once, before any job: every candidate
    is a fork of it, not of the monitor.

    It never holds a submission's data. A job reaches its candidate in a memory file that only
    the candidate reads, after the fork; the monitor, which reads jobs, results and output, is
    never copied into a candidate. (Candidates forked from the monitor itself could find earlier
    submissions' code and returned values in the freed memory they started with: a submission
    could return what a correct one before it on the same slot had returned.)

    The monitor, which never forks, also pays no copy-on-write faults for its work on a job:
    after each fork, every page a process writes is faulted again (copied while the child
    lives), and the monitor's watching and reporting wrote some 250 pages a job.

    Per job, one byte from the monitor at a time, and at most a 4-byte exit status back: "j" with
    the job's memory file, the candidate's channel and its output pipe attached (start); then "e"
    when the monitor is done watching (end): the
    forker kills the candidate, with everything it started, waits for it, and cleans up after
    the job (the slot's scratch directories, or the job's directory without namespaces) before
    it reads the next command. "w" instead of "e" also asks for the exit status. The candidate
    is the forker's child, so no pid is ever signalled after it could be reused."""

    def __init__(self, cfg: dict) -> None:
        ours, theirs = socket.socketpair()

        def run() -> None:
            keep = [theirs.fileno(), cfg["own_pid_ns"], *cfg["slot_scratch"], *_slot_fds_for_candidates(cfg)]
            keep_only_fds([fd for fd in keep if fd >= 0])
            redirect_stdio(None)
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if not cfg["namespaces"]:  # what a job's processes leave behind comes here (_kill_orphans)
                prctl(PR_SET_CHILD_SUBREAPER, 1)
            forker_loop(theirs.fileno(), cfg)

        self.pid = _fork(run)
        theirs.close()
        self.sock = ours

    def start(self, spec_fd: int, channel: int, out_w: int) -> None:
        socket.send_fds(self.sock, [b"j"], [spec_fd, channel, out_w])

    def end(self, wait: bool) -> dict | None:
        """End the job's candidate; with `wait`, once it is dead, its exit status."""
        self.sock.sendall(b"w" if wait else b"e")
        if not wait:
            return None
        reply = b""
        while len(reply) < 4 and (chunk := self.sock.recv(4 - len(reply))):
            reply += chunk
        if len(reply) < 4:
            raise RuntimeError("the slot's forker is gone")  # the monitor exits; the pool replaces the slot
        return exit_info(int.from_bytes(reply, "little", signed=True))


def forker_loop(channel: int, cfg: dict) -> None:
    """The forker's loop (see Forker): it forks, kills and waits, and never reads a job.

    Kept to few Python objects and calls: after each fork, every page this process writes is
    faulted again, so each object it touches costs. (A JSON reply and the socket module's
    descriptor helpers took 75 of 140 faults a job.)"""
    sock = socket.socket(fileno=channel)
    ancillary = socket.CMSG_SPACE(3 * FD_SIZE)
    pid = 0
    try:
        while True:
            command, received, _, _ = sock.recvmsg(1, ancillary)
            if command == b"j" and pid == 0 and received and len(received[0][2]) == 3 * FD_SIZE:
                data = received[0][2]
                fds = [
                    int.from_bytes(data[i : i + FD_SIZE], sys.byteorder) for i in (0, FD_SIZE, 2 * FD_SIZE)
                ]
                if cfg["namespaces"]:
                    unshare(CLONE_NEWPID)  # the candidate becomes init of a pid namespace of its own...
                try:
                    pid = _fork(run_candidate, fds[0], fds[1], fds[2], cfg)
                finally:
                    if cfg["namespaces"]:
                        # ...and ours is the namespace for our next child again: unshare makes a
                        # new one only as a child of the namespace we are in (EINVAL otherwise).
                        setns(cfg["own_pid_ns"], CLONE_NEWPID)
                    for fd in fds:
                        os.close(fd)
            elif command in (b"e", b"w") and pid:
                _kill(pid)
                status = _wait(pid)  # init of the job's pid namespace: every process of it is gone
                pid = 0
                _clean_up_after_job(cfg)
                if command == b"w":
                    os.write(channel, status.to_bytes(4, "little", signed=True))
            else:
                return  # the monitor is gone (or broke the protocol): its death signal ends us too
    finally:
        if pid:
            _kill(pid)


def _clean_up_after_job(cfg: dict) -> None:
    """Once every process of a job is dead: what it left in the slot's scratch directories, or
    without namespaces, the processes that left its group and its directory on disk."""
    if cfg["slot_scratch"] and not empty_slot_scratch(cfg["slot_scratch"]):
        cfg["slot_scratch"] = []  # left dirty: later jobs get fresh mounts over it
    if not cfg["namespaces"]:
        _kill_orphans()
        for name in os.listdir(cfg["slot_dir"]):  # its directory, and anything else it made there
            _remove(os.path.join(cfg["slot_dir"], name))


def _slot_fds_for_candidates(cfg: dict) -> list[int]:
    """The slot's descriptors a candidate's isolate() uses (-1 where the slot has none): the forker
    keeps them open for every candidate, each candidate keeps them and nothing else of the slot's."""
    return [cfg["slot_netns"], cfg["mount_template"], cfg["landlock_ruleset"], *cfg["path_handles"].values()]


def run_candidate(spec_fd: int, channel: int, out_w: int, cfg: dict) -> None:
    """In a fresh fork of the forker: read the job, become a sandboxed process, run the submission."""
    spec = marshal.loads(read_memory_file(spec_fd))
    job, limits, uid = spec["job"], spec["limits"], cfg["uid"]
    workdir = NAMESPACED_WORKDIR
    if not cfg["namespaces"]:  # weak mode: a private directory on disk, removed after the job
        import tempfile

        workdir = tempfile.mkdtemp(dir=cfg["slot_dir"])
        if uid is not None:
            os.chown(workdir, uid, uid)
        submission_environment(workdir)  # with namespaces, every job's is already the forker's
    keep_only_fds([channel, out_w, *_slot_fds_for_candidates(cfg)])
    redirect_stdio(out_w)
    isolate(cfg, limits, uid, workdir, fresh_mounts=not uses_slot_scratch(cfg, limits))
    if cfg["moved_python"]:
        use_moved_python(cfg["moved_python"])
    (candidate_io if job["mode"] == "io" else candidate_rpc)(job, channel)


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
            keep_only_fds([theirs.fileno()])
            redirect_stdio(None)
            os.setsid()
            apply_limits(cfg["judge_limits"], nproc=False)
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


def configure(settings: dict) -> tuple[dict, str]:
    root = os.geteuid() == 0
    namespaces = bool(settings.get("namespaces", True)) and probe_namespaces(root)
    if namespaces and not root:
        become_init_of_own_namespaces()
    paths = python_paths()
    # The caller's home and runtime directories, hidden from submissions that run as its uid.
    private = [] if root else caller_private_dirs(settings.get("private_dirs", []))
    cfg = {
        "root": root,
        "namespaces": namespaces,
        # Started as root, the pool claims a uid no other slot on the machine uses (pool.py: _UidClaims).
        "uid": int(settings["uid"]) if root else None,
        "fallback_tmp": settings.get("fallback_tmp") or os.environ.get("TMPDIR") or "/tmp",
        "python_paths": paths,
        # Covered by an empty tmpfs in the template, the interpreter's paths inside bound back:
        # as root, what the slot's uid could not enter anyway; without root, the caller's home
        # directory (keys, tokens: everything the caller's own uid could otherwise read).
        "blocked_dirs": blocked_dirs(paths) if root else (private if namespaces else []),
        "scratch_dirs": [d for d in SCRATCH_DIRS if os.path.isdir(d) and not os.path.islink(d)],
        # Some containers and VMs have a plain file there, not the device (see isolation.isolate).
        "null_is_a_file": not stat.S_ISCHR(os.stat(os.devnull).st_mode),
        "own_pid_ns": os.open("/proc/self/ns/pid", os.O_RDONLY) if namespaces else -1,
        # Reused across jobs only as root: an unprivileged candidate cannot change anything in it,
        # and every process of the previous job is dead before the slot runs the next one. In a
        # user namespace the candidate would own it, so there each job gets a fresh one.
        "slot_netns": slot_netns() if namespaces and root else -1,
        "judge_limits": {"memory_mb": 4096, "cpu_s": 10**6, "disk_mb": 64, "nproc": 64},
        "syscall_filter": (
            probe_syscall_filter(shared_host=not namespaces) if settings.get("syscall_filter", True) else None
        ),
    }
    # Only the system's and the interpreter's directories in a submission's view of the tree.
    cfg["visible_dirs"] = (
        system_and_interpreter_dirs() if namespaces and syscall_filter.number("pivot_root") else []
    )  # left empty where this machine's pivot_root number is not known here (isolation.mount_template)
    under_scratch = [
        p for p in cfg["visible_dirs"] or paths if any(is_within(p, d) for d in cfg["scratch_dirs"])
    ]
    # An interpreter under a scratch directory (a venv in a clone under /tmp): in the view of the
    # tree it moves to a directory of its own (moved_python_dirs), so that the submission's /tmp
    # holds nothing but what it writes; each candidate then imports from there (use_moved_python).
    # In the host-tree view, bound back over each job's scratch tmpfs instead (isolate).
    cfg["moved_python"] = moved_python_dirs(under_scratch) if cfg["visible_dirs"] else {}
    cfg["python_under_scratch"] = [] if cfg["visible_dirs"] else under_scratch
    # axiom-rl itself, wherever it is installed within the view (site-packages, after a plain
    # `pip install`): its tasks hold their reference solutions, which a submission could import.
    cfg["hidden_dirs"] = package_dirs_within(cfg["visible_dirs"] or ["/"])
    # Started as root, the slot keeps its own scratch tmpfs mounts in the template, emptied after
    # each job (isolation.uses_slot_scratch). Not in a user namespace, where the candidate would
    # have the capabilities to change the template it shared; nor where a job needs mounts of
    # its own anyway (an interpreter bound back under a scratch directory, a /dev/null that is a
    # plain file).
    shared = root and namespaces and not cfg["python_under_scratch"] and not cfg["null_is_a_file"]
    cfg["slot_scratch_mb"] = int(settings.get("scratch_mb") or 0) if shared and cfg["scratch_dirs"] else 0
    cfg["mount_template"], cfg["slot_scratch"] = mount_template(cfg) if namespaces else (-1, [])
    cfg["slot_dir"], cfg["landlock"], cfg["landlock_ruleset"] = None, None, -1
    if not namespaces:
        # Each job's directory is made in this one, and whatever a job leaves in it removed after
        # it; Landlock lets candidates write here only (the slot's uid may pass through, as root).
        import tempfile  # weak mode only: it imports shutil, which loads zlib, bz2 and lzma

        cfg["slot_dir"] = tempfile.mkdtemp(prefix="axiom-sbx-", dir=cfg["fallback_tmp"])
        if root:
            os.chmod(cfg["slot_dir"], 0o711)
        # Nothing makes the tree read-only or hides the host's processes: Landlock instead.
        cfg["landlock"], cfg["landlock_ruleset"] = weak_mode_landlock(cfg)
    # Without namespaces nothing can be bound back: the candidate reaches what it may not enter
    # through handles opened here (see isolation.reach_through_handles).
    cfg["path_handles"] = (
        {
            p: os.open(p, os.O_PATH | os.O_DIRECTORY)
            for p in paths
            if any(is_within(p, top) for top in cfg["blocked_dirs"])
        }
        if not namespaces
        else {}
    )
    cfg["judge"] = Judge(cfg)
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
        filtered = "a seccomp filter (System V IPC refused)" if cfg["namespaces"] else "a seccomp filter"
    elif not settings.get("syscall_filter", True):
        filtered = "no seccomp filter (switched off)"
    else:
        filtered = f"no seccomp filter ({'the kernel refused it' if syscall_filter.program() else 'none for this CPU'})"
    if cfg["namespaces"]:
        files = "only the system's and the interpreter's files" if cfg["visible_dirs"] else "the host's files"
        tmp = "a tmpfs per slot, emptied after each job" if cfg["slot_scratch"] else "a private tmpfs"
        spaces = "pid, net, mount" if cfg["syscall_filter"] else "pid, net, mount, ipc"
        return f"namespaces ({spaces}), {files} (read-only) and {tmp}, {who}, rlimits, {filtered}"
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
    if settings.get("cpu") is not None:  # before any fork: the forker, judge and candidates inherit it
        with contextlib.suppress(OSError):  # the CPU went offline since: run anywhere
            os.sched_setaffinity(0, {settings["cpu"]})
    site = settings.get("site") or {}
    use_site(site.get("prefix", sys.prefix), site.get("exec_prefix", sys.exec_prefix), site.get("dirs", []))
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            __import__(name)
    cfg, mode = configure(settings)
    submission_environment(NAMESPACED_WORKDIR)  # every job's, with namespaces
    warm_up()  # the code every candidate runs, specialised once here (see warm_up)
    # Everything loaded so far is shared with every fork: keep the collector off those pages.
    gc.collect()
    gc.freeze()
    cfg["forker"] = Forker(cfg)  # before any job: see Forker
    # Each result line wakes the monitor, but as a batch task it does not preempt the candidate
    # that wrote it (on a pinned slot, the same CPU): the candidate goes on to its next call and
    # the monitor reads the lines together when it blocks or ends. A job of 31 calls: 2 context
    # switches instead of 31, 22 against 32 µs of the machine's CPU a call. It still gets its
    # share of the CPU, so wall-clock limits hold; the forker, the judge and the candidates, forked
    # before this or reset at fork, stay normal tasks.
    with contextlib.suppress(AttributeError, OSError):  # a platform without these policies
        os.sched_setscheduler(0, os.SCHED_BATCH | os.SCHED_RESET_ON_FORK, os.sched_param(0))
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
