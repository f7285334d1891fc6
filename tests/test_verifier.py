"""Extraction of code from completions, verdicts for generated tasks, and real benchmarks."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from conftest import HUMANEVAL, MBPP, needs_shared_data

from axiom_rl import verifier
from axiom_rl.sandbox import Sandbox
from axiom_rl.tasks import all_tasks, generate_problems, get_task
from axiom_rl.tasks.importers import import_humaneval, import_mbpp, mbpp_entry_point
from axiom_rl.types import NO_CODE, PASSED, WRONG_ANSWER
from axiom_rl.verifier import PendingVerdicts, build_program, extract_code, has_fenced_function, verify_many


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox() as sb:
        yield sb


# ----------------------------------------------------------------------------------- extraction


def test_extract_fenced_block_defining_the_entry_point():
    text = (
        "Sure!\n```python\ndef helper():\n    pass\n```\nand\n```python\ndef f(x):\n    return x\n```\nDone."
    )
    assert extract_code(text, "f") == "def f(x):\n    return x\n"


@pytest.mark.parametrize(
    "code, defined",
    [
        ("def add(a):\n    pass", True),
        ("  async def add (a):\n    pass", True),
        ("class A:\n    def add(self):\n        pass", True),
        ("def add\n(a):\n    pass", True),
        ("def add_one(a):\n    pass", False),
        ("def adder(a):\n    pass", False),
        ("x = 1  # def add(\n", False),
        ("add = lambda a: a", False),
        ("x = 1; def add(a): pass", False),
        ("undef add(a):\n    pass", False),
        ("def helper(add):\n    return add(1)", False),
        ("async\n  def add(a):\n    pass", True),
        ("def other(a):\n    pass\n\n\tdef add(b):\n        pass", True),
    ],
)
def test_what_counts_as_defining_the_entry_point(code, defined):
    assert verifier._defines(code, "add") is defined
    assert verifier._defines(code.replace("add", "ñame"), "ñame") is defined  # not only ASCII names


def test_extract_prefers_the_last_definition():
    text = "```python\ndef f(x):\n    return 1\n```\nBetter:\n```py\ndef f(x):\n    return 2\n```"
    assert "return 2" in extract_code(text, "f")


def test_extract_ignores_thinking_and_other_languages():
    text = "<think>```python\ndef f(x):\n    return 'draft'\n```</think>```python\ndef f(x):\n    return 'final'\n```"
    assert "final" in extract_code(text, "f") and "draft" not in extract_code(text, "f")
    assert extract_code("```text\nnot code\n```", "f") is None
    # the prompt opened <think>: everything up to its closing tag is thinking
    assert "final" in extract_code(
        "draft ideas ```python\ndef f(): 'draft'```</think>\n```python\ndef f(): 'final'\n```", "f"
    )


def test_extract_unterminated_fence_and_bare_code():
    assert extract_code("```python\ndef f(x):\n    return x", "f") == "def f(x):\n    return x"
    assert extract_code("R = 3\ndef f(x):\n    return x * R\n", "f").startswith("R = 3")
    assert extract_code("Here it is:\ndef f(x):\n    return x\n", "f").startswith("def f")
    assert extract_code("I cannot solve this.", "f") is None


def test_format_detection():
    assert has_fenced_function("```python\ndef f(x):\n    pass\n```", "f")
    assert not has_fenced_function("def f(x):\n    pass\n", "f")
    assert not has_fenced_function("```python\ndef g(x):\n    pass\n```", "f")


# ----------------------------------------------------------------------------------- generated tasks


@pytest.mark.parametrize("difficulty", [1, 5, 10])
def test_every_reference_verifies_with_full_reward(sandbox, difficulty):
    from axiom_rl.rewards import compute_reward

    problems = [p for n in all_tasks() for p in generate_problems(n, difficulty, 2, seed=1)]
    completions = [get_task(p.task).reference_completion(p) for p in problems]
    verdicts = verify_many(problems, completions, sandbox)
    for p, c, v in zip(problems, completions, verdicts):
        assert v.status == PASSED, (p.id, v)
        assert compute_reward(p, c, v)[0] == 1.0


def test_wrong_code_gets_partial_credit_and_no_code_is_no_code(sandbox):
    p = generate_problems("max_subarray", 3, 1)[0]
    wrong = "```python\ndef max_subarray(nums):\n    return max(nums)\n```"  # right only when the best run is one element
    v = verify_many([p], [wrong], sandbox)[0]
    assert v.status == WRONG_ANSWER and 0 <= v.passed < v.total == len(p.tests)
    assert verify_many([p], ["I don't know"], sandbox)[0].status == NO_CODE


def test_verifying_in_the_background_row_by_row_gives_verify_many_s_verdicts(sandbox):
    """PendingVerdicts (the trainer's overlap_verification): rows submitted one at a time in any
    order, the verdicts in row order, each row once."""
    problems = [p for n in ("fizzbuzz", "max_subarray") for p in generate_problems(n, 3, 2, seed=2)]
    right = [f"```python\n{p.reference_solution}```" for p in problems]
    completions = [right[0], "no code here", right[2], right[3].replace("return", "return 1 +", 1)]
    pending = PendingVerdicts(problems, sandbox)
    for i in (3, 1, 0, 2):
        pending.submit(i, completions[i])
    with pytest.raises(ValueError, match="submitted twice"):
        pending.submit(1, completions[1])
    got = pending.result()
    assert [v.status for v in got] == [v.status for v in verify_many(problems, completions, sandbox)]
    assert [v.status for v in got][:3] == [PASSED, NO_CODE, PASSED] and got[3].status != PASSED
    with PendingVerdicts(problems, sandbox) as partial:
        partial.submit(0, completions[0])
        with pytest.raises(ValueError, match=r"never submitted for verification: \[1, 2, 3\]"):
            partial.result()


# ----------------------------------------------------------------------------------- benchmarks


@needs_shared_data(HUMANEVAL)
def test_humaneval_canonical_solutions_all_pass_and_stubs_fail(sandbox):
    problems = import_humaneval(HUMANEVAL)
    assert len(problems) == 164
    verdicts = verify_many(problems, [p.reference_solution for p in problems], sandbox)
    failed = [(p.id, v.status, v.detail) for p, v in zip(problems, verdicts) if v.status != PASSED]
    assert Counter(v.status for v in verdicts) == {PASSED: 164}, failed
    # The same bodies as a model would send them: a fenced full function, and a bare continuation.
    fenced = [f"```python\n{p.reference_solution}```" for p in problems[:20]]
    assert all(v.ok for v in verify_many(problems[:20], fenced, sandbox))
    bodies = [p.reference_solution[len(p.metadata["prelude"]) :] for p in problems[:20]]
    assert all(v.ok for v in verify_many(problems[:20], bodies, sandbox))
    nones = verify_many(problems, ["    return None\n"] * len(problems), sandbox)
    assert sum(v.ok for v in nones) <= 3
    # Partial credit for doing nothing: 40 problems gave some (their `assert True` lines, and
    # `assert not candidate(...)`, which None passed). What is left are the 5 whose tests expect
    # None somewhere (`assert candidate([]) == None`), and those asserts alone.
    credited = {p.id: v.passed for p, v in zip(problems, nones) if v.passed}
    assert set(credited) == {f"HumanEval/{i}" for i in (12, 90, 128, 137, 162)}, credited
    for p in problems:
        if p.id in credited:
            expects_none = [line for line in p.test_code.splitlines() if "== None" in line]
            assert credited[p.id] <= len(expects_none), p.id


@needs_shared_data(HUMANEVAL)
def test_humaneval_exit_before_asserts_does_not_pass(sandbox):
    problems = import_humaneval(HUMANEVAL)
    trick = "    pass\nimport sys\nsys.exit(0)\n"  # fools a grader that trusts exit codes (164/164 upstream)
    assert not any(v.ok for v in verify_many(problems, [trick] * len(problems), sandbox))


@needs_shared_data(MBPP)
def test_mbpp_reference_solutions_all_pass_and_wrong_ones_fail(sandbox):
    problems = import_mbpp(MBPP, include_challenge=True)
    assert len(problems) == 974
    verdicts = verify_many(problems, [p.reference_solution for p in problems], sandbox)
    not_passed = [(p.id, v.status, v.detail) for p, v in zip(problems, verdicts) if v.status != PASSED]
    assert not not_passed, (not_passed, sandbox.failures)
    wrong = [
        f"{p.reference_solution}\n\ndef {p.entry_point}(*args, **kwargs):\n    return None\n"
        for p in problems
    ]
    assert sum(v.ok for v in verify_many(problems, wrong, sandbox)) <= 5


@needs_shared_data(MBPP)
def test_mbpp_entry_points_are_defined_by_the_reference():
    for p in import_mbpp(MBPP):
        assert re.search(rf"def {p.entry_point}\s*\(", p.reference_solution), p.id


def test_mbpp_entry_point_detection():
    code = "def helper(x):\n    return x\ndef is_even(n):\n    return helper(n) % 2 == 0\n"
    assert mbpp_entry_point(["assert is_even(4) == True"], code) == "is_even"
    assert mbpp_entry_point(["assert set(is_even(4)) == {1}"], code) == "is_even"


def test_build_program_prepends_the_prelude():
    from axiom_rl.types import Problem

    p = Problem(
        "x",
        "humaneval",
        0,
        "",
        entry_point="f",
        test_code="",
        metadata={"prelude": "import math\ndef f(x):\n"},
    )
    assert build_program(p, "    return math.pi\n") == "import math\ndef f(x):\n    return math.pi\n"
    assert build_program(p, "```python\ndef f(x):\n    return 1\n```").startswith(
        "import math\ndef f(x):\n\ndef f"
    )
    assert build_program(p, "   ") is None
