"""The or_debug task: generated models, sabotage, IIS, strict answers, solver workers, rewards.

Everything runs for real: HiGHS solves every model, repairs are solved in worker processes, the
train test trains the built-in model for three steps."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import signal
from collections import Counter

import pytest

from axiom_rl.rewards import REWARDS
from axiom_rl.tasks import generate_problems, get_task
from axiom_rl.tasks.or_debug.answer import parse_answer
from axiom_rl.tasks.or_debug.families import FAMILIES
from axiom_rl.tasks.or_debug.model import LinearModel, ModelError, parse_constraint
from axiom_rl.tasks.or_debug.solve import (
    INFEASIBLE,
    OPTIMAL,
    TIME_LIMIT,
    find_iis,
    is_infeasible,
    solve_model,
)
from axiom_rl.tasks.or_debug.worker import CRASHED, SolverPool
from axiom_rl.types import (
    FORMAT_ERROR,
    PARTIAL_DIAGNOSIS,
    PASSED,
    TIMEOUT,
    WRONG_DIAGNOSIS,
    WRONG_FIX,
    Problem,
)

TASK = get_task("or_debug")
reward = REWARDS["or_debug"]


def answer(*lines: str) -> str:
    return "<answer>\n" + "\n".join(lines) + "\n</answer>"


def model_of(problem: Problem) -> LinearModel:
    return LinearModel.from_dict(problem.metadata["model"])


def _twenty(difficulty: int) -> list[str]:
    return [p.to_json() for p in generate_problems("or_debug", difficulty, 20, seed=7)]


@pytest.fixture(scope="module")
def problems() -> list[Problem]:
    """20 problems at each difficulty 1-10 (200 in all), made on every core."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    spawn = multiprocessing.get_context("spawn")  # no HiGHS threads of this process carried over
    with ProcessPoolExecutor(max(1, min(4, len(os.sched_getaffinity(0)))), mp_context=spawn) as pool:
        return [Problem.from_json(line) for lines in pool.map(_twenty, range(10, 0, -1)) for line in lines][
            ::-1
        ]


def test_every_reference_repair_scores_1_and_leaving_the_model_or_a_random_deletion_scores_nothing(problems):
    assert len(problems) == 200
    rng = random.Random(0)
    families = Counter()
    for p in problems:
        families[p.metadata["family"]] += 1
        reference = TASK.reference_completion(p)
        verdict = TASK.score(p, reference)
        assert verdict.status == PASSED and reward(p, reference, verdict) == 1.0, (p.id, verdict.detail)
        # The infeasible model as it is (no repair, nothing named): not fixed, the format score at most.
        unchanged = answer("conflict:")
        verdict = TASK.score(p, unchanged)
        assert verdict.status == WRONG_DIAGNOSIS and reward(p, unchanged, verdict) == 0.1
        # Deleting a constraint outside the conflict leaves the conflict, whole: never a repair.
        outside = [c.name for c in model_of(p).constraints if c.name not in p.metadata["conflict"]]
        if outside:
            deletion = answer("conflict:", f"remove {rng.choice(outside)}")
            verdict = TASK.score(p, deletion)
            assert verdict.status == WRONG_DIAGNOSIS and reward(p, deletion, verdict) == 0.1, p.id
    assert set(families) == set(FAMILIES)  # every family appears


def test_the_reference_repairs_undo_the_sabotage_and_the_compact_form_scores_too(problems):
    for p in problems[::10]:
        assert TASK.score(p, "<answer>" + TASK.reference_completion(p, "compact")).status == PASSED
        assert len(p.metadata["sabotage"]) == (1 if p.difficulty <= 7 else 2)


def test_the_lp_text_is_what_highs_itself_reads(tmp_path, problems):
    """The prompt's model, read by HiGHS's own LP reader, is the model we solve: same status."""
    import highspy

    for p in problems[::25]:
        path = tmp_path / "m.lp"
        path.write_text(model_of(p).lp_text())
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        assert h.readModel(str(path)) == highspy.HighsStatus.kOk
        h.run()
        assert h.getModelStatus() == highspy.HighsModelStatus.kInfeasible
        assert solve_model(model_of(p)).status == INFEASIBLE, solve_model(model_of(p))


def test_the_conflict_is_an_irreducible_infeasible_subsystem():
    for difficulty in (2, 5, 7):  # LPs and MIPs, one conflict each
        for p in generate_problems("or_debug", difficulty, 8, seed=3):
            model = model_of(p)
            names = set(p.metadata["conflict"])
            only = model.without({c.name for c in model.constraints} - names)
            assert is_infeasible(only), p.id  # infeasible by itself ...
            for name in names:  # ... and each of its constraints needed
                assert not is_infeasible(only.without({name})), (p.id, name)
            assert sorted(names) == find_iis(model)


