"""Verification throughput: axiom-rl's sandbox pool vs the reference HumanEval harness approach.

Workloads, each run by both sides in the same invocation, alternating A B A B:
  (a) 1,000 mixed submissions of the built-in tasks: right, wrong, crashing, 5% infinite loops
      (and the same without the loops, whose timeouts cost both sides alike);
  (b) the 164 HumanEval canonical solutions (from ../shared/data, if present);
  (c) the same, made wrong: each returns `not` of its answer, and one in 20 loops forever.

Baseline ("he-harness"): what openai/human-eval's execution.py does, implemented here: for each
check a multiprocessing.Manager and one fresh multiprocessing.Process that exec()s
prompt + completion + tests under a `reliability_guard`, driven by a thread pool with one thread
per core. For (a), a submission's hidden tests become asserts in the check program (the simple
approach; expected values are then inside the untrusted process, which axiom-rl never allows).

Both sides use the same number of workers and the same per-submission time limit. The script
also checks that both reach the same verdicts (pass or not) on every submission, and fails
(exit 1, naming them) where they do not.

A third column is a reference point, not a sandbox: "fork server", what a fresh process per
check costs with no isolation at all. One preloaded interpreter per worker (the sandbox's own
list of preloaded modules) forks a child per check, which exec()s the same program as the
baseline (tests in the submission's own process, so gameable) under a wall-clock timer and
exits. The distance between it and axiom-rl is the price of what axiom-rl adds: namespaces,
limits, and the tests kept out of the submission's process: replayed in the parent over its
answers where they only call it with literal arguments (148 of the 164), else run in a separate
judge process that reaches the candidate by RPC.

    python benchmarks/verify_throughput.py [--rounds 3] [--mixed 1000] [--workers N] [--timeout 2]
    python benchmarks/verify_throughput.py --mixed 0 --rounds 7   # HumanEval only (under a minute)
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import faulthandler
import io
import multiprocessing
import os
import platform
import queue
import random
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from axiom_rl.sandbox import Sandbox  # noqa: E402
from axiom_rl.tasks import CodeTask, all_tasks, generate_problems, get_task  # noqa: E402
from axiom_rl.types import Problem  # noqa: E402
from axiom_rl.verifier import verify_many  # noqa: E402

HUMANEVAL = ROOT.parent / "shared" / "data" / "humaneval" / "HumanEval.jsonl"


# ------------------------------------------------------------------------------ the baseline
# After openai/human-eval human_eval/execution.py (MIT License, Copyright (c) OpenAI).


class TimeoutException(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float):
    def handler(signum, frame):
        raise TimeoutException("Timed out!")

    signal.setitimer(signal.ITIMER_REAL, seconds)
    signal.signal(signal.SIGALRM, handler)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


@contextlib.contextmanager
def swallow_io():
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
        yield


def reliability_guard(maximum_memory_bytes: int | None = None) -> None:
    """Upstream's guard: disables destructive functions (not a security sandbox, as it says)."""
    if maximum_memory_bytes is not None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (maximum_memory_bytes, maximum_memory_bytes))
        resource.setrlimit(resource.RLIMIT_DATA, (maximum_memory_bytes, maximum_memory_bytes))
    faulthandler.disable()
    import builtins
    import shutil
    import subprocess

    builtins.exit = None
    builtins.quit = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
                 "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown",
                 "chroot", "lchown", "getcwd", "chdir"):  # fmt: skip
        setattr(os, name, None)
    shutil.rmtree = None
    shutil.move = None
    shutil.chown = None
    subprocess.Popen = None
    sys.modules["ipdb"] = None
    sys.modules["joblib"] = None
    sys.modules["resource"] = None
    sys.modules["psutil"] = None
    sys.modules["tkinter"] = None


