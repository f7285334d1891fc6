"""Soak: a bounded hostile mix through the sandbox pool, as the trainer uses it, for a long time.

Every round verifies the same mix, shuffled: ordinary submissions (right, wrong, crashing) and
every attack the sandbox is meant to hold (below, CASES), through `verify_many` on one
`Sandbox`, the way a training step verifies its completions. It reports, per interval:
verifications per second, the parent's resident memory and open descriptors, and the verdicts
that should not have happened (an attack that passed or earned reward, an ordinary submission
that did not get its verdict). At the end: what was left behind (processes of the sandbox's
uids or namespaces, mounts, files in /tmp and /dev/shm), every internal_error with its cause,
and a last line `internal errors: N`.

    python benchmarks/soak.py --minutes 30          # the figure in docs/benchmarks.md
    python benchmarks/soak.py --minutes 2           # a short check
    python benchmarks/soak.py --minutes 5 --busy 2  # with 2 processes spinning beside it

`--busy N` starts N processes that keep the CPUs busy the whole time (a loaded host, where a
verification's wall clock runs long): what the CI once showed as an unexplained internal_error.
Exits 1 if anything of the above went wrong (a leftover, an internal error, an attack that
earned reward), else 0; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import multiprocessing
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from axiom_rl.sandbox import Limits, Sandbox  # noqa: E402
from axiom_rl.sandbox.pool import UID_BASE, UID_COUNT  # noqa: E402
from axiom_rl.tasks import generate_problems  # noqa: E402
from axiom_rl.tasks.importers import import_humaneval  # noqa: E402
from axiom_rl.types import INTERNAL_ERROR, PASSED, Problem  # noqa: E402
from axiom_rl.verifier import verify_many  # noqa: E402

HUMANEVAL = ROOT.parent / "shared" / "data" / "humaneval" / "HumanEval.jsonl"


@dataclass(frozen=True)
class Case:
    """One kind of submission: its code (a function `{ep}` of the problem) and what it must get."""

    name: str
    code: str
    honest: bool = False  # right: must pass; otherwise it must earn nothing


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


# Each attack's code defines the entry point `{ep}` of an edit-distance problem: `{ep}(a, b)`.
WRITE_LINE = """
import os
def {ep}(a, b):
    line = {line}
    for fd in range(3, 64):
        try:
            os.write(fd, line)
        except OSError:
            pass
    return -1
