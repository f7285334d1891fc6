"""Assert-style tests replayed in the parent give the judge's own verdicts.

Tests that call the candidate only with literal arguments run without the judge process: the
candidate answers every call in one io-mode run and the parent runs the test code over the
answers (axiom_rl/sandbox/judging.py). Each test here runs both ways in a real sandbox and
compares whole verdicts: status, counts, detail and per-test results.
"""

from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import HUMANEVAL, MBPP, needs_shared_data, wait_for_no_leftovers

from axiom_rl import verifier
from axiom_rl.sandbox import Limits, Sandbox, codec, judging
from axiom_rl.tasks.importers import import_humaneval, import_mbpp
from axiom_rl.types import PASSED, RUNTIME_ERROR, TIMEOUT, WRONG_ANSWER, Problem, Verdict

LIMITS = Limits(call_timeout=1.0, cpu_s=2.0, wall_factor=1.5, memory_mb=512, nproc=16, output_bytes=1 << 16)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, limits=LIMITS) as sb:
        yield sb
    assert not wait_for_no_leftovers()


def judged(sandbox: Sandbox, p: Problem, program: str) -> Verdict:
    """The verdict of the judge process, whatever the tests look like."""
    prelude = str(p.metadata.get("judge_prelude") or "")
    run = sandbox.run_tests(program, p.entry_point or "", p.test_code or "", prelude, LIMITS)
    return verifier._judge_assert_run(run)


def replayed(sandbox: Sandbox, p: Problem, program: str) -> Verdict:
    assert judging.replayable_calls(p.test_code or "", p.entry_point or "", "") is not None
    return verifier.score_code(p, f"```python\n{program}\n```", sandbox, LIMITS)


def assert_problem(test_code: str) -> Problem:
    return Problem(
        id="t", task="adversarial", difficulty=0, prompt="", entry_point="add", test_code=test_code
    )


def whole(v: Verdict) -> tuple:
    return (v.status, v.passed, v.total, v.detail, v.tests)


# ------------------------------------------------------------------ which tests replay

HUMANEVAL_STYLE = '''
METADATA = {"author": "jt", "dataset": "test"}


def check(candidate):
    """The checks."""
    assert candidate(1, 2) == 3
    assert candidate(2, -2) == 0, "zero"
    assert abs(candidate(0.1, 0.2) - 0.3) < 1e-6
    assert candidate(3 * 19, 0) == 57
    assert not candidate(0, 0)
    assert candidate(-1, 2)
    assert candidate(5, 5) is not None
    assert True
    assert tuple(sorted([candidate(1, 1), 0])) == (0, 2)
'''


@pytest.mark.parametrize(
    ("test_code", "calls"),
    [
        ("def check(candidate):\n    assert candidate(1, 2) == 3\n    assert True\n", [[1, 2]]),
        ("def check(f):\n    assert f((1, 2), {'a': [1]}) != 3 - 1\n", [[(1, 2), {"a": [1]}]]),
        ("assert add(1, 2) == 3\nassert set(add([1], [2])) == {1, 2}\n", [[1, 2], [[1], [2]]]),
        ("def check(candidate):\n    assert abs(candidate(1.5, 2) - 3.5) <= 1e-9, 'close'\n", [[1.5, 2]]),
        ("M = 2\ndef check(candidate):\n    assert candidate('a' + 'b', -3 // 2) is True\n", [["ab", -2]]),
        (
            "def check(candidate):\n    assert candidate({1, 2}, (-1.5, 'x'), [set()]) == {'k': [None, ~1]}\n",
            [[{1, 2}, (-1.5, "x"), [set()]]],
        ),
    ],
)
def test_literal_asserts_replay(test_code, calls):
    assert judging.replayable_calls(test_code, "add") == calls
    # As the candidate receives them: tuples and sets keep their kind.
    assert judging.encoded_replayable_calls(test_code, "add") == [codec.encode(args) for args in calls]


