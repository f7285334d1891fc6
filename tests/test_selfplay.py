"""Self-play: the saboteur's mutation operators and subtle-bug filter, debug tasks, and rounds that
resume where they were killed."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from axiom_rl.cli import main
from axiom_rl.sandbox import Sandbox
from axiom_rl.tasks import generate_problems, get_task, split_of
from axiom_rl.tasks.debug.mutations import OPERATORS, mutants
from axiom_rl.tasks.debug.saboteur import (
    REJECTED_BROKEN,
    REJECTED_EQUIVALENT,
    SabotageYield,
    all_bugs,
    behaviour,
    inject,
    rejection,
    screen,
)
from axiom_rl.types import Problem, TestCase

HAND_WRITTEN = """
def smallest_gap(values, floor):
    if len(values) < 2:
        return 0
    best = float("inf")
    total = 0
    for i in range(1, len(values)):
        gap = values[i] - values[i - 1]
        if gap >= floor:
            best = min(best, gap)
        total += gap
    return best
"""


def by_operator(operator: str) -> list[str]:
    return [m.source for m in mutants(HAND_WRITTEN, [operator])]


def has(sources: list[str], line: str) -> bool:
    return any(line in s for s in sources)


def test_each_mutation_operator_on_a_hand_written_function():
    off = by_operator("off_by_one")
    assert has(off, "for i in range(2, len(values)):") and has(off, "for i in range(1, len(values) + 1):")
    assert has(off, "gap = values[i + 1] - values[i - 1]") and has(off, "gap = values[i] - values[i]")
    flips = by_operator("flip_comparison")
    assert has(flips, "if len(values) > 2:") and has(flips, "if len(values) <= 2:")
    assert has(flips, "if gap <= floor:") and has(flips, "if gap > floor:")
    swapped = by_operator("swap_min_max")
    assert len(swapped) == 1 and has(swapped, "best = max(best, gap)")
    add_sub = by_operator("swap_add_sub")
    assert has(add_sub, "total -= gap") and has(add_sub, "gap = values[i] + values[i - 1]")
    dropped = by_operator("drop_base_case")
    assert len(dropped) == 1 and "return 0" not in dropped[0]
    initial = by_operator("wrong_initial")
    assert has(initial, "best = 0\n") and has(initial, "total = 1\n")
    wrong = by_operator("wrong_variable")
    assert has(wrong, "best = min(best, floor)") and has(wrong, "gap = values[i] - values[total - 1]")
    everything = mutants(HAND_WRITTEN)
    # Deterministic, every source once, never the original, and each operator's own.
    assert everything == mutants(HAND_WRITTEN)
    assert len({m.source for m in everything}) == len(everything)
    assert all(m.operator in OPERATORS and m.description.startswith("line ") for m in everything)
    with pytest.raises(ValueError, match="unknown mutation operator"):
        mutants(HAND_WRITTEN, ["swap_everything"])


def problem_of(source: str, tests: list[tuple[list, int]]) -> Problem:
    return Problem(
        id="gap-0", task="smallest_gap", difficulty=1, prompt="smallest gap", entry_point="smallest_gap",
        tests=tuple(TestCase(tuple(a), e) for a, e in tests), reference_solution=source,
    )  # fmt: skip


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2) as box:
        yield box


def test_the_subtle_bug_filter_keeps_a_bug_and_rejects_broken_and_equivalent_mutants(sandbox):
    tests = [([[1, 4, 6], 0], 2), ([[5], 0], 0), ([[1, 2, 10, 30], 5], 8), ([[3, 3, 9], 1], 6)]
    problem = problem_of(HAND_WRITTEN, tests)
    assert screen(problem, HAND_WRITTEN, sandbox).ok
    broken = HAND_WRITTEN.replace("return best", "return best + 1").replace("return 0", "return 1")
    assert rejection(screen(problem, broken, sandbox)) == REJECTED_BROKEN  # fails every test
    looping = HAND_WRITTEN.replace(
        "    if len(values) < 2:", "    while True:\n        pass\n    if len(values) < 2:"
    )
    assert rejection(screen(problem, looping, sandbox)) == REJECTED_BROKEN
    same = HAND_WRITTEN.replace("best = min(best, gap)", "best = gap if gap < best else best")
    assert rejection(screen(problem, same, sandbox)) == REJECTED_EQUIVALENT
    dropped = mutants(HAND_WRITTEN, ["drop_base_case"])[0].source  # fails only the one-value test
    verdict = screen(problem, dropped, sandbox)
    assert rejection(verdict) is None and 0 < verdict.passed < verdict.total
    # Every kept bug is subtle, and no two behave alike; the tally counts every mutant tried.
    tally = SabotageYield()
    bugs = all_bugs(problem, sandbox, tally=tally)
    assert bugs and all(0 < b.verdict.passed < b.verdict.total for b in bugs)
    assert len({behaviour(b.verdict) for b in bugs}) == len(bugs)
    assert sum(tally.tried.values()) == len(mutants(HAND_WRITTEN)) and sum(tally.kept.values()) == len(bugs)
    assert {r["operator"] for r in tally.rows()} >= {"drop_base_case", "swap_min_max", "wrong_variable"}


def test_injection_is_deterministic_under_a_seed_and_chains_bugs(sandbox):
    problem = generate_problems("edit_distance", 4, 1, seed=3)[0]
    one = inject(problem, random.Random(7), 1, sandbox)
    again = inject(problem, random.Random(7), 1, sandbox)
    assert one is not None and again is not None and (one.source, one.edits) == (again.source, again.edits)
    two = inject(problem, random.Random(7), 2, sandbox)
    assert one is not None and two is not None and len(two.edits) == 2
    for bug in (one, two):
        assert 0 < bug.verdict.passed < bug.verdict.total and bug.source != problem.reference_solution
    with pytest.raises(ValueError, match="no reference solution"):
        inject(Problem(id="x", task="t", difficulty=1, prompt="p"), random.Random(0), 1, sandbox)


def test_debug_problems_show_a_failing_test_and_are_verified_by_the_hidden_tests(sandbox):
    task = get_task("debug_edit_distance")
    problems = generate_problems("debug_edit_distance", 6, 3, seed=0, split="eval")
    assert problems == generate_problems("debug_edit_distance", 6, 3, seed=0, split="eval")  # deterministic
    base = get_task("edit_distance")
    for p in problems:
        assert p.task == "debug_edit_distance" and len(p.metadata["bugs"]) == 2  # difficulty 6: two bugs
        buggy = p.metadata["buggy_code"]
        assert buggy in p.prompt and buggy != p.reference_solution
        failing = p.metadata["failing_test"]
        assert f"should return {failing['expected']!r}" in p.prompt
        assert list(failing["args"]) in [list(t.args) for t in p.tests]
        assert task.score(p, task.reference_completion(p), sandbox).ok
        wrong = task.score(p, f"```python\n{buggy}```", sandbox)
        assert not wrong.ok and 0 < wrong.passed < wrong.total
        # In the split of the problem it was made from: no eval problem's tests reach training.
        made_from = Problem(
            id="", task="edit_distance", difficulty=6, prompt=p.metadata["base_prompt"], tests=p.tests
        )
        assert split_of(base, made_from) == split_of(task, p) == "eval"


def test_problems_export_of_a_debug_task_and_its_errors(tmp_path, capsys):
    out = tmp_path / "debug.jsonl"
    assert main(["problems", "export", "--task", "debug_edit_distance", "--difficulty", "1-2", "--count", "2",
                 "--out", str(out)]) == 0  # fmt: skip
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["task"] for r in rows] == ["debug_edit_distance"] * 4 and all(
        r["metadata"]["buggy_code"] for r in rows
    )
    assert main(["problems", "export", "--task", "debug_countdown", "--out", str(tmp_path / "no.jsonl")]) == 2
    assert "no reference function to inject bugs into" in capsys.readouterr().err
    assert not (tmp_path / "no.jsonl").exists()
    # "all" is the base tasks: a debug task is asked for by name.
    from axiom_rl.tasks import all_tasks

    assert not any(t.startswith("debug_") for t in all_tasks())


SMALL = ["--model", "tiny", "--tiny-size", "nano", "--task", "is_palindrome", "--difficulty", "1", "--eval-count", "1",
         "--eval-samples", "1", "--prompts-per-step", "2", "--num-generations", "2", "--max-completion-length", "8"]  # fmt: skip


def test_selfplay_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    for args, message in (
        (["--rounds", "0"], "--rounds must be >= 1"),
        (["--task", "debug_is_palindrome"], "not debug_is_palindrome"),
        (["--task", "humaneval"], "has no generator"),
        (["--keep", "1.5"], "--keep must be in [0, 1)"),
    ):
        assert main(["selfplay", *SMALL, *args, "--out", str(out)]) == 2
        assert message in capsys.readouterr().err and not out.exists()
    (out).mkdir()
    (out / "results.db").write_text("someone else's")
    assert main(["selfplay", *SMALL, "--out", str(out)]) == 2
    assert "holds no self-play run" in capsys.readouterr().err
    assert (out / "results.db").read_text() == "someone else's"


def test_selfplay_killed_mid_round_resumes_with_nothing_lost_or_repeated(tmp_path, capsys):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "axiom_rl", "selfplay", *SMALL, "--rounds", "2", "--steps-per-round", "4",
               "--out", str(out)]  # fmt: skip
    child = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    checkpoint = out / "round-2" / "train" / "checkpoints"
    deadline = time.monotonic() + 240
    while not (checkpoint.exists() and any(checkpoint.iterdir())) and child.poll() is None:
        assert time.monotonic() < deadline, "round 2 never checkpointed"
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)  # as a machine going down would: no clean-up
    child.wait()
    state = json.loads((out / "selfplay.json").read_text())
    assert [r["round"] for r in state["rounds"]] == [1]  # round 2 is not reported as finished
    assert not (out / "round-2" / "report.md").exists()
    round_one = (out / "round-1" / "report.md").read_bytes()
    # The same command again: round 2 resumes from its checkpoint and finishes.
    assert main(["selfplay", *SMALL, "--rounds", "2", "--steps-per-round", "4", "--out", str(out)]) == 0
    state = json.loads((out / "selfplay.json").read_text())
    assert [r["round"] for r in state["rounds"]] == [1, 2]
    assert (out / "round-1" / "report.md").read_bytes() == round_one  # not redone
    steps = [
        json.loads(line)["step"]
        for line in (out / "round-2" / "train" / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == [1, 2, 3, 4]  # no step lost, none repeated
    import sqlite3

    with sqlite3.connect(out / "results.db") as db:
        runs = dict(
            db.execute(
                "SELECT r.name, COUNT(*) FROM attempts a JOIN runs r ON a.run_id = r.id GROUP BY r.name"
            )
        )
        unique = db.execute(
            "SELECT COUNT(*) FROM (SELECT DISTINCT run_id, problem_id, sample FROM attempts)"
        ).fetchone()[0]
    assert set(runs) == {"round-1-before", "round-1-after", "round-2-after"}
    assert len(set(runs.values())) == 1 and unique == sum(runs.values())  # every evaluation whole, none twice
    assert (out / "selfplay.png").stat().st_size > 0 and "| targeted |" in (
        out / "round-2" / "report.md"
    ).read_text()
    # A finished run asked again does nothing; more rounds go on from it; other settings are refused.
    assert main(["selfplay", *SMALL, "--rounds", "2", "--steps-per-round", "4", "--out", str(out)]) == 0
    assert main(["selfplay", *SMALL, "--rounds", "2", "--steps-per-round", "5", "--out", str(out)]) == 2
    assert "other settings (steps_per_round)" in capsys.readouterr().err
    assert json.loads((out / "selfplay.json").read_text()) == state
