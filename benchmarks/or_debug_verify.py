"""or_debug verification throughput, against the solver's own solve time.

Workload: N or_debug problems (difficulties 1-10 in equal parts), each with three answers: the
reference repair (passes), no repair (still infeasible), a random deletion outside the conflict
(still infeasible). Both sides solve the same repaired models:

  A  "axiom-rl verify": `verify_many` as training and `axiom-rl verify` run it -- read the answer,
     apply the repair, send the model to a solver worker (a child process with limits, one per
     core up to 4, started before timing), compare the optimum -- one thread per core.
  B  "HiGHS in-process": the solver alone, `solve_model` on each already-repaired model, in this
     process, one after another: the cost of the solves themselves.

A/B is then what the isolation, the answer's parsing and the threads cost (or save: A runs a
solve per core at once, B one at a time). Rounds alternate B, A; figures are medians with
ranges.

    python benchmarks/or_debug_verify.py [--problems 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from axiom_rl.tasks import generate_problems, get_task  # noqa: E402
from axiom_rl.tasks.or_debug.answer import apply_actions, parse_answer  # noqa: E402
from axiom_rl.tasks.or_debug.solve import solve_model  # noqa: E402
from axiom_rl.tasks.or_debug.worker import solver_pool  # noqa: E402
from axiom_rl.verifier import verify_many  # noqa: E402


def workload(count: int, seed: int) -> tuple[list, list[str]]:
    task = get_task("or_debug")
    rng = random.Random(seed)
    problems, answers = [], []
    for d in range(1, 11):
        for p in generate_problems("or_debug", d, max(1, count // 10), seed=seed):
            outside = [
                c["name"]
                for c in p.metadata["model"]["constraints"]
                if c["name"] not in p.metadata["conflict"]
            ]
            deletion = f"remove {rng.choice(outside)}" if outside else ""
            for answer in (task.reference_completion(p), "<answer>conflict:\n</answer>", f"<answer>conflict:\n{deletion}\n</answer>"):  # fmt: skip
                problems.append(p)
                answers.append(answer)
    return problems, answers


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--problems", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    started = time.perf_counter()
    problems, answers = workload(args.problems, args.seed)
    generated = time.perf_counter() - started
    task = get_task("or_debug")
    repaired = [apply_actions(task.model_of(p), parse_answer(a).actions) for p, a in zip(problems, answers)]
    pool = solver_pool()
    for _ in range(pool.size):  # start every worker before timing
        verify_many(problems[: pool.size * 4], answers[: pool.size * 4])

    a_rates, b_rates, statuses = [], [], None
    for _ in range(args.rounds):
        t = time.perf_counter()
        solved = [solve_model(m).status for m in repaired]
        b_rates.append(len(repaired) / (time.perf_counter() - t))
        t = time.perf_counter()
        verdicts = verify_many(problems, answers)
        a_rates.append(len(problems) / (time.perf_counter() - t))
        statuses = [v.status for v in verdicts]
    assert statuses is not None
    passed = sum(s == "passed" for s in statuses)
    assert passed == len(problems) // 3 and solved.count("optimal") >= passed, "the sides disagree"

    def line(name: str, rates: list[float]) -> str:
        return f"{name:<22} {statistics.median(rates):8.0f} /s   (range {min(rates):.0f}-{max(rates):.0f})"

    print(
        f"host: {platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}"
    )
    print(f"{len(problems)} answers to {len(problems) // 3} problems (generated in {generated:.1f} s), {args.rounds} rounds, "
          f"{pool.size} solver workers")  # fmt: skip
    print(line("A axiom-rl verify", a_rates))
    print(line("B HiGHS in-process", b_rates))
    ratios = [a / b for a, b in zip(a_rates, b_rates)]
    print(f"A/B {statistics.median(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