@pytest.mark.parametrize(
    ("test_code", "why"),
    [
        (
            "def check(candidate):\n    x = 3\n    assert candidate(1, 2) == x\n",
            "a statement that is not an assert",
        ),
        ("def check(candidate):\n    for i in range(3):\n        assert candidate(i, 0) == i\n", "a loop"),
        ("def check(candidate):\n    assert candidate(1, 2) == candidate(2, 1)\n", "two calls in one assert"),
        ("def check(candidate):\n    assert 0 < candidate(1, 2) < 4\n", "a chain that may skip the call"),
        ("def check(candidate):\n    assert candidate(1, 0) or candidate(2, 0)\n", "short-circuit"),
        (
            "def check(candidate):\n    assert 1 / 0 == candidate(1, 2)\n",
            "a constant that raises before the call",
        ),
        (
            "def check(candidate):\n    assert candidate({[1]: 2}, 1) == 3\n",
            "a literal that raises (unhashable)",
        ),
        (
            "def check(candidate):\n    assert candidate(1, 2) == {(1, [2])}\n",
            "a literal that raises beside it",
        ),
        ("def check(candidate):\n    assert candidate(2 ** 10, 1) == 1025\n", "**: unbounded work"),
        ("def check(candidate):\n    assert candidate(x=1, y=2) == 3\n", "keyword arguments"),
        ("def check(candidate):\n    assert candidate([1], 2) == helper(3)\n", "a name the tests define"),
        ("def check(candidate):\n    assert math.isclose(candidate(1, 2), 3)\n", "a module"),
        (
            "def check(candidate):\n    assert candidate(1, 2) == 3\nassert add(1, 2) == 3\n",
            "asserts outside check",
        ),
        ("import math\ndef check(candidate):\n    assert candidate(1, 2) == 3\n", "an import"),
        ("def check(candidate, n=1):\n    assert candidate(1, 2) == 3\n", "another parameter"),
        ("def check(candidate):\n    assert candidate(..., 2) == 3\n", "an argument that is not plain data"),
        ("def check(candidate):\n    pass\n", "no assert to count"),
    ],
)
def test_other_tests_need_the_judge(test_code, why):
    assert judging.replayable_calls(test_code, "add") is None, why


def test_an_argument_that_cannot_travel_is_the_judges_to_report(sandbox):
    """`...` is a constant to the parser, but not plain data: replaying it could not send it."""
    p = assert_problem("def check(candidate):\n    assert candidate(..., 2) == 3\n")
    v = verifier.score_code(p, "```python\ndef add(a, b):\n    return 3\n```", sandbox, LIMITS)
    assert whole(v) == whole(judged(sandbox, p, "def add(a, b):\n    return 3"))
    assert v.status == RUNTIME_ERROR and "not plain data" in v.detail


def test_tests_after_a_prelude_that_does_not_parse_need_the_judge():
    """The judge would fail on it: every test fails there, whatever the candidate does."""
    tests = "def check(candidate):\n    assert candidate(1, 2) == 3\n"
    assert judging.replayable_calls(tests, "add", "def add(:\n") is None
    assert judging.replayable_calls(tests, "add", "def add(a, b):\n    pass\n") == [[1, 2]]


def test_a_prelude_that_rebinds_a_builtin_the_tests_call_needs_the_judge():
    """MBPP's judge runs the reference solution first: a `sorted` of its own would be the one the
    asserts call."""
    tests = "assert sorted(add([2], [1])) == [1, 2]\n"
    assert judging.replayable_calls(tests, "add", "def add(a, b):\n    return a + b\n") == [[[2], [1]]]
    assert judging.replayable_calls(tests, "add", "def sorted(x):\n    return x\n") is None
    assert judging.replayable_calls(tests, "add", "from helpers import *\n") is None