def test_generation_is_deterministic_and_the_splits_are_disjoint():
    a = generate_problems("or_debug", 4, 5, seed=1)
    assert [p.to_json() for p in a] == [p.to_json() for p in generate_problems("or_debug", 4, 5, seed=1)]
    train = {TASK.content_key(p) for p in generate_problems("or_debug", 1, 40)}
    held_out = {TASK.content_key(p) for p in generate_problems("or_debug", 1, 40, split="eval")}
    assert not train & held_out


def test_a_problem_survives_its_json_round_trip():
    p = generate_problems("or_debug", 9, 1)[0]
    back = Problem.from_json(p.to_json())
    assert back == p and TASK.score(back, TASK.reference_completion(back)).ok


# ------------------------------------------------------------------------------ reading answers


def test_constraint_lines_are_read_strictly():
    known = {"x1", "x2", "y"}
    c = parse_constraint("c", "2 x1 + 3.5x2 - y <= 40", known)
    assert c.terms == (("x1", 2.0), ("x2", 3.5), ("y", -1.0)) and c.sense == "<=" and c.rhs == 40
    assert parse_constraint("c", "x1+x1=>-3", known).terms == (("x1", 2.0),)
    assert parse_constraint("c", "2*x1 = 4", known).sense == "="
    for bad, message in [
        ("x1 + z <= 3", "no variable 'z'"),
        ("x1 x2 <= 3", "joined by + or -"),
        ("x1 + x2", "expected terms"),
        ("x1 <= 1e400", "expected terms"),
        ("9999999999999 x1 <= 3", "cannot read"),
        ("x1 - x1 <= 3", "every coefficient is 0"),
        ("__import__('os') <= 1", "cannot read"),
        ("x1 + " * 1000 + "x2 <= 1", "longer than"),
    ]:
        with pytest.raises(ModelError, match=re.escape(message)):
            parse_constraint("c", bad, known)


def test_answers_are_read_strictly():
    a = parse_answer(
        "think...<answer>\nconflict: a, b\nreplace a: x <= 3\nremove b\nadd c: x >= 1\n</answer>"
    )
    assert a.conflict == ("a", "b") and [x.verb for x in a.actions] == ["replace", "remove", "add"]
    assert parse_answer("conflict:a,b\nremove b</answer>").conflict == ("a", "b")  # the prompt opened the tag
    for bad, message in [
        ("no tags at all", "no <answer>"),
        ("<answer>remove a</answer>", "no 'conflict:' line"),
        ("<answer>conflict: a\nconflict: b</answer>", "named twice"),
        ("<answer>conflict: a\ndelete a</answer>", "cannot read the line"),
        ("<answer>conflict: a\n" + "remove a\n" * 5 + "</answer>", "more than 4 repair lines"),
        ("<answer>" + "x" * 9000 + "</answer>", "longer than"),
    ]:
        with pytest.raises(ModelError, match=re.escape(message)):
            parse_answer(bad)


ADVERSARIAL = r"""
import random
from axiom_rl.tasks.or_debug.answer import parse_answer
from axiom_rl.tasks.or_debug.model import ModelError, parse_constraint

rng = random.Random(0)
for n in (50, 500, 1999):
    texts = ["a" * n + "!", "a1 " * (n // 3) + "!", "1" * 12 + "a" * n, "a+" * (n // 2) + "=", " " * n + "a<=1x"]
    texts += ["".join(rng.choice("ab1 _+-*.=<>:,\n") for _ in range(n)) for _ in range(50)]
    for text in texts:
        for parse in (lambda t: parse_constraint("c", t, {"a", "ab", "a1"}),
                      lambda t: parse_answer("<answer>conflict: " + t + "</answer>"),
                      lambda t: parse_answer("<answer>conflict: a\nreplace a: " + t + "</answer>"),
                      lambda t: parse_answer("<answer>" + t + "</answer>")):
            try:
                parse(text)
            except ModelError:
                pass
print("ok")
"""


