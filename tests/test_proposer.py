"""The proposer role: the propose_countdown task's verifier, the learnability reward measured with a
real solver model, and self-play rounds in which the policy proposes puzzles too."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from axiom_rl.cli import main
from axiom_rl.config import SFTConfig
from axiom_rl.reward_stage import RewardStage, make_component
from axiom_rl.rewards import REWARDS, RewardSpec
from axiom_rl.selfplay.proposer import Solver, learnability, measure_proposer
from axiom_rl.tasks import generate_problems, get_task
from axiom_rl.tasks.propose import puzzle_of, read_puzzle
from axiom_rl.types import FORMAT_ERROR, PASSED, SYNTAX_ERROR, WRONG_ANSWER, Verdict

PROPOSE = get_task("propose_countdown")
COUNTDOWN = get_task("countdown")


def proposal(problem, style: str = "compact") -> str:
    """The problem's reference proposal, as the model writes it after the response prefix."""
    return PROPOSE.response_prefix(problem, style) + PROPOSE.reference_completion(problem, style)


def test_reference_proposals_are_valid_puzzles_the_exact_solver_solves():
    for difficulty in range(1, 11):
        for problem in generate_problems("propose_countdown", difficulty, 3, seed=1):
            for style in ("compact", "full"):
                assert PROPOSE.score(problem, proposal(problem, style)).status == PASSED, (problem, style)
            puzzle = puzzle_of(problem, proposal(problem))
            assert puzzle is not None and puzzle.task == "countdown"
            numbers, target = read_puzzle(proposal(problem))
            assert puzzle.metadata == {"numbers": numbers, "target": target}
            solution = f"<answer>{puzzle.reference_solution}</answer>"
            assert COUNTDOWN.score(puzzle, solution).status == PASSED
            for required in problem.metadata["include"]:
                assert required in numbers
    compact = PROPOSE.render(generate_problems("propose_countdown", 4, 1)[0], "compact")
    assert compact.startswith("propose 4 of 1-25 with ") and compact.endswith(" to 1-200\n")  # difficulty 4's


def test_a_proposal_that_breaks_a_constraint_or_cannot_be_solved_says_why():
    problem = generate_problems("propose_countdown", 1, 1, seed=0)[0]
    a, b = problem.metadata["include"]
    cases = {
        "no answer here": (FORMAT_ERROR, "no <answer>"),
        "<answer>(1 + 2) * 3</answer>": (SYNTAX_ERROR, "not a puzzle"),
        "<answer>" + "7 " * 500 + "-> 3</answer>": (SYNTAX_ERROR, "not a puzzle"),
        f"<answer>{a} {b} -> 3</answer>": (WRONG_ANSWER, "2 numbers, asked for 3"),
        f"<answer>{a} {b} 21 -> 3</answer>": (WRONG_ANSWER, "a number outside 1-20"),
        f"<answer>{a} 19 19 -> 3</answer>" if b != 19 else f"<answer>{a} 18 18 -> 3</answer>": (
            WRONG_ANSWER, "is not among the numbers"),
        f"<answer>{a} {b} 1 -> 101</answer>": (WRONG_ANSWER, "target 101 outside 1-100"),
    }  # fmt: skip
    for completion, (status, detail) in cases.items():
        verdict = PROPOSE.score(problem, completion)
        assert verdict.status == status and detail in verdict.detail, (completion, verdict)
        assert puzzle_of(problem, completion) is None
    ones = dataclasses.replace(problem, metadata={**problem.metadata, "include": [1, 1]})
    verdict = PROPOSE.score(ones, "<answer>1 1 1 -> 97</answer>")  # 1 1 1 reach at most 3
    assert verdict.status == WRONG_ANSWER and "no way to reach" in verdict.detail
    assert puzzle_of(ones, "<answer>1 1 1 -> 97</answer>") is None
    assert PROPOSE.score(ones, "<answer>1 1 1 -> 3</answer>").status == PASSED


def test_learnability_is_four_p_one_minus_p():
    assert [learnability(s, 8) for s in (0, 2, 4, 6, 8)] == [0.0, 0.75, 1.0, 0.75, 0.0]
    for bad in ((9, 8), (-1, 8), (0, 0)):
        with pytest.raises(ValueError):
            learnability(*bad)


@pytest.fixture(scope="module")
def solver_knows_four(tmp_path_factory):
    """The built-in micro model SFT'd on the puzzles of four reference proposals only: it solves
    those often and others almost never, so what a proposal earns depends on which puzzle it is."""
    root = tmp_path_factory.mktemp("proposer")
    proposers = generate_problems("propose_countdown", 1, 8, seed=0)
    four = root / "four.jsonl"
    four.write_text("".join(json.dumps(puzzle_of(p, proposal(p)).to_dict()) + "\n" for p in proposers[:4]))
    from axiom_rl.train.sft import sft

    sft(SFTConfig(model="tiny", tiny_size="micro", problems_file=str(four), steps=60, batch_size=8, lr=3e-3,
                  output_dir=str(root / "sft"), save_every=0))  # fmt: skip
    return root / "sft" / "final_model", proposers