@pytest.mark.parametrize("route", ["judge", "replayed"])
def test_partial_credit_only_for_tests_that_called_the_candidate_and_got_an_answer(sandbox, route):
    """Doing nothing earned partial credit: `assert True` passes whoever the candidate is, and a
    function returning None passed `assert not candidate(x)`. Neither counts now; a test that
    calls the candidate through an assignment before its assert still does."""
    tests = (
        "def check(candidate):\n"
        "    assert True, 'debugging aid'\n"
        "    assert not candidate(0, 0)\n"
        "    assert candidate(1, 1)\n"
        "    assert candidate(2, 2) == 4\n"
        "    x = candidate(3, 3)\n"
        "    assert x == 6\n"
        "    assert 1 + 1 == 2\n"
    )
    p = assert_problem(tests)
    run = judged if route == "judge" else replayed
    if route == "replayed" and judging.replayable_calls(tests, "add", "") is None:
        p = assert_problem(
            tests.replace("    x = candidate(3, 3)\n    assert x == 6\n", "    assert candidate(3, 3) == 6\n")
        )
    nothing = run(sandbox, p, "def add(a, b):\n    return None")
    assert (nothing.status, nothing.passed, nothing.total) == (WRONG_ANSWER, 0, 4), nothing
    assert "returned None where the test checks a truth value" in nothing.detail
    right = run(sandbox, p, "def add(a, b):\n    return a + b")
    assert (right.status, right.passed, right.total) == (PASSED, 4, 4), right
    half = run(sandbox, p, "def add(a, b):\n    return a + b if a > 1 else None")
    assert (half.passed, half.total) == (2, 4), half


# ------------------------------------------------------------------ same verdicts as the judge

CANDIDATES = {
    "right": "def add(a, b):\n    return a + b",
    "wrong": "def add(a, b):\n    return a - b",
    "raises": "def add(a, b):\n    raise ValueError('no')",
    "raises a KeyError": "def add(a, b):\n    return {}[a]",
    "raises its own exception": "class Oops(Exception):\n    pass\ndef add(a, b):\n    raise Oops('mine')",
    "returns an object": "class T:\n    def __eq__(s, o):\n        return True\ndef add(a, b):\n    return T()",
    "returns a list for a tuple": "def add(a, b):\n    return [a + b] if a == 3 * 19 else a + b",
    "exits on the 3rd call": "n = [0]\ndef add(a, b):\n    n[0] += 1\n    if n[0] == 3:\n        import os; os._exit(0)\n    return a + b",
    "loops on the 2nd call": "n = [0]\ndef add(a, b):\n    n[0] += 1\n    while n[0] == 2:\n        pass\n    return a + b",
    "exits while loading": "import sys\nsys.exit(0)\ndef add(a, b):\n    return a + b",
    "does not parse": "def add(a, b)\n    return a + b",
    "defines no add": "def plus(a, b):\n    return a + b",
}


@pytest.mark.parametrize("name", list(CANDIDATES))
def test_replayed_tests_give_the_judges_verdict(sandbox, name):
    p = assert_problem(HUMANEVAL_STYLE)
    program = CANDIDATES[name]
    a, b = judged(sandbox, p, program), replayed(sandbox, p, program)
    assert whole(a) == whole(b), name
    expected = {"right": PASSED, "wrong": WRONG_ANSWER, "loops on the 2nd call": TIMEOUT}
    assert b.status == expected.get(name, b.status)
    if name == "loops on the 2nd call":
        # The 1st call; `assert True` passes too, but without calling the candidate it is not
        # counted (nor in the total).
        assert (b.passed, b.total) == (1, HUMANEVAL_STYLE.count("assert ") - 1)
    if name in ("raises", "exits on the 3rd call"):
        assert b.status == RUNTIME_ERROR


def test_a_replayed_run_stops_at_the_first_call_out_of_time(sandbox):
    """After a timeout the judge calls no more, so neither does the replayed run: the calls after
    it would each spend the submission's CPU time for nothing."""
    program = "def add(a, b):\n    while a > 1:\n        pass\n    return a + b"
    run = sandbox.run_calls(program, "add", [[1, 1], [2, 2], [3, 3], [4, 4]], LIMITS, replay=True)
    assert [m.get("kind") for m in run.messages[1:-1]] == [None, "timeout"]
    assert run.messages[-1] == {"done": True}
    plain = sandbox.run_calls(program, "add", [[1, 1], [2, 2], [3, 3], [4, 4]], LIMITS)
    assert [m.get("kind") for m in plain.messages[1:-1]] == [None, "timeout", "timeout", "timeout"]