def _unsafe_execute(program: str, timeout: float, result) -> None:  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as dirname:
        rmtree, rmdir, chdir = __import__("shutil").rmtree, os.rmdir, os.chdir
        os.chdir(dirname)
        reliability_guard()
        try:
            with swallow_io(), time_limit(timeout):
                exec(program, {})
            result.append("passed")
        except TimeoutException:
            result.append("timed out")
        except BaseException as e:
            result.append(f"failed: {e}")
        __import__("shutil").rmtree, os.rmdir, os.chdir = rmtree, rmdir, chdir
        os.chdir("/")


def harness_check(program: str, timeout: float) -> bool:
    manager = multiprocessing.Manager()
    result = manager.list()
    p = multiprocessing.Process(target=_unsafe_execute, args=(program, timeout, result))
    p.start()
    p.join(timeout=timeout + 1)
    if p.is_alive():
        p.kill()
    passed = bool(result) and result[0] == "passed"
    manager.shutdown()
    return passed


def run_harness(programs: list[str], workers: int, timeout: float) -> list[bool]:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda prog: harness_check(prog, timeout), programs))


# ----------------------------------------------------------- a reference point: no isolation at all

FORK_SERVER = r"""
import io, os, signal, struct, sys, gc
sys.path.insert(0, ROOT)
for name in PRELOAD + ["axiom_rl.tasks.checkers"]:  # the checkers: the baseline's processes have them too
    __import__(name)
gc.collect()
gc.freeze()
requests, answers = sys.stdin.buffer, sys.stdout.buffer
while header := requests.read(12):
    size, timeout = struct.unpack("<Id", header)
    program = requests.read(size).decode()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        signal.setitimer(signal.ITIMER_REAL, timeout)  # SIGALRM's default action ends the child
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the server's pipes carry the protocol: the program gets none of them
            os.dup2(null, fd)
        sys.stdout = sys.stderr = io.StringIO()
        try:
            exec(program, {"__name__": "__main__"})
            os.write(w, b"1")
        finally:
            os._exit(0)
    os.close(w)
    passed = os.read(r, 1) == b"1"
    os.close(r)
    os.waitpid(pid, 0)
    answers.write(b"1" if passed else b"0")
    answers.flush()
"""


