"""`axiom-rl failures collect` and `profile`: a real SQLite results database, the real CLI, Wilson
intervals checked by hand, a failures file that trains, and bad input refused in one line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from axiom_rl.cli import main
from axiom_rl.eval.failures import countdown_class, wilson_interval
from axiom_rl.eval.store import Attempt, ResultsDB
from axiom_rl.tasks import generate_problems
from axiom_rl.verify_files import read_problems_file


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "axiom_rl", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)  # fmt: skip


@pytest.fixture
def database(tmp_path: Path) -> Path:
    """A run of 4 samples on 3 Countdown problems at difficulty 1 and 2 at difficulty 2:
    difficulty 1: 4/4, 1/4 and 0/4 passed; difficulty 2: 0/4 and 0/4."""
    path = tmp_path / "results.db"
    ones = generate_problems("countdown", 1, 3, seed=0)
    twos = generate_problems("countdown", 2, 2, seed=0)
    outcomes = {ones[0].id: 4, ones[1].id: 1, ones[2].id: 0, twos[0].id: 0, twos[1].id: 0}
    failed = ["wrong_answer", "format_error", "wrong_answer", "timeout"]
    with ResultsDB(path) as db:
        run = db.start_run("sft-eval", "tiny", {"seed": 0})
        attempts = [
            Attempt(p.id, s, f"completion {s}", 1.0 if s < outcomes[p.id] else 0.0,
                    "passed" if s < outcomes[p.id] else failed[s], 1 if s < outcomes[p.id] else 0, 1, 5, 0.01)
            for p in ones + twos for s in range(4)
        ]  # fmt: skip
        db.add_batch(run, ones + twos, attempts)
        db.start_run("empty", "tiny", {})
    return path


def test_wilson_interval_hand_checked():
    # 0 of 10: centre z^2/2n / (1 + z^2/n) = 0.19208 / 1.38415 = 0.13877 = half: [0, 0.27754]
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.27754, abs=1e-5)
    # 5 of 10: symmetric about 0.5, half = z sqrt(0.025 + 0.0096) / 1.38415 = 0.26628 -> [0.2366, 0.7634]
    low, high = wilson_interval(5, 10)
    assert (low, high) == (pytest.approx(0.23659, abs=1e-5), pytest.approx(0.76341, abs=1e-5))
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0) and wilson_interval(0, 0) == (0.0, 1.0)
    assert all(0.0 <= x <= 1.0 for k in range(21) for x in wilson_interval(k, 20))
    assert math.isclose(sum(wilson_interval(3, 20)) / 2, 1 - sum(wilson_interval(17, 20)) / 2)


def test_countdown_failures_get_finer_classes():
    from axiom_rl.types import Problem

    problem = Problem(
        id="c", task="countdown", difficulty=1, prompt="", metadata={"numbers": [3, 5], "target": 15}
    )
    far = Problem(
        id="d", task="countdown", difficulty=1, prompt="", metadata={"numbers": [3, 50], "target": 100}
    )
    assert countdown_class(problem, "I think it is fifteen") == "no answer"
    assert countdown_class(problem, "<answer>3 +</answer>") == "no answer"  # not an expression
    assert countdown_class(problem, "<answer>3 * 5 * 1</answer>") == "numbers misused"
    assert countdown_class(problem, "<answer>3 + 5</answer>") == "near miss"  # 8: within 10 of 15
    assert countdown_class(far, "<answer>3 + 50</answer>") == "wrong value"  # 53: 47 away


def test_collect_writes_the_failed_problems_as_a_problems_file(database: Path, tmp_path: Path):
    out = tmp_path / "failures.jsonl"
    proc = cli(
        "failures", "collect", "--db", str(database), "--run", "sft-eval", "--out", str(out), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    # failed by every sample: the 0/4 problem at difficulty 1 and both at difficulty 2
    assert sorted((line["difficulty"], line["failures"]["pass_rate"]) for line in lines) == [
        (1, 0.0),
        (2, 0.0),
        (2, 0.0),
    ]
    assert all(
        line["failures"]["classes"] == {"format_error": 1, "timeout": 1, "wrong_answer": 2} for line in lines
    )
    assert "3 failed problems" in proc.stderr and "wrong_answer 6" in proc.stderr
    problems = read_problems_file(str(out))  # a problems file, as train --problems-file reads it
    assert len(problems) == 3 and {p.task for p in problems} == {"countdown"}
    proc = cli("failures", "collect", "--db", str(database), "--run", "sft-eval", "--out", str(out), "--below", "0.5",
               cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rates = sorted(json.loads(line)["failures"]["pass_rate"] for line in out.read_text().splitlines())
    assert rates == [0.0, 0.0, 0.0, 0.25]  # the 1/4 problem joins


def test_profile_prints_and_saves_pass_rates_with_intervals_and_a_heat_map(database: Path, tmp_path: Path):
    proc = cli("failures", "profile", "--db", str(database), "--run", "sft-eval", "--out-dir", str(tmp_path / "p"),
               cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "countdown" in proc.stdout and "41.7%" in proc.stdout  # difficulty 1: 5 of 12
    saved = json.loads((tmp_path / "p/profile-sft-eval.json").read_text())
    one, two = saved["cells"]
    assert (one["difficulty"], one["attempts"], one["passed"], one["problems"]) == (1, 12, 5, 3)
    assert one["interval_95"] == pytest.approx(list(wilson_interval(5, 12)))
    assert one["failure_classes"] == {"format_error": 2, "timeout": 2, "wrong_answer": 3}
    assert one["countdown_classes"] == {"no answer": 7}
    assert (two["passed"], two["attempts"], two["pass_rate"]) == (0, 8, 0.0)
    png = (tmp_path / "p/profile-sft-eval.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 2000


@pytest.mark.parametrize(
    "args, message",
    [
        (["collect", "--run", "nope", "--out", "f.jsonl"], "no run named 'nope'"),
        (["collect", "--run", "empty", "--out", "f.jsonl"], "run 'empty' has no attempts"),
        (["collect", "--run", "sft-eval", "--out", "f.jsonl", "--below", "0"], "--below must be in (0, 1]"),
        (["profile", "--run", "nope"], "no run named 'nope'"),
        (["profile", "--run", "empty"], "run 'empty' has no attempts"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(database: Path, tmp_path: Path, args, message):
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = cli("failures", *args[:1], "--db", str(database), *args[1:], cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_run_that_failed_nothing_is_refused(tmp_path: Path):
    db_path = tmp_path / "solved.db"
    problems = generate_problems("countdown", 1, 2, seed=0)
    with ResultsDB(db_path) as db:
        run = db.start_run("all-right", "tiny", {})
        db.add_batch(run, problems, [Attempt(p.id, 0, "c", 1.0, "passed", 1, 1, 3, 0.1) for p in problems])
    proc = cli(
        "failures", "collect", "--db", str(db_path), "--run", "all-right", "--out", "f.jsonl", cwd=tmp_path
    )
    assert proc.returncode == 2 and "failed no problem" in proc.stderr
    assert not (tmp_path / "f.jsonl").exists()


@pytest.fixture
def collected(database: Path, tmp_path: Path) -> Path:
    """The fixture run's failures file, as `failures collect` writes it."""
    out = tmp_path / "failures.jsonl"
    proc = cli(
        "failures", "collect", "--db", str(database), "--run", "sft-eval", "--out", str(out), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    return out


def test_a_failures_file_trains(collected: Path, tmp_path: Path):
    """`train --problems-file` on what the run failed: one real step of the built-in model."""
    from axiom_rl.config import TrainConfig
    from axiom_rl.train.grpo import train

    result = train(TrainConfig(model="tiny", tiny_size="nano", problems_file=str(collected), steps=1, prompts_per_step=2,
                               num_generations=2, max_completion_length=8, output_dir=str(tmp_path / "run"),
                               save_every=0))  # fmt: skip
    assert result.steps == 1 and {r["completions"] for r in result.metrics} == {4}
    # and as a source, mixed with fresh Countdown problems, the replayed ones' pass rate logged
    result = train(TrainConfig(model="tiny", tiny_size="nano", tasks=["countdown"], steps=2, prompts_per_step=2,
                               num_generations=2, max_completion_length=8, output_dir=str(tmp_path / "mixed"),
                               save_every=0, source={"name": "failures", "file": str(collected), "fresh": 0.5}))  # fmt: skip
    assert result.steps == 2 and any(k.startswith("source/") for r in result.metrics for k in r)


def test_the_failures_source_replays_the_file_mixed_with_fresh_problems(collected: Path, tmp_path: Path):
    import re as regex

    from axiom_rl.errors import UserError
    from axiom_rl.sources import Outcome, SourceContext, make_source
    from axiom_rl.types import PASSED, WRONG_ANSWER, Verdict

    failed_ids = {json.loads(line)["id"] for line in collected.read_text().splitlines()}
    context = SourceContext(("countdown",), (1, 2), seed=4)
    spec = {"name": "failures", "file": str(collected), "fresh": 0.25}
    source = make_source(spec, context)
    drawn = source.next_batch(2000)
    replayed = [p for p in drawn if p.id in failed_ids]
    assert len(replayed) / 2000 == pytest.approx(0.75, abs=0.03)
    assert {p.id for p in replayed} == failed_ids  # every failed problem comes back
    assert all(p.task == "countdown" and p.difficulty in (1, 2) for p in drawn)
    only = make_source({**spec, "fresh": 0.0}, context)
    assert {p.id for p in only.next_batch(9)} == failed_ids  # three passes over the three
    # what it reports: the replayed problems' pass rate beside the fresh ones'
    batch = source.next_batch(4)
    source.observe([Outcome(p, ("", ""), (Verdict(PASSED, 1, 1), Verdict(WRONG_ANSWER, 0, 1)), (1.0, 0.0))
                    for p in batch])  # fmt: skip
    assert set(source.metrics().values()) == {0.5}
    restored = make_source(spec, context)
    restored.load_state_dict(json.loads(json.dumps(source.state_dict())))
    assert [p.id for p in restored.next_batch(20)] == [p.id for p in source.next_batch(20)]
    assert restored.metrics() == source.metrics()
    for bad, message in (
        ({"name": "failures"}, "needs file"),
        ({"name": "failures", "file": str(tmp_path / "none.jsonl")}, "no such problems file"),
        ({**spec, "fresh": 1.0}, "fresh must be in [0, 1)"),
    ):
        with pytest.raises(UserError, match=regex.escape(message)):
            make_source(bad, context)


def test_a_failures_file_whose_problems_do_not_verify_is_refused(
    collected: Path, tmp_path: Path, capsys, monkeypatch
):
    """A problem whose reference solution fails its own checks (a Countdown target changed; a code
    problem whose tests disagree with its solution, judged in the real sandbox), or whose
    metadata its task cannot read: one line, exit 2, no run directory."""
    lines = [json.loads(line) for line in collected.read_text().splitlines()]
    wrong_target = dict(
        lines[1], metadata={**lines[1]["metadata"], "target": lines[1]["metadata"]["target"] + 1}
    )
    no_numbers = dict(lines[0], metadata={"target": 5})
    (code,) = generate_problems("fizzbuzz", 1, 1, seed=0)
    wrong_test = code.to_dict()
    wrong_test["tests"][0]["expected"] = "not what it returns"
    cases = [
        ([lines[0], wrong_target], f"problem {wrong_target['id']!r} does not verify: its reference solution gets wrong_answer"),
        ([wrong_test], f"problem {code.id!r} does not verify: its reference solution gets wrong_answer"),
        ([lines[0], no_numbers], "bad.jsonl:2: not a problem (a countdown problem needs metadata.numbers"),
    ]  # fmt: skip
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    for problems, message in cases:
        (tmp_path / "bad.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
        code = main(["train", "--model", "tiny", "--tiny-size", "nano", "--task", "countdown", "--steps", "1",
                     "--source", "failures:file=bad.jsonl", "--output-dir", "run"])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("\n") == 1, err
        assert not (tmp_path / "run").exists()