def test_no_answer_makes_the_reader_backtrack_for_long():
    """Linear-time reading: a pattern with nested optional parts once took exponential time on a
    long run of letters after `conflict:` (a sampled completion hung an evaluation). The 800
    hostile texts take milliseconds; a timeout here means one of them did not."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", ADVERSARIAL], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.fixture(scope="module")
def one() -> Problem:
    return generate_problems("or_debug", 3, 1, seed=11)[0]


def test_each_kind_of_wrong_answer_gets_its_status_and_reward(one):
    conflict = one.metadata["conflict"]
    undo = one.reference_solution.splitlines()[1:]
    cases = {
        "no answer at all": ("I do not know", FORMAT_ERROR, 0.0),
        "unreadable": (answer("conflict: x", "fix everything"), FORMAT_ERROR, 0.0),
        "right diagnosis, no repair": (answer("conflict: " + ", ".join(conflict)), WRONG_FIX, 0.5),
        "half the diagnosis, no repair": (answer(f"conflict: {conflict[0]}"), PARTIAL_DIAGNOSIS, 0.5 / len(conflict)),
        "a repair naming a constraint the model lacks": (answer("conflict: " + ", ".join(conflict), "remove nope"), WRONG_FIX, 0.5),
        "a repair with a number past the limit": (answer(f"conflict: {conflict[0]}", f"replace {conflict[0]}: " + "999999999999 " + model_of(one).variables[0] + " <= 1"), PARTIAL_DIAGNOSIS, 0.5 / len(conflict)),
        "the right repair, a wrong diagnosis": (answer("conflict:", *undo), PASSED, 1.0),
    }  # fmt: skip
    for what, (completion, status, expected_reward) in cases.items():
        verdict = TASK.score(one, completion)
        assert verdict.status == status, (what, verdict)
        assert reward(one, completion, verdict) == pytest.approx(
            max(expected_reward, 0.1 * (status != FORMAT_ERROR))
        ), what
    # Naming every constraint does not earn the diagnosis' credit: the overlap is over the union.
    everything = answer("conflict: " + ", ".join(c.name for c in model_of(one).constraints))
    verdict = TASK.score(one, everything)
    assert verdict.status == PARTIAL_DIAGNOSIS and verdict.fraction == len(conflict) / len(
        model_of(one).constraints
    )


def test_a_repair_of_more_changes_than_mistakes_is_not_one_even_at_the_intended_optimum(one):
    """Here the supplies did not bind at the optimum: dropping them with the added policy reaches
    the intended optimum, and would pass if repairs could be of any size."""
    assert one.metadata["sabotage"][0]["undo"] == "remove policy_1" and "one mistake was made" in one.prompt
    conflict = one.metadata["conflict"]
    removals = [f"remove {n}" for n in conflict if n != "supply_s2"]
    verdict = TASK.score(one, answer("conflict: " + ", ".join(conflict), *removals))
    assert verdict.status == WRONG_FIX and "2 changes for 1 mistake" in verdict.detail
    assert TASK.score(one, answer("conflict:", removals[0])).status == PASSED  # the one change, alone


def test_the_reward_refuses_another_task_s_problem():
    from axiom_rl.errors import UserError

    p = generate_problems("countdown", 1, 1)[0]
    with pytest.raises(UserError, match="needs an or_debug problem"):
        reward(p, "", TASK.score(generate_problems("or_debug", 1, 1)[0], ""))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m["model"].update(sense="sideways"), "sense"),
        (lambda m: m["model"]["constraints"][0].update(rhs=float("inf")), "finite"),
        (
            lambda m: m["model"]["constraints"][0]["terms"].append(["ghost", 1.0]),
            "over the model's variables",
        ),
        (lambda m: m.update(conflict=["no_such_row"]), "metadata.conflict"),
        (lambda m: m.update(objective="big"), "metadata.objective"),
    ],
)
def test_a_malformed_problem_file_is_refused_with_its_reason(change, message):
    p = generate_problems("or_debug", 1, 1)[0]
    data = json.loads(p.to_json())
    change(data["metadata"])
    with pytest.raises(ValueError, match=message):
        TASK.check_problem(Problem.from_dict(data))


# ------------------------------------------------------------------------------ solver workers


def test_a_worker_that_hangs_is_killed_and_replaced_and_the_solve_is_a_timeout(one):
    pool = SolverPool(1, grace_s=0.5)
    try:
        assert pool.solve(model_of(one)).status == INFEASIBLE
        worker = pool._all[0]
        os.kill(worker.proc.pid, signal.SIGSTOP)  # a solve that never returns
        reply = pool.solve(model_of(one), time_limit=0.5)
        assert reply.status == TIME_LIMIT and "no answer" in reply.detail
        assert worker.proc.poll() is not None  # killed, not left behind
        assert pool.solve(model_of(one)).status == INFEASIBLE  # a fresh worker took its place
        assert pool._all[0] is not worker
    finally:
        pool.close()


def test_a_worker_that_dies_is_a_crash_verdict_and_the_next_solve_works(one):
    pool = SolverPool(1)
    try:
        assert pool.solve(model_of(one)).status == INFEASIBLE
        pool._all[0].proc.kill()
        pool._all[0].proc.wait()
        assert pool.solve(model_of(one)).status == CRASHED
        repaired = TASK.score(one, TASK.reference_completion(one))
        assert repaired.status == PASSED
        assert pool.solve(model_of(one)).status == INFEASIBLE
    finally:
        pool.close()


def test_highs_running_out_of_time_is_a_timeout_verdict(one):
    pool = SolverPool(1)
    try:
        big = FAMILIES["knapsack"](random.Random(0), 60, True)
        reply = pool.solve(big, time_limit=1e-6)
        assert reply.status in (TIME_LIMIT, OPTIMAL)  # a tiny model may finish before the clock is read
        assert pool.solve(model_of(one)).status == INFEASIBLE
    finally:
        pool.close()


def test_a_repair_that_times_out_is_the_answer_s_timeout(one, monkeypatch):
    from axiom_rl.tasks.or_debug import task as task_module

    monkeypatch.setattr(task_module, "SOLVE_TIME_LIMIT_S", 0.0)  # HiGHS stops before it starts
    verdict = TASK.score(one, TASK.reference_completion(one))
    assert verdict.status == TIMEOUT and reward(one, "", verdict) >= 0.1


# ------------------------------------------------------------------------------ the commands


def test_export_writes_references_that_verify(tmp_path, capsys):
    from axiom_rl.cli import main

    out, refs = tmp_path / "p.jsonl", tmp_path / "r.jsonl"
    assert main(["problems", "export", "--task", "or_debug", "-d", "1-10", "-n", "2", "--out", str(out), "--references", str(refs)]) == 0  # fmt: skip
    assert main(["verify", str(out), str(refs), "--out", str(tmp_path / "v.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert len(rows) == 20 and all(r["status"] == PASSED and r["reward"] == 1.0 for r in rows)
    assert (
        main(["problems", "export", "--task", "or_debug", "--out", str(out), "--references", str(out)]) == 2
    )
    assert "name the same file" in capsys.readouterr().err


def test_train_runs_on_or_debug(tmp_path):
    from axiom_rl.cli import main

    run = tmp_path / "run"
    assert main(["train", "--task", "or_debug", "--model", "tiny", "--tiny-size", "nano", "--steps", "3", "--prompts-per-step", "2",
                 "--num-generations", "2", "--max-completion-length", "16", "--save-every", "0", "--output-dir", str(run)]) == 0  # fmt: skip
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(0.0 <= r["reward_mean"] <= 1.0 for r in rows)


# ------------------------------------------------------------------------------ step traces


def test_a_reference_repair_s_trace_ends_feasible_at_the_intended_optimum():
    from axiom_rl.tasks.or_debug.trace import repair_trace

    for p in generate_problems("or_debug", 2, 4, seed=5) + generate_problems("or_debug", 9, 2, seed=5):
        steps = repair_trace(p, TASK.reference_completion(p))
        assert steps[0].label == 0.5 and steps[0].status == ""  # the diagnosis overlaps the IIS
        assert len(steps) == 1 + len(p.metadata["sabotage"])
        assert (steps[-1].label, steps[-1].status, steps[-1].iis_size) == (1.0, OPTIMAL, 0)


def test_a_wrong_step_is_labelled_0_and_an_unreadable_answer_has_no_trace(one):
    from axiom_rl.tasks.or_debug.trace import repair_trace

    outside = next(c.name for c in model_of(one).constraints if c.name not in one.metadata["conflict"])
    steps = repair_trace(one, answer(f"conflict: {outside}", f"remove {outside}"))
    assert [s.label for s in steps] == [0.0, 0.0]
    assert steps[1].status == INFEASIBLE and steps[1].iis_size == len(one.metadata["conflict"])
    steps = repair_trace(one, answer("conflict:", "remove no_such_row"))
    assert steps[1].label == 0.0 and steps[1].status.startswith("not applied")
    assert repair_trace(one, "no answer") is None


# ------------------------------------------------------------------ steps and labels for a PRM


def test_or_debug_steps_are_the_answer_s_lines_in_the_order_written():
    from axiom_rl.prm.steps import or_debug_steps, split_steps

    text = "I think\n<answer>\nremove cap_a\n\n  conflict: cap_a, need_b  \n</answer> trailing"
    steps = or_debug_steps(text)
    assert [(s.kind, s.text) for s in steps] == [
        ("repair", "remove cap_a"),
        ("diagnosis", "conflict: cap_a, need_b"),
    ]
    assert [text[: s.end].endswith(t) for s, t in zip(steps, ["remove cap_a", "need_b"])] == [True, True]
    # the prompt opened the tag (the compact style): the text before the closing one
    assert [s.kind for s in or_debug_steps("conflict: a\nremove a\n</answer>")] == ["diagnosis", "repair"]
    # the last answer is the one read; an answer that cannot be read has no steps
    two = "<answer>\nconflict: x\n</answer> no, <answer>\nconflict: y\nremove y\n</answer>"
    assert [s.text for s in or_debug_steps(two)] == ["conflict: y", "remove y"]
    assert or_debug_steps("<answer>\nconflict: a\nfix it somehow\n</answer>") == []
    assert or_debug_steps("no answer") == []
    assert split_steps(Problem(id="o", task="or_debug", difficulty=1, prompt=""), text) == steps


def test_or_debug_step_labels_follow_the_text_and_the_solver(one):
    """The reference repair: the diagnosis names the conflict (0.5), the undo reaches the intended
    optimum (1.0); written repair-first, the labels follow the text. A diagnosis outside the
    conflict and the removal of a constraint outside it: 0 and 0."""
    from axiom_rl.prm.labels import exact_labels, or_debug_labels

    reference = TASK.reference_completion(one)
    assert or_debug_labels(one, reference) == [0.5, 1.0]
    conflict_line, repair_line = reference.split("<answer>")[1].split("</answer>")[0].strip().splitlines()
    assert or_debug_labels(one, answer(repair_line, conflict_line)) == [1.0, 0.5]
    outside = next(c.name for c in model_of(one).constraints if c.name not in one.metadata["conflict"])
    assert or_debug_labels(one, answer(f"conflict: {outside}", f"remove {outside}")) == [0.0, 0.0]
    assert or_debug_labels(one, "no answer") == []
    assert exact_labels(one, reference) == [0.5, 1.0]


def test_prm_label_and_the_oracle_steps_reward_read_or_debug_runs(one, tmp_path):
    """`prm label` on a real results database of or_debug attempts: the solver's labels, no policy
    needed; the oracle_steps reward gives the same labels as step rewards."""
    from axiom_rl.cli import main
    from axiom_rl.eval.store import Attempt, ResultsDB
    from axiom_rl.prm.components import OracleSteps
    from axiom_rl.prm.evaluation import rerank
    from axiom_rl.prm.labels import read_labels
    from axiom_rl.prm.steps import or_debug_steps

    outside = next(c.name for c in model_of(one).constraints if c.name not in one.metadata["conflict"])
    texts = [TASK.reference_completion(one), answer(f"conflict: {outside}", f"remove {outside}"), "garble"]
    db = tmp_path / "results.db"
    with ResultsDB(db) as store:
        run = store.start_run("samples", "hand-written", {"samples": 3})
        verdicts = [TASK.score(one, t) for t in texts]
        store.add_batch(run, [one], [Attempt(one.id, k, t, float(v.status == PASSED), v.status, v.passed, v.total,
                                             len(t), 0.0) for k, (t, v) in enumerate(zip(texts, verdicts))])  # fmt: skip
    out = tmp_path / "labels.jsonl"
    assert main(["prm", "label", "--db", str(db), "--run", "samples", "--out", str(out)]) == 0
    labelled = sorted(read_labels(str(out)), key=lambda e: e.sample)
    assert [list(e.labels) for e in labelled] == [[0.5, 1.0], [0.0, 0.0], []]
    assert [e.passed for e in labelled] == [True, False, False]
    # majority vote counts answers: two samples of the same wrong repair outvote the right one
    voters = [labelled[0], labelled[1], dataclasses.replace(labelled[1], sample=3)]
    assert rerank(voters, [[0.0], [0.0], [0.0]]).majority == 0.0
    scores = OracleSteps().score([one] * 3, texts, verdicts)
    assert [s.values if s else None for s in scores.steps] == [(0.5, 1.0), (0.0, 0.0), None]
    assert scores.steps[0].ends == tuple(s.end for s in or_debug_steps(texts[0]))
    assert scores.rows == [0.75, 0.0, 0.0]  # logged: the mean step reward
