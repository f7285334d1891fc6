"""Countdown: solvable generation, the solver, and an answer parser that never evaluates code."""

from __future__ import annotations

from fractions import Fraction

import pytest

from axiom_rl.tasks import generate_problems, get_task
from axiom_rl.tasks.countdown import analyse, difficulty_params, extract_answer, solve
from axiom_rl.types import FORMAT_ERROR, PASSED, RUNTIME_ERROR, SYNTAX_ERROR, WRONG_ANSWER

TASK = get_task("countdown")


@pytest.mark.parametrize("difficulty", range(1, 11))
def test_generated_puzzles_are_solvable_by_their_reference(difficulty):
    count, max_number, max_target = difficulty_params(difficulty)
    for p in generate_problems("countdown", difficulty, 20, seed=5):
        numbers, target = p.metadata["numbers"], p.metadata["target"]
        assert len(numbers) == count and all(1 <= n <= max_number for n in numbers)
        assert 1 <= target <= max_target
        assert analyse(numbers, target, f"<answer>{p.reference_solution}</answer>").correct
        assert TASK.score(p, TASK.reference_completion(p, "full")).status == PASSED
        assert TASK.score(p, TASK.reference_completion(p, "compact")).status == PASSED


def test_number_count_grows_with_difficulty():
    assert difficulty_params(1)[0] == 3 and difficulty_params(10)[0] == 6


def test_solver_finds_solutions_and_reports_impossible():
    for p in generate_problems("countdown", 4, 15, seed=2):
        found = solve(p.metadata["numbers"], p.metadata["target"])
        assert found is not None
        assert analyse(p.metadata["numbers"], p.metadata["target"], f"<answer>{found}</answer>").correct
    assert solve([1, 1, 1], 100) is None
    assert solve([2, 3, 7], 1) is not None  # (7 - 3) / 2 - ... search includes fractions
    assert solve([3, 8], Fraction(8, 3)) is not None  # 8 / 3


def test_extract_answer_forms():
    assert extract_answer("<think>try</think><answer> 1 + 2 </answer>") == "1 + 2"
    assert extract_answer("<answer>1</answer> then <answer>2 + 3</answer>") == "2 + 3"  # the last one
    assert extract_answer("4 * 5</answer>") == "4 * 5"  # the prompt opened the tag
    assert extract_answer("no tags at all") is None
    assert extract_answer("<answer>unterminated") is None


@pytest.mark.parametrize(
    "answer, correct, exact",
    [
        ("(8 - 2) * 7", True, True),
        ("7 * (8 - 2)", True, True),
        ("(8 - 2) * 7 = 42", True, True),  # a trailing '= target' is tolerated
        ("8 * 7 - 2", False, True),  # right numbers, wrong value
        ("6 * 7", False, False),  # right value, numbers not given
        ("(8 - 2) * 7 + 0", False, False),  # an extra number
        ("(8 - 2) * 7 * 1", False, False),
        ("42", False, False),
    ],
)
def test_analyse_value_and_numbers(answer, correct, exact):
    a = analyse([8, 2, 7], 42, f"<answer>{answer}</answer>")
    assert a.parsed and a.correct == correct and a.numbers_exact == exact


@pytest.mark.parametrize(
    "answer",
    [
        "__import__('os').system('touch /tmp/pwned')",
        "2 ** 100000000",
        "x + 1",
        "[1, 2]",
        "-8 + 2 * 7",  # unary minus is not one of the allowed operations
        "8 // 2 + 7",
        "8.0 / 2 + 7",
        "lambda: 1",
        "(" * 150 + "1" + ")" * 150,
        "1 +" * 100,
    ],
)
def test_parser_rejects_everything_but_arithmetic(answer, tmp_path):
    a = analyse([8, 2, 7], 42, f"<answer>{answer}</answer>")
    assert not a.parsed and not a.correct


def test_division_by_zero_and_fractions():
    a = analyse([4, 4, 8], 2, "<answer>8 / (4 - 4)</answer>")
    assert a.parsed and a.value is None and not a.correct
    # intermediate fractions are exact: (4 / 8) * 4 == 2
    assert analyse([4, 4, 8], 2, "<answer>4 / 8 * 4</answer>").correct


def test_verdict_statuses():
    p = generate_problems("countdown", 1, 1)[0]
    n = p.metadata["numbers"]
    assert TASK.score(p, "I do not know").status == FORMAT_ERROR
    assert TASK.score(p, "<answer>hello world</answer>").status == SYNTAX_ERROR
    assert TASK.score(p, f"<answer>{n[0]} / ({n[1]} - {n[1]})</answer>").status == RUNTIME_ERROR
    assert TASK.score(p, "<answer>1 + 1</answer>").status == WRONG_ANSWER


def test_an_answer_python_warns_about_is_refused_without_a_warning():
    """A policy writes "1if 2" or "3x" in thousands of answers: each is a syntax error, never a
    SyntaxWarning printed on the trainer's stderr."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for text in ("1if 2", "3x", "0b2", "1_"):
            assert not analyse([1, 2, 3], 6, f"<answer>{text}</answer>").parsed