def test_a_call_that_blocks_times_out_on_the_wall_clock_as_with_the_judge(sandbox):
    p = assert_problem("assert add(1, 1) == 2\nassert add(2, 2) == 4\nassert add(3, 3) == 6\n")
    program = "import time\ndef add(a, b):\n    if a == 2:\n        time.sleep(60)\n    return a + b"
    a, b = judged(sandbox, p, program), replayed(sandbox, p, program)
    assert whole(a) == whole(b)
    assert (b.status, b.passed, b.total) == (TIMEOUT, 1, 3)


def test_output_beyond_the_limit_fails_the_same_way(sandbox):
    p = assert_problem("assert add(1, 1) == 2\n")
    program = "def add(a, b):\n    print('x' * (1 << 20))\n    return a + b"
    a, b = judged(sandbox, p, program), replayed(sandbox, p, program)
    assert (a.status, a.detail) == (b.status, b.detail) == (RUNTIME_ERROR, "output limit exceeded")


VARIANTS = {
    "canonical": lambda p: p.reference_solution,
    "return None": lambda p: f"{p.reference_solution}\n\ndef {p.entry_point}(*a, **k):\n    return None\n",
    "raise": lambda p: f"{p.reference_solution}\n\ndef {p.entry_point}(*a, **k):\n    raise KeyError('x')\n",
    "exit on the 2nd call": lambda p: (
        f"{p.reference_solution}\n_n = [0]\n_ref = {p.entry_point}\n"
        f"def {p.entry_point}(*a, **k):\n    _n[0] += 1\n    if _n[0] == 2:\n        import os; os._exit(3)\n"
        "    return _ref(*a, **k)\n"
    ),
    "other types": lambda p: (
        f"{p.reference_solution}\n_ref = {p.entry_point}\ndef {p.entry_point}(*a, **k):\n    r = _ref(*a, **k)\n"
        "    return list(r) if isinstance(r, (tuple, str)) else str(r) if isinstance(r, (int, float)) else r\n"
    ),
}


def _same_verdicts_on(sandbox: Sandbox, problems: list[Problem]) -> int:
    replayable = [
        p
        for p in problems
        if judging.replayable_calls(
            p.test_code or "", p.entry_point or "", p.metadata.get("judge_prelude", "")
        )
        is not None
    ]

    def both(p: Problem, program: str) -> tuple[tuple, tuple]:
        b = verifier._judge_assert_run(verifier._run_assert_tests(p, program, sandbox, LIMITS))
        return whole(judged(sandbox, p, program)), whole(b)

    with ThreadPoolExecutor(sandbox.workers) as pool:  # one verification per worker at a time
        for name, make in VARIANTS.items():
            programs = [verifier.build_program(p, make(p)) for p in replayable]
            for p, (a, b) in zip(replayable, pool.map(both, replayable, programs), strict=True):
                assert a == b, (p.id, name)
    return len(replayable)


@needs_shared_data(HUMANEVAL)
def test_humaneval_replays_with_the_judges_verdicts(sandbox):
    assert _same_verdicts_on(sandbox, import_humaneval(HUMANEVAL)) >= 140  # of 164


@needs_shared_data(MBPP)
def test_mbpp_replays_with_the_judges_verdicts(sandbox):
    problems = import_mbpp(MBPP, include_challenge=True)[::4]
    assert _same_verdicts_on(sandbox, problems) >= 0.9 * len(problems)


def test_replay_reports_a_candidate_that_never_loaded_as_the_judge_does():
    """Pure: messages as the monitor relays them, and why the run ended."""
    code = textwrap.dedent("""
        def check(candidate):
            assert candidate(1) == 1
            assert candidate(2) == 2
    """)
    assert judging.replay_report(code, "f", [], "") == {
        "load": "runtime_error",
        "error": "candidate exited while loading",
    }
    assert judging.replay_report(code, "f", [], "timeout")["load"] == "timeout"
    assert judging.replay_report(code, "f", [{"load": "ok"}], "output_limit") is None
    one = judging.replay_report(code, "f", [{"load": "ok"}, {"ok": True, "value": 1, "i": 0}], "")
    assert (one["passed"], one["total"], one["candidate"]) == (1, 2, "candidate exited")
    assert one["errors"] == ["CandidateFailed: candidate exited"]