def test_the_learnability_reward_scores_each_proposal_by_the_solver_s_verified_attempts(solver_knows_four):
    model, proposers = solver_knows_four
    good = [(p, proposal(p)) for p in proposers]
    invalid = (proposers[0], "<answer>1 2 -> 3</answer>")
    countdown = generate_problems("countdown", 1, 2, seed=0)
    solved = COUNTDOWN.response_prefix(countdown[0], "compact") + COUNTDOWN.reference_completion(
        countdown[0], "compact"
    )
    rows = [*good, invalid, (countdown[0], solved), (countdown[1], "<answer>1+1</answer>")]
    problems, completions = [p for p, _ in rows], [c for _, c in rows]
    verdicts = [get_task(p.task).score(p, c) for p, c in rows]
    component = make_component(RewardSpec("learnability", params={"solver": str(model), "tiny_size": "micro",
                                                                 "samples": 8, "max_completion_length": 24}))  # fmt: skip
    state = torch.get_rng_state()
    scores = component.score(problems, completions, verdicts).rows
    assert torch.equal(torch.get_rng_state(), state)  # the trainer's random stream is untouched

    # Each proposal's value, from attempts sampled again and verified here, one by one.
    puzzles = [puzzle_of(p, c) for p, c in good]
    attempts = Solver(str(model), tiny_size="micro", max_completion_length=24).sample(puzzles, 8)
    successes = [
        sum(COUNTDOWN.score(q, text).status == PASSED for text in row) for q, row in zip(puzzles, attempts)
    ]
    assert scores[:8] == [learnability(s, 8) for s in successes]
    assert sum(successes[:4]) >= 8 and sum(successes[4:]) <= 2  # it knows the four it was taught
    assert any(v > 0 for v in scores[:4])
    assert scores[8] == 0.0  # an invalid proposal
    assert scores[9] == 1.0 and scores[10] == REWARDS["countdown"](countdown[1], rows[10][1], verdicts[10])
    assert component.last == {"proposals": 9.0, "valid": 8.0, "learnability": sum(scores[:9]) / 9}
    assert component.score(problems, completions, verdicts).rows == scores  # the same attempts again

    measured = measure_proposer(
        [*good, invalid], Solver(str(model), tiny_size="micro", max_completion_length=24), 8
    )
    assert measured["valid"] == 8 / 9 and measured["learnability"] == pytest.approx(sum(scores[:9]) / 9)
    stage = RewardStage([(component, 0.5)])
    assert stage.score(problems, completions, verdicts).rewards == [0.5 * v for v in scores]


def test_selfplay_with_the_proposer_role_reports_the_proposals_each_round(
    solver_knows_four, tmp_path, capsys
):
    model, _ = solver_knows_four
    out = tmp_path / "run"
    args = ["selfplay", "--model", str(model), "--tiny-size", "micro", "--task", "countdown", "--difficulty", "1",
            "--rounds", "1", "--steps-per-round", "2", "--prompts-per-step", "4", "--num-generations", "4",
            "--max-completion-length", "24", "--eval-count", "3", "--propose", "0.5", "--solver-samples", "4",
            "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    state = json.loads((out / "selfplay.json").read_text())
    (round_,) = state["rounds"]
    assert round_["problems"] == {"countdown": 4, "propose_countdown": 4}
    for name in ("before", "after"):
        measured = round_["proposer"][name]
        assert measured["proposals"] == 3 * 2 and 0.0 <= measured["valid"] <= 1.0
    report = (out / "round-1" / "report.md").read_text()
    assert "| before | 6 |" in report and "learnability" in report
    train_config = json.loads((out / "round-1" / "train" / "config.json").read_text())
    assert train_config["rewards"] == "learnability" and train_config["solver"] == str(model)
    metrics = [
        json.loads(line) for line in (out / "round-1" / "train" / "metrics.jsonl").read_text().splitlines()
    ]
    assert all("reward/learnability" in m for m in metrics)


def test_proposer_options_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["selfplay", "--task", "countdown", "--rounds", "1", "--out", str(out)]
    for args, message in (
        (["--propose", "1.5"], "--propose must be in [0, 1)"),
        (["--propose", "0.5", "--task", "is_palindrome"], "give countdown among the tasks"),
        (["--propose", "0.5", "--solver-samples", "1"], "--solver-samples must be >= 2"),
        (["--task", "countdown,propose_countdown"], "give --propose SHARE"),
        (["--propose", "0.5", "--proposer-reward", "fun"], "Invalid value for '--proposer-reward'"),
    ):
        assert main([*base, *args]) == 2
        assert message in capsys.readouterr().err and not out.exists()
    run = tmp_path / "train"
    assert (
        main(["train", "--task", "countdown", "--solver", "tiny", "--steps", "1", "--output-dir", str(run)])
        == 2
    )
    assert "has no learnability" in capsys.readouterr().err and not run.exists()


def test_a_verdict_from_elsewhere_is_not_trusted_for_validity():
    """The component re-reads the proposal: a verdict that says passed for a proposal that breaks
    the constraints still earns nothing."""
    problem = generate_problems("propose_countdown", 1, 1, seed=0)[0]
    component = make_component(RewardSpec("learnability", params={"solver": "tiny", "tiny_size": "nano"}))
    rows = component.score([problem], ["<answer>1 2 -> 3</answer>"], [Verdict(PASSED, 1, 1)]).rows
    assert rows == [0.0]


def test_a_self_play_run_from_before_the_proposer_resumes_and_refuses_a_proposer_added(tmp_path):
    from axiom_rl.errors import UserError
    from axiom_rl.selfplay.rounds import NEWER_SETTINGS, SelfPlayConfig, _settings, load_state

    cfg = SelfPlayConfig(tasks=["countdown"], out=str(tmp_path))
    stored = {k: v for k, v in _settings(cfg).items() if k not in NEWER_SETTINGS}
    (tmp_path / "selfplay.json").write_text(json.dumps({"settings": stored, "rounds": [{"round": 1}]}))
    assert load_state(cfg)["rounds"] == [{"round": 1}]
    with pytest.raises(UserError, match=r"other settings \(propose\)"):
        load_state(SelfPlayConfig(tasks=["countdown"], out=str(tmp_path), propose=0.5))
