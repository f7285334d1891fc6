"""Verification through `axiom-rl sandbox serve` on loopback against the local sandbox pool.

The same checks, the same number of sandbox workers, in the same invocation, alternating
A (local: `verify_many` on a `Sandbox(workers=W)` in this process) and B (service: a
`sandbox serve --workers W` process on 127.0.0.1, reached by `RemoteVerifier`: chunks of
`--chunk` completions as JSON over HTTP, `--clients` chunks in flight). Both sides start their
pool before the clock starts. The workload: each built-in code task's reference solution and a
wrong answer, at difficulty 3 (8 tests each), plus the HumanEval canonical solutions where
../shared/data holds them. The verdicts of the two sides must agree, or the script fails.

    python benchmarks/sandbox_service.py [--rounds 5] [--per-task 40] [--workers N] [--chunk 32]

Prints checks/s for each side per round, medians and ranges, and the ratio service / local
(goal: >= 0.8).
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from axiom_rl.integrations.remote import RemoteVerifier
from axiom_rl.sandbox import Sandbox
from axiom_rl.sandbox.pool import usable_cpus
from axiom_rl.tasks import CodeTask, all_tasks, generate_problems, get_task
from axiom_rl.tasks.importers import import_file
from axiom_rl.verifier import verify_many

HUMANEVAL = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "humaneval" / "HumanEval.jsonl"


def workload(per_task: int) -> tuple[list, list[str]]:
    problems, completions = [], []
    for name in all_tasks():
        task = get_task(name)
        if not isinstance(task, CodeTask):
            continue
        for i, p in enumerate(generate_problems(name, 3, per_task, seed=1)):
            problems.append(p)
            right = task.reference_completion(p)
            completions.append(right if i % 2 == 0 else right.replace("return ", "return None or ", 1))
    if HUMANEVAL.exists():
        for p in import_file("humaneval", str(HUMANEVAL)):
            problems.append(p)
            completions.append(get_task(p.task).reference_completion(p))
    return problems, completions


def start_server(workers: int) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "axiom_rl", "sandbox", "serve", "--port", "0", "--workers", str(workers)],
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stderr.readline()
    if "serving the sandbox on " not in line:
        process.kill()
        raise SystemExit(f"the server did not start: {line}")
    return process, line.split("serving the sandbox on ")[1].split()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-task", type=int, default=40)
    parser.add_argument("--workers", type=int, default=len(usable_cpus()))
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--clients", type=int, default=None, help="chunks in flight (default: 2 x workers)")
    args = parser.parse_args()
    problems, completions = workload(args.per_task)
    print(
        f"{len(problems)} checks, {args.workers} workers, chunks of {args.chunk}; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; python {platform.python_version()}"
    )
    process, url = start_server(args.workers)
    local_rates, service_rates = [], []
    try:
        with (
            Sandbox(workers=args.workers) as sandbox,
            RemoteVerifier(url, chunk=args.chunk, concurrency=args.clients or 2 * args.workers) as remote,
        ):
            verify_many(problems[:20], completions[:20], sandbox)  # warm both
            remote.verify(problems[:20], completions[:20])
            for r in range(args.rounds):
                start = time.perf_counter()
                local = verify_many(problems, completions, sandbox)
                local_rates.append(len(problems) / (time.perf_counter() - start))
                start = time.perf_counter()
                served = remote.verify(problems, completions)
                service_rates.append(len(problems) / (time.perf_counter() - start))
                mismatched = [
                    p.id
                    for p, a, b in zip(problems, local, served)
                    if (a.status, a.passed) != (b.status, b.passed)
                ]
                if mismatched:
                    raise SystemExit(f"verdicts differ on {len(mismatched)} checks, e.g. {mismatched[:3]}")
                print(
                    f"round {r + 1}: local {local_rates[-1]:.0f} checks/s, service {service_rates[-1]:.0f} checks/s"
                )
            retries = remote.retries
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    ratios = [s / lo for s, lo in zip(service_rates, local_rates)]
    for name, rates in (("local pool", local_rates), ("service", service_rates), ("ratio", ratios)):
        fmt = "{:.2f}" if name == "ratio" else "{:.0f}"
        print(
            f"{name:>10}: median {fmt.format(statistics.median(rates))} "
            f"(range {fmt.format(min(rates))}-{fmt.format(max(rates))}) over {len(rates)} rounds"
        )
    print(f"verdicts agree on all {len(problems)} checks in every round; {retries} requests retried")


if __name__ == "__main__":
    main()