"""
CASES = [
    Case("right", "{solution}", honest=True),
    Case("wrong", "def {ep}(a, b):\n    return -1"),
    Case("syntax error", "def {ep}(a, b) return 0"),
    Case("raises", "def {ep}(a, b):\n    raise ValueError('no')"),
    Case("infinite loop", "def {ep}(a, b):\n    while True:\n        pass"),
    Case("sleeps", "import time\ndef {ep}(a, b):\n    time.sleep(10**6)"),
    Case("memory bomb", "def {ep}(a, b):\n    x = [bytearray(1 << 20) for _ in range(10**6)]"),
    Case(
        "fork bomb",
        "import os\ndef {ep}(a, b):\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass",
    ),
    Case("prints a gigabyte", "def {ep}(a, b):\n    while True:\n        print('x' * 65536)"),
    Case("deep recursion", "def {ep}(a, b):\n    return {ep}(a, b) + 1"),
    Case("huge result", "def {ep}(a, b):\n    return 'x' * (64 << 20)"),
    Case("nested result", WRITE_LINE.replace("{line}", "b'[' * 3000 + b']' * 3000 + b'\\n'")),
    Case(
        "millions of tiny containers",
        WRITE_LINE.replace(
            "{line}", "b'{\"i\":0,\"ok\":true,\"value\":[' + b'[],' * 10_000_000 + b'[]]}\\n'"
        ),
    ),
    Case(
        "writes everywhere",
        "import os\ndef {ep}(a, b):\n"
        "    for d in ('/', '/etc', '/usr', '/root', '/home', '/var/tmp', '/dev/shm', '/tmp', os.getcwd()):\n"
        "        for i in range(50):\n"
        "            try:\n"
        "                open(os.path.join(d, f'axiom-soak-{i}'), 'w').write('x' * 4096)\n"
        "            except OSError:\n"
        "                pass\n"
        "    return -1",
    ),
    Case(
        "signals everyone",
        "import os, signal\ndef {ep}(a, b):\n"
        "    for pid in [-1, 1, os.getppid()] + [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
        "        try:\n"
        "            os.kill(pid, signal.SIGKILL)\n"
        "        except OSError:\n"
        "            pass\n"
        "    return -1",
    ),
    Case(
        "network",
        "import socket\ndef {ep}(a, b):\n"
        "    for host in (('1.1.1.1', 53), ('127.0.0.1', 22)):\n"
        "        try:\n"
        "            socket.create_connection(host, timeout=0.5)\n"
        "        except OSError:\n"
        "            pass\n"
        "    return -1",
    ),
    Case(
        "imports the reference",
        "def {ep}(*args):\n"
        "    from axiom_rl.tasks import get_task\n"
        "    return type(get_task('edit_distance')).solution(*args)",
    ),
    Case(
        "spinning children off its CPU",
        "import os, time\ndef {ep}(a, b):\n"
        "    for _ in range(8):\n"
        "        if os.fork() == 0:\n"
        "            for call in (os.setsid, lambda: os.sched_setaffinity(0, range(os.cpu_count()))):\n"
        "                try:\n"
        "                    call()\n"
        "                except OSError:\n"
        "                    pass\n"
        "            while True:\n"
        "                pass\n"
        "    time.sleep(1.0)\n"
        "    return -1",
    ),
    Case(
        "locks and watches",
        "import ctypes, fcntl, os\ndef {ep}(a, b):\n"
        "    fd = os.open('/etc/passwd', os.O_RDONLY)\n"
        "    for call in (lambda: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB),\n"
        "                 lambda: fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB),\n"
        "                 lambda: ctypes.CDLL(None).inotify_init1(0)):\n"
        "        try:\n"
        "            call()\n"
        "        except OSError:\n"
        "            pass\n"
        "    return -1",
    ),
    Case(
        "dumpable, then crashes",
        "import ctypes, resource\ndef {ep}(a, b):\n"
        "    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)\n"
        "    try:\n"
        "        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
        "    except (OSError, ValueError):\n"
        "        pass\n"
        "    ctypes.string_at(0)",
    ),
    Case(
        "exits after answering",
        "import os\ndef {ep}(a, b):\n    os._exit(0)",
    ),
]
# The same edit-distance problem for every case: its tests are known, its reference is the
# right answer. HumanEval's checks (assert-style: replayed in the parent, or the judge) join
# when ../shared/data is there.


def build_rows(rng: random.Random, humaneval: list[Problem]) -> list[tuple[str, Problem, str]]:
    """One round: every case once on its own problem, ordinary traffic beside it (right and wrong
    edit distance, HumanEval's canonical solutions and a do-nothing body), shuffled."""
    problems = generate_problems("edit_distance", 4, len(CASES) + 8, seed=rng.randrange(10**6), split="eval")
    rows = []
    for case, p in zip(CASES, problems):
        code = case.code.replace("{solution}", p.reference_solution or "").replace(
            "{ep}", p.entry_point or ""
        )
        rows.append((case.name, p, fenced(code)))
    for p in problems[len(CASES) :]:
        rows.append(("right", p, fenced(p.reference_solution or "")))
    for p in rng.sample(humaneval, min(8, len(humaneval))):
        rows.append(("humaneval right", p, fenced(p.reference_solution or "")))
        rows.append(("humaneval does nothing", p, "    return None\n"))
    rng.shuffle(rows)
    return rows


def honest(name: str) -> bool:
    return name in ("right", "humaneval right")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def sandbox_processes() -> list[str]:
    """Processes of a sandbox uid (as root), or of our uid in another pid namespace (without)."""
    me, found = os.getuid(), []
    my_ns = os.readlink("/proc/self/ns/pid")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
            ns = os.readlink(f"/proc/{pid}/ns/pid")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()[:60]
        except (OSError, StopIteration, ValueError):
            continue
        if (me == 0 and UID_BASE <= uid < UID_BASE + UID_COUNT) or (me != 0 and uid == me and ns != my_ns):
            found.append(f"{pid} {cmd!r}")
    return found


def mounts() -> int:
    with open("/proc/self/mountinfo") as f:
        return sum(1 for _ in f)


def scratch_entries() -> set[str]:
    found = set()
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        with contextlib.suppress(OSError):
            found |= {f"{d}/{n}" for n in os.listdir(d) if n.startswith(("axiom-soak", "axiom-sbx-"))}
    return found


def spin() -> None:
    while True:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="how long to run (default 30)")
    ap.add_argument("--workers", type=int, default=None, help="sandbox slots (default: one per CPU)")
    ap.add_argument("--timeout", type=float, default=2.0, help="CPU seconds per submission (default 2)")
    ap.add_argument("--intervals", type=int, default=10, help="rows of the report over time (default 10)")
    ap.add_argument("--busy", type=int, default=0, help="processes spinning beside it (default 0)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not args.minutes > 0:
        ap.error("--minutes must be above 0")
    if args.workers is not None and args.workers < 1:
        ap.error("--workers must be at least 1")
    if not args.timeout > 0:
        ap.error("--timeout must be above 0")
    if args.intervals < 1 or args.busy < 0:
        ap.error("--intervals must be at least 1, --busy at least 0")

    humaneval = import_humaneval(HUMANEVAL) if HUMANEVAL.exists() else []
    rng = random.Random(args.seed)
    limits = Limits().with_timeout(args.timeout)
    limits = replace(limits, call_timeout=min(limits.call_timeout, 1.0))
    before_mounts, before_files = mounts(), scratch_entries()
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for s in spinners:
        s.start()

    print(f"soak: {args.minutes:g} min on {platform.processor() or platform.machine()}, "
          f"{len(os.sched_getaffinity(0))} CPUs, {args.busy} busy processes beside it; "
          f"limits: {limits.cpu_s:g} CPU s a submission, {limits.call_timeout:g} a call, "
          f"wall x{limits.wall_factor:g}; HumanEval {'in' if humaneval else 'absent'}")  # fmt: skip
    internal: list[tuple[str, str, str]] = []
    failures: list[str] = []
    wrong: list[tuple[str, str, str, float]] = []
    statuses: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    samples: list[dict] = []
    interval_s = args.minutes * 60 / args.intervals
    start = time.monotonic()
    end = start + args.minutes * 60
    window = {"checks": 0, "since": start}
    total = 0
    try:
        with Sandbox(workers=args.workers, limits=limits) as sandbox:
            print(f"sandbox: {sandbox.workers} slots; {sandbox.isolation}")
            while time.monotonic() < end:
                rows = build_rows(rng, humaneval)
                verdicts = verify_many(
                    [p for _, p, _ in rows], [c for _, _, c in rows], sandbox, timeout=args.timeout
                )
                for (name, p, _), v in zip(rows, verdicts):
                    statuses[name][v.status] += 1
                    if v.status == INTERNAL_ERROR:
                        internal.append((name, p.id, v.detail))
                    elif honest(name) != (v.status == PASSED) or (
                        not honest(name) and name != "humaneval does nothing" and v.passed
                    ):
                        wrong.append((name, p.id, v.status, v.passed))
                total += len(rows)
                window["checks"] += len(rows)
                now = time.monotonic()
                if now - window["since"] >= interval_s or now >= end:
                    samples.append(
                        {
                            "t_min": (now - start) / 60,
                            "checks_per_s": window["checks"] / (now - window["since"]),
                            "rss_mb": rss_mb(),
                            "fds": open_fds(),
                        }
                    )
                    s = samples[-1]
                    print(f"  {s['t_min']:6.1f} min  {s['checks_per_s']:6.2f} checks/s  "
                          f"parent RSS {s['rss_mb']:7.1f} MB  fds {s['fds']:4d}", flush=True)  # fmt: skip
                    window = {"checks": 0, "since": now}
            failures = list(sandbox.failures)
    finally:
        for s in spinners:
            s.kill()
    time.sleep(1.0)
    left_processes = sandbox_processes()
    left_mounts = mounts() - before_mounts
    left_files = sorted(scratch_entries() - before_files)

    print(f"\n{total} verifications in {(time.monotonic() - start) / 60:.1f} min")
    print("verdicts by case:")
    for name in sorted(statuses):
        print(f"  {name:32s} " + ", ".join(f"{k} {n}" for k, n in statuses[name].most_common()))
    after = samples[1:] or samples  # the first interval warms up
    if after:
        rss, fds, rate = ([s[k] for s in after] for k in ("rss_mb", "fds", "checks_per_s"))
        print(f"after warm-up: parent RSS {min(rss):.1f}-{max(rss):.1f} MB ({(max(rss) / min(rss) - 1):.1%} apart), "
              f"fds {min(fds)}-{max(fds)}, checks/s median {statistics.median(rate):.2f} "
              f"(range {min(rate):.2f}-{max(rate):.2f})")  # fmt: skip
    print(f"leftovers: {len(left_processes)} processes, {left_mounts} mounts, {len(left_files)} files")
    for item in [*left_processes, *left_files][:20]:
        print(f"  {item}")
    print(f"verdicts that should not have happened: {len(wrong)}")
    for item in wrong[:20]:
        print(f"  {json.dumps(item)}")
    for name, pid, detail in internal:
        print(f"  internal error: {name} on {pid}: {detail}")
    print(f"sandbox failures, each retried on a fresh slot: {len(failures)}")
    for why in failures[:20]:
        print(f"  {why}")
    print(f"internal errors: {len(internal)}")
    bad = internal or wrong or left_processes or left_mounts or left_files
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