def sandbox_preload() -> list[str]:
    """The modules the sandbox's monitor preloads (server.py's PRELOAD, read without importing
    server.py, which is a script with sibling imports)."""
    tree = ast.parse((ROOT / "axiom_rl" / "sandbox" / "server.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "PRELOAD" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise RuntimeError("server.py has no PRELOAD list")


class ForkServers:
    """One preloaded interpreter per worker, each forking a child per check; see the docstring."""

    def __init__(self, workers: int) -> None:
        code = f"ROOT = {str(ROOT)!r}\nPRELOAD = {sandbox_preload()!r}\n{FORK_SERVER}"
        self.procs = [
            # Without the site module, as the sandbox's monitors run (server.py: use_site): the same image.
            subprocess.Popen(
                [sys.executable, "-S", "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            for _ in range(workers)
        ]
        self.free: queue.Queue = queue.Queue()
        for proc in self.procs:
            self.free.put(proc)

    def check(self, program: str, timeout: float) -> bool:
        proc = self.free.get()
        try:
            data = program.encode()
            proc.stdin.write(struct.pack("<Id", len(data), timeout) + data)
            proc.stdin.flush()
            answer = proc.stdout.read(1)
            if not answer:
                raise RuntimeError("a fork server died")
            return answer == b"1"
        finally:
            self.free.put(proc)

    def run(self, programs: list[str], timeout: float) -> list[bool]:
        with ThreadPoolExecutor(max_workers=len(self.procs)) as pool:
            return list(pool.map(lambda prog: self.check(prog, timeout), programs))

    def close(self) -> None:
        for proc in self.procs:
            proc.stdin.close()
            proc.wait(timeout=10)


# ------------------------------------------------------------------------------ workloads


def _mutations(problem: Problem, kind: str) -> str:
    ep, ref = problem.entry_point, problem.reference_solution
    if kind == "right":
        return ref
    if kind == "wrong":  # a plausible bug: the right function, off by a little
        return f"{ref}\n_reference = {ep}\ndef {ep}(*args):\n    out = _reference(*args)\n    return out + 1 if isinstance(out, int) and not isinstance(out, bool) else out[:-1] if out else None\n"
    if kind == "crash":
        return f"def {ep}(*args):\n    return args[0][10**9]\n"
    if kind == "syntax":
        return f"def {ep}(*args)\n    return 0\n"
    if kind == "loop":
        return f"def {ep}(*args):\n    while True:\n        pass\n"
    raise ValueError(kind)


def mixed_workload(n: int, seed: int = 0) -> list[tuple[Problem, str]]:
    rng = random.Random(seed)
    names = [t for t in all_tasks() if isinstance(get_task(t), CodeTask)]
    pool = [p for t in names for d in (1, 3, 5, 7, 10) for p in generate_problems(t, d, 2, seed=seed)]
    kinds = ["right"] * 50 + ["wrong"] * 25 + ["crash"] * 12 + ["syntax"] * 8 + ["loop"] * 5
    items = []
    for i in range(n):
        problem = rng.choice(pool)
        items.append((problem, _mutations(problem, kinds[i % len(kinds)])))
    rng.shuffle(items)
    return items


def humaneval_mutant(problem: Problem, i: int) -> str:
    """A wrong canonical solution: every 20th loops forever (the entry point redefined as a
    loop), the others return `not` of what they returned (wrong for nearly every test; a bare
    `return` becomes a syntax error)."""
    code = problem.reference_solution or ""
    if i % 20 == 0:
        return f"{code}\n\ndef {problem.entry_point}(*args, **kwargs):\n    while True:\n        pass\n"
    # In the solution's body, not in the prompt's helpers: the two sides differ there by design
    # (axiom-rl's judge runs the tests with the problem's own helpers, which a submission cannot
    # redefine; the harness runs them with the submission's).
    prelude = str(problem.metadata.get("prelude") or "")
    head = prelude if prelude and code.startswith(prelude) else ""
    return head + code[len(head) :].replace("return ", "return not ", 1)


def harness_program_for(problem: Problem, code: str) -> str:
    """The simple approach: the hidden tests become asserts in the submission's own process,
    judged by the same checkers axiom-rl uses (imported there, since the process is forked)."""
    if problem.test_code:
        prompt = problem.metadata.get("prelude", "")
        body = code[len(prompt) :] if code.startswith(prompt) else code
        return f"{prompt}{body}\n{problem.test_code}\ncheck({problem.entry_point})\n"
    lines = [code, "from axiom_rl.tasks.checkers import run_checker as _check"]
    for t in problem.tests:
        args = list(t.args)
        lines.append(
            f"assert _check({problem.checker!r}, {args!r}, {t.expected!r}, {problem.entry_point}(*{args!r}))[0]"
        )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ driver


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="A/B repetitions (medians and ranges are reported)")
    ap.add_argument("--mixed", type=int, default=1000, help="size of workload (a); 0 skips it")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=2.0, help="seconds per submission, both sides")
    args = ap.parse_args()
    if args.mixed < 0 or args.rounds < 1 or args.workers < 1 or args.timeout <= 0:
        ap.error("--mixed must be >= 0, --rounds and --workers >= 1, --timeout > 0")

    from axiom_rl.tasks.importers import import_humaneval

    mixed = mixed_workload(args.mixed)
    workloads = (
        {
            "mixed built-in (a)": mixed,
            # (a) without its infinite loops: what a verification costs when nothing times out.
            "(a) without loops": [(p, c) for p, c in mixed if "while True" not in c],
        }
        if args.mixed
        else {}
    )
    if HUMANEVAL.exists():
        he = import_humaneval(HUMANEVAL)
        workloads["HumanEval canonical (b)"] = [(p, p.reference_solution) for p in he]
        workloads["HumanEval mutated (c)"] = [(p, humaneval_mutant(p, i)) for i, p in enumerate(he)]
    else:
        print(f"note: {HUMANEVAL} not found; workload (b) skipped")

    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(
        f"workers {args.workers}, timeout {args.timeout}s per submission, {args.rounds} rounds alternating A/B\n"
    )
    sandbox = Sandbox(workers=args.workers).start()
    print(f"axiom-rl sandbox: {sandbox.isolation}")
    fork_servers = ForkServers(args.workers)
    print(
        "fork server (a reference point, no isolation): a preloaded fork per check, tests in its own process\n"
    )
    results = {}
    for name, items in workloads.items():
        problems = [p for p, _ in items]
        codes = [c for _, c in items]
        programs = [harness_program_for(p, c) for p, c in items]
        ours_t, base_t, fork_t = [], [], []
        agree = True
        disagreements: set[str] = set()
        fenced = [f"```python\n{c}\n```" for c in codes]
        for _ in range(args.rounds):
            start = time.perf_counter()
            verdicts = verify_many(problems, fenced, sandbox, timeout=args.timeout)
            ours_t.append(time.perf_counter() - start)
            start = time.perf_counter()
            passed = run_harness(programs, args.workers, args.timeout)
            base_t.append(time.perf_counter() - start)
            start = time.perf_counter()
            forked = fork_servers.run(programs, args.timeout)
            fork_t.append(time.perf_counter() - start)
            ours_pass = [v.ok for v in verdicts]
            agree = agree and ours_pass == passed == forked
            disagreements |= {
                f"{p.id} (axiom-rl {a}, harness {b}, fork server {c})"
                for p, a, b, c in zip(problems, ours_pass, passed, forked)
                if not a == b == c
            }
        n = len(items)
        ours_rate = [n / t for t in ours_t]
        base_rate = [n / t for t in base_t]
        fork_rate = [n / t for t in fork_t]
        ratio = [a / b for a, b in zip(ours_rate, base_rate)]
        fork_ratio = [a / b for a, b in zip(fork_rate, base_rate)]
        results[name] = {
            "n": n,
            "axiom_per_s": statistics.median(ours_rate),
            "axiom_range": (min(ours_rate), max(ours_rate)),
            "harness_per_s": statistics.median(base_rate),
            "harness_range": (min(base_rate), max(base_rate)),
            "ratio": statistics.median(ratio),
            "ratio_range": (min(ratio), max(ratio)),
            "fork_per_s": statistics.median(fork_rate),
            "fork_ratio": statistics.median(fork_ratio),
            "fork_ratio_range": (min(fork_ratio), max(fork_ratio)),
            "passed": sum(ours_pass),
            "agree": agree,
            "disagreements": sorted(disagreements),
        }
    sandbox.close()
    fork_servers.close()

    print(
        f"{'workload':<26} {'n':>5}  {'axiom-rl /s (range)':>24}  {'he-harness /s (range)':>24}  {'ratio (range)':>18}"
        f"  passed  same verdicts  {'fork server /s, ratio (range)':>32}"
    )
    for name, r in results.items():
        print(
            f"{name:<26} {r['n']:>5}  {r['axiom_per_s']:>9.1f} ({r['axiom_range'][0]:.1f}-{r['axiom_range'][1]:.1f})"
            f"  {r['harness_per_s']:>9.1f} ({r['harness_range'][0]:.1f}-{r['harness_range'][1]:.1f})"
            f"  {r['ratio']:>6.2f}x ({r['ratio_range'][0]:.2f}-{r['ratio_range'][1]:.2f})  {r['passed']:>6}  {r['agree']!s:>12}"
            f"  {r['fork_per_s']:>9.1f}, {r['fork_ratio']:.2f}x ({r['fork_ratio_range'][0]:.2f}-{r['fork_ratio_range'][1]:.2f})"
        )

    differ = {name: r["disagreements"] for name, r in results.items() if r["disagreements"]}
    if differ:  # a throughput figure is worth nothing if the verdicts differ
        for name, ids in differ.items():
            print(f"verdicts differ in {name}: {len(ids)} submissions, e.g. {'; '.join(ids[:3])}")
        sys.exit(1)


if __name__ == "__main__":
    main()
