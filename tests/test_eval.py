"""Evaluation into SQLite, pass@k, comparison, SFT warm-up, and the quickstart pipeline."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HUMANEVAL, as_from_a_terminal, needs_shared_data, run_in_background

from axiom_rl.cli import main, resolve_config
from axiom_rl.config import EvalConfig, SFTConfig
from axiom_rl.errors import UserError
from axiom_rl.eval.evaluate import default_run_name, evaluate, summarize
from axiom_rl.eval.passk import mean_pass_at_k, pass_at_k
from axiom_rl.eval.store import Attempt, ResultsDB
from axiom_rl.io import write_jsonl_atomic
from axiom_rl.models.tiny import build_tiny_model
from axiom_rl.tasks import all_tasks, generate_problems, get_task, parse_task_list
from axiom_rl.tasks.prompts import format_prompt
from axiom_rl.train.sft import SFTStopped, sft

# ---------------------------------------------------------------------------------- pass@k


def test_pass_at_k_hand_computed():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # c / n
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(5, 2, 4) == 1.0  # only 3 wrong samples: any 4 include a right one
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - math.comb(7, 5) / math.comb(10, 5))  # = 11/12
    assert mean_pass_at_k([(4, 0), (4, 4)], 1) == 0.5
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_the_summary_reports_pass_at_k_up_to_the_samples_per_problem():
    """pass@K for K = the samples per problem (here 4: the share of problems solved by any of its
    samples), and the usual 5, 10, ... only where there are that many samples."""

    def attempt(problem: str, passed: bool) -> dict:
        status = "passed" if passed else "wrong_answer"
        return dict(
            task="t", difficulty=1, problem_id=problem, status=status, passed=int(passed), total=1, tokens=3
        )

    rows = [attempt("a", i == 2) for i in range(4)] + [attempt("b", False) for _ in range(4)]
    (summary,) = summarize(rows)
    assert summary["pass@1"] == pytest.approx((1 / 4 + 0) / 2)
    assert summary["pass@4"] == pytest.approx(1 / 2)
    assert "pass@5" not in summary
    (one_sample,) = summarize([attempt("a", True), attempt("b", False)])
    assert [k for k in one_sample if k.startswith("pass@")] == ["pass@1"]
    (ten,) = summarize([attempt("a", i == 0) for i in range(10)])
    assert [k for k in ten if k.startswith("pass@")] == ["pass@1", "pass@5", "pass@10"]


def test_pass_at_k_matches_the_binomial_form():
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


# ---------------------------------------------------------------------------------- the store


def test_store_keeps_runs_problems_and_attempts(tmp_path):
    db_path = tmp_path / "r.db"
    p = generate_problems("countdown", 1, 2)
    with ResultsDB(db_path) as db:
        run = db.start_run("a", "tiny", {"x": 1})
        db.add_batch(
            run,
            p,
            [
                Attempt(p[0].id, 0, "c", 1.0, "passed", 1, 1, 3, 0.1),
                Attempt(p[1].id, 0, "d", 0.0, "format_error", 0, 1, 2, 0.1),
            ],
        )
        db.add_batch(
            run, p, [Attempt(p[0].id, 0, "again", 0.0, "passed", 1, 1, 3, 0.1)]
        )  # a rerun never duplicates
        assert len(db.attempts(run)) == 2 and db.problem(p[1].id) == p[1]
        assert db.start_run("a", "tiny", {"x": 1}).id == run.id  # same settings: continue
        with pytest.raises(UserError, match="other settings"):
            db.start_run("a", "tiny", {"x": 2})
        with pytest.raises(UserError, match="no run named 'b'"):
            db.require_run("b")
    assert sqlite3.connect(db_path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_database_that_is_not_ours_is_refused_and_left_alone(tmp_path):
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    with pytest.raises(UserError, match="not an axiom-rl results database"):
        ResultsDB(other)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(UserError, match="not an axiom-rl"):
        ResultsDB(text)
    assert other.read_bytes() == before and text.read_text() == "hello"


def test_a_damaged_database_is_a_one_line_error(tmp_path, capsys):
    """Pages overwritten (a disk fault, a copy taken mid-write): every command that reads it says
    so in one line, exit code 2, instead of an sqlite3 traceback."""
    db = tmp_path / "r.db"
    problems = generate_problems("countdown", 1, 40, split="eval")
    with ResultsDB(db) as store:
        run = store.start_run("base", "tiny", {})
        store.add_batch(
            run, problems, [Attempt(p.id, 0, "x" * 500, 0.0, "format_error", 0, 1, 9, 0.0) for p in problems]
        )
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = b"\xff" * (len(data) - page)  # every page but the first (the schema) overwritten
    db.write_bytes(bytes(data))
    for args in (["eval", "list"], ["eval", "compare", "base", "base"], ["sft", "--from-samples", "base"]):
        extra = ["--output-dir", str(tmp_path / "sft")] if args[0] == "sft" else []
        assert main([*args, "--db", str(db), *extra]) == 2, args
        err = capsys.readouterr().err.strip()
        assert err == f"axiom-rl: error: results database {db}: database disk image is malformed", err
    assert not (tmp_path / "sft").exists()


RACE_TO_OPEN = """
import sys, time
from axiom_rl.errors import UserError
from axiom_rl.eval.store import ResultsDB
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # every process opens at the same moment
try:
    with ResultsDB(sys.argv[1]) as store:
        store.start_run("same", "tiny", {"count": 1})
except UserError as e:
    sys.exit(f"user error: {e}")
"""


def test_processes_that_start_on_one_new_database_at_once_all_get_it(tmp_path):
    """Two evaluations started together on a new --db: one creates it, the rest open it (before,
    one saw a half-created file as 'not an axiom-rl results database', or lost the race to insert
    the same run and crashed; each happened in most rounds of this test)."""
    for round_ in range(3):
        db = tmp_path / f"r{round_}.db"
        start = time.time() + 3.0
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", RACE_TO_OPEN, str(db), str(start)], stderr=subprocess.PIPE, text=True
            )
            for _ in range(8)
        ]
        results = [(p.wait(timeout=60), p.stderr.read()) for p in procs]
        assert all(code == 0 for code, _ in results), [err[-300:] for code, err in results if code]
        with ResultsDB(db, create=False) as store:
            assert [r.name for r in store.runs()] == ["same"]
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(f".r{round_}")) == []


# ---------------------------------------------------------------------------------- evaluate


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("model")
    model, tok = build_tiny_model("nano", seed=0)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    (path / "axiom_rl.json").write_text(
        json.dumps({"prompt_style": "compact", "tasks": ["countdown"], "difficulties": [1]})
    )
    return path


def small_eval(model_dir, db, **kw) -> EvalConfig:
    values = dict(
        model=str(model_dir),
        tasks=["countdown"],
        difficulty="1-2",
        count=6,
        samples=3,
        temperature=1.0,
        max_completion_length=8,
        db=str(db),
        batch_size=4,
    )
    values.update(kw)
    return EvalConfig(**values)


def test_evaluate_stores_every_attempt_and_summarises(tmp_path, model_dir):
    name, summary = evaluate(small_eval(model_dir, tmp_path / "r.db", run_name="first"))
    assert name == "first" and [(s["task"], s["difficulty"]) for s in summary] == [
        ("countdown", 1),
        ("countdown", 2),
    ]
    for s in summary:
        assert s["problems"] == 6 and s["attempts"] == 18
        assert s["correct"] + s["partial"] + s["failed"] == 18
        assert 0 <= s["pass@1"] <= s["pass@3"] <= 1 and "pass@5" not in s  # 3 samples per problem
    with ResultsDB(tmp_path / "r.db") as db:
        rows = db.attempts(db.require_run("first"))
    assert len(rows) == 36 and {r["sample"] for r in rows} == {0, 1, 2}
    assert all(r["tokens"] <= 8 for r in rows)


def test_an_interrupted_evaluation_finishes_without_duplicates(tmp_path, model_dir):
    evaluate(small_eval(model_dir, tmp_path / "whole.db", run_name="r"))
    batches = []

    def kill_after_first_batch(done, total):
        batches.append(done)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evaluate(small_eval(model_dir, tmp_path / "cut.db", run_name="r"), progress=kill_after_first_batch)
    with ResultsDB(tmp_path / "cut.db") as db:
        assert len(db.attempts(db.require_run("r"))) == 4 * 3  # the first batch: 4 problems x 3 samples
    evaluate(small_eval(model_dir, tmp_path / "cut.db", run_name="r"))
    with ResultsDB(tmp_path / "cut.db") as a, ResultsDB(tmp_path / "whole.db") as b:
        cut, full = a.attempts(a.require_run("r")), b.attempts(b.require_run("r"))
    assert len(cut) == 36
    key = lambda r: (r["problem_id"], r["sample"])  # noqa: E731
    assert sorted(map(key, cut)) == sorted(map(key, full))
    assert [r["completion"] for r in sorted(cut, key=key)] == [r["completion"] for r in sorted(full, key=key)]


def test_overlapped_verification_stores_what_verifying_after_generation_does(tmp_path, model_dir):
    """overlap_verification on: each batch's completions go to the sandbox as they end and a batch
    is stored once the next has generated. The same attempts, every one a sandbox run; a run begun
    one way finishes the other (the option is not one of the run's settings)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "overlap_verification.py"
    spec = importlib.util.spec_from_file_location("overlap_verification_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    problems = tmp_path / "p.jsonl"
    write_jsonl_atomic(problems, [bench.commented_out_problem(i).to_dict() for i in range(7)])

    def attempts(db: Path) -> list[tuple]:
        with ResultsDB(db) as store:
            rows = store.attempts(store.require_run("r"))
        return sorted((r["problem_id"], r["sample"], r["completion"], r["status"], r["reward"]) for r in rows)

    options = dict(
        model=str(model_dir),
        problems_file=str(problems),
        samples=3,
        temperature=1.0,
        max_completion_length=24,
    )
    options.update(batch_size=4, run_name="r")
    for mode in ("off", "on"):
        evaluate(EvalConfig(**options, db=str(tmp_path / f"{mode}.db"), overlap_verification=mode))
    plain = attempts(tmp_path / "off.db")
    assert attempts(tmp_path / "on.db") == plain and len(plain) == 21
    assert {status for *_, status, _ in plain} == {"passed", "syntax_error"}

    with pytest.raises(KeyboardInterrupt):  # after the first batch: on, then finished off
        evaluate(
            EvalConfig(**options, db=str(tmp_path / "cut.db"), overlap_verification="on"),
            progress=lambda done, total: (_ for _ in ()).throw(KeyboardInterrupt),
        )
    with ResultsDB(tmp_path / "cut.db") as db:
        assert len(db.attempts(db.require_run("r"))) == 4 * 3  # the first batch, verified and stored
    evaluate(EvalConfig(**options, db=str(tmp_path / "cut.db"), overlap_verification="off"))
    assert attempts(tmp_path / "cut.db") == plain


def test_ctrl_c_in_eval_says_how_to_finish_the_run(tmp_path, model_dir):
    """A real Ctrl-C mid-evaluation: exit code 130, no traceback, and a line naming the stored run
    and how to finish it; the same command then does."""
    db = tmp_path / "r.db"
    COUNT = 1000  # at 3-10 ms a batch of 4, seconds of work left when the poll below sees the first
    args = [sys.executable, "-m", "axiom_rl", "eval", "--model", str(model_dir), "--task", "countdown",
            "--count", str(COUNT), "--batch-size", "4", "--max-completion-length", "8", "--db", str(db)]  # fmt: skip
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal
    )
    started = time.monotonic()
    seen, errors = None, []
    while time.monotonic() < started + 120 and proc.poll() is None:
        time.sleep(0.05)
        if db.exists():
            try:  # a short busy timeout: a poll that waits on the writer's lock must not stall the loop
                with contextlib.closing(sqlite3.connect(db, timeout=0.05)) as conn:
                    stored = conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
            except sqlite3.Error as e:
                errors.append(str(e))
                continue
            if stored > 0:
                seen = (round(time.monotonic() - started, 2), stored)
                break
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    polls = f"first attempts seen (s, count): {seen}; poll errors: {sorted(set(errors))[:3]}"
    assert proc.returncode == 130 and "Traceback" not in stderr, f"{polls}\n{stderr[-2000:]}"
    name = f"{str(model_dir).replace('/', '_')}-countdown-d1-greedy-s0"
    assert f"stored in {db} as run {name!r}: the same command finishes it" in stderr
    with ResultsDB(db) as store:
        assert 0 < len(store.attempts(store.require_run(name))) < COUNT
    assert main(args[3:]) == 0  # the same command, finishing it (in this process: no start-up again)
    with ResultsDB(db) as store:
        assert len(store.attempts(store.require_run(name))) == COUNT


def test_eval_and_sft_take_all_as_train_does(tmp_path, capsys):
    """`--all`: every generated task, as `train --all` and `problems export --all`; the run's
    default name says "all" rather than listing 27 names."""
    db = tmp_path / "r.db"
    args = ["--model", "tiny", "--tiny-size", "nano", "--all"]
    assert main(["eval", *args, "--count", "1", "--max-completion-length", "4", "--db", str(db)]) == 0
    assert "stored as run 'tiny-all-d1-greedy-s0'" in capsys.readouterr().err
    with ResultsDB(db) as store:
        tasks = {a["task"] for a in store.attempts(store.require_run("tiny-all-d1-greedy-s0"))}
    assert tasks == set(all_tasks()) and len(tasks) == 28
    assert main(["sft", *args, "--steps", "1", "--batch-size", "4", "--output-dir", str(tmp_path / "s")]) == 0
    card = json.loads((tmp_path / "s/final_model/axiom_rl.json").read_text())
    assert card["tasks"] == all_tasks()
    # A YAML file says it as `tasks: all` (and the command line may too: --task all).
    assert parse_task_list("all") == parse_task_list(["all"]) == all_tasks()
    yaml_file = tmp_path / "all.yaml"
    yaml_file.write_text("tasks: all\n")
    assert resolve_config(EvalConfig, str(yaml_file), {}, command="eval").tasks == ["all"]
    # ... the same run as --all's: it finds that run finished, not "other settings"
    again = ["eval", "--config", str(yaml_file), "--model", "tiny", "--tiny-size", "nano", "--count", "1"]
    assert main([*again, "--max-completion-length", "4", "--db", str(db)]) == 0
    assert "stored as run 'tiny-all-d1-greedy-s0'" in capsys.readouterr().err
    assert default_run_name(EvalConfig(model="tiny", tasks=["all"])) == "tiny-all-d1-greedy-s0"
    capsys.readouterr()
    for command in (["eval", "--db", str(db)], ["sft", "--output-dir", str(tmp_path / "t")]):
        assert main([*command, *args, "--task", "lcs"]) == 2
        assert capsys.readouterr().err.strip() == "axiom-rl: error: give --task or --all, not both"


def test_eval_show_prints_the_attempts_that_match(tmp_path, capsys):
    """`eval show RUN`: each attempt's problem, status, tests, reward and the completion itself,
    filtered by status and task, at most --limit of them."""
    db = tmp_path / "r.db"
    countdown, lcs = (
        generate_problems("countdown", 1, 3, split="eval"),
        generate_problems("lcs", 1, 2, split="eval"),
    )
    with ResultsDB(db) as store:
        run = store.start_run("r", "tiny", {})
        store.add_batch(
            run,
            countdown,
            [
                Attempt(p.id, 0, f"guess {i}", 0.1, "wrong_answer", 0, 1, 3, 0.0, "evaluates to 7")
                for i, p in enumerate(countdown)
            ],
        )
        store.add_batch(
            run,
            lcs,
            [
                Attempt(
                    p.id,
                    0,
                    "def lcs(a, b):\n    return 0",
                    0.25,
                    "wrong_answer",
                    2,
                    8,
                    9,
                    0.0,
                    "test 1: expected 3, got 0",
                )
                for p in lcs
            ],
        )
    assert main(["eval", "show", "r", "--db", str(db), "--task", "lcs", "--limit", "1"]) == 0
    out, err = capsys.readouterr()
    assert (
        out.splitlines()[0]
        == f"── {lcs[0].id} · sample 0 · wrong_answer · 2/8 tests · task reward 0.25 · 9 tokens"
    )
    assert (
        "   test 1: expected 3, got 0" in out
        and "def lcs(a, b):\n    return 0" in out
        and lcs[1].id not in out
    )
    assert "1 shown of 2 matching attempts (5 in run 'r')" in err
    assert main(["eval", "show", "r", "--db", str(db), "--status", "wrong_answer", "--limit", "10"]) == 0
    out, err = capsys.readouterr()
    assert all(p.id in out for p in countdown + lcs) and "5 shown of 5 matching" in err
    assert main(["eval", "show", "r", "--db", str(db), "--status", "passed"]) == 0
    assert "0 shown of 0 matching" in capsys.readouterr().err
    assert main(["eval", "show", "r", "--db", str(db), "--status", "wrong"]) == 2
    assert "unknown status 'wrong'; choose from: passed, wrong_answer" in capsys.readouterr().err


HOSTILE = (
    "\x1b]0;owned\x07"  # set the window title
    "\x1b]52;c;ZWNobyBvd25lZA==\x07"  # write the clipboard (OSC 52)
    "wrong\r\x1b[2K\x1b[1A── passed"  # back over the line to fake a pass
    "\x9b31m\u202eevil"  # a one-byte CSI; a right-to-left override
)


def test_eval_prints_stored_text_with_its_escape_sequences_shown_not_acted_on(tmp_path, capsys):
    """A completion (or a run's name, a task, a verifier's detail) is stored text from elsewhere:
    printed, its control characters appear as escapes and reach the terminal as plain text."""
    db = tmp_path / "r.db"
    (lcs,) = generate_problems("lcs", 1, 1, split="eval")
    name = "run\x1b[31m"
    with ResultsDB(db) as store:
        run = store.start_run(name, "model\x1b]0;t\x07", {})
        attempt = Attempt(lcs.id, 0, HOSTILE, 0.0, "wrong_answer", 0, 8, 9, 0.0, "detail\x1b[8m")
        store.add_batch(run, [lcs], [attempt])
    assert main(["eval", "show", name, "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    written = out + err
    for active in ("\x1b", "\x07", "\r", "\x9b", "\u202e"):
        assert active not in written, repr(active)
    assert "\\x1b]52;c;ZWNobyBvd25lZA==\\x07" in out and "wrong\\x0d\\x1b[2K" in out and "\\u202eevil" in out
    assert "detail\\x1b[8m" in out and "run\\x1b[31m" in err
    for command in (["eval", "list"], ["eval", "compare", name, name]):
        for fmt in ([], ["--format", "markdown"], ["--format", "csv"]) if command[1] == "compare" else ([],):
            assert main([*command, "--db", str(db), *fmt]) == 0
            out, _ = capsys.readouterr()
            assert "\x1b" not in out and ("\\x1b" in out or fmt == ["--format", "csv"]), (command, fmt, out)


def test_a_run_name_with_a_newline_keeps_the_tables_whole_and_is_refused_for_new_runs(tmp_path, capsys):
    """A name with a line break in a database someone handed over broke `eval list`'s table and
    compare's header; `eval --run-name` accepted one."""
    db = tmp_path / "r.db"
    (lcs,) = generate_problems("lcs", 1, 1, split="eval")
    name = "two\nlines"
    with ResultsDB(db) as store:
        run = store.start_run(name, "model", {})
        store.add_batch(run, [lcs], [Attempt(lcs.id, 0, "x", 0.0, "wrong_answer", 0, 8, 9, 0.0, "")])
    assert main(["eval", "list", "--db", str(db)]) == 0
    out, _ = capsys.readouterr()
    assert "two\\x0alines" in out and len(out.strip().splitlines()) == 2, out  # the header and one row
    for fmt in ("table", "markdown"):
        assert main(["eval", "compare", name, name, "--db", str(db), "--format", fmt]) == 0
        out, _ = capsys.readouterr()
        assert not any(line.startswith("lines") for line in out.splitlines()), out
    assert (
        main(
            [
                "eval",
                "--model",
                "tiny",
                "--task",
                "countdown",
                "--count",
                "1",
                "--db",
                str(db),
                "--run-name",
                name,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--run-name 'two\\x0alines': a run's name is one line without control characters" in err, err


def test_eval_twice_then_compare_in_every_format(tmp_path, model_dir, capsys):
    db = tmp_path / "r.db"
    args = [
        "eval",
        "--model",
        str(model_dir),
        "--task",
        "countdown",
        "--difficulty",
        "1-2",
        "--count",
        "4",
        "--max-completion-length",
        "8",
        "--db",
        str(db),
    ]
    assert main([*args, "--run-name", "before"]) == 0
    assert main([*args, "--run-name", "after", "--temperature", "1.0", "--samples", "2"]) == 0
    capsys.readouterr()
    assert main(["eval", "compare", "before", "after", "--db", str(db), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    rows = json.loads(out)
    # greedy against 2 samples at T=1: said, on stderr (the JSON stays clean)
    assert (
        "warning: before and after were evaluated differently (temperature 0.0 vs 1.0; samples 1 vs 2)" in err
    )
    assert [(r["task"], r["difficulty"], r["trained_on"]) for r in rows] == [
        ("countdown", 1, "yes"),
        ("countdown", 2, "no"),
    ]
    assert all(r["change"] == pytest.approx(r["after"] - r["before"]) for r in rows)
    assert main(["eval", "compare", "before", "after", "--db", str(db), "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("task,difficulty,before,after,change")
    assert main(["eval", "compare", "before", "after", "--db", str(db), "--format", "markdown"]) == 0
    assert "| countdown | 1 | yes |" in capsys.readouterr().out
    assert main(["eval", "list", "--db", str(db)]) == 0
    assert "before" in capsys.readouterr().out
    assert main([*args, "--run-name", "again"]) == 0  # the same settings: no warning
    capsys.readouterr()
    assert main(["eval", "compare", "before", "again", "--db", str(db)]) == 0
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["eval", "compare", "before", "nope"], "no run named 'nope'"),
        (["eval", "--model", "./missing-model", "--task", "countdown"], "no such model directory"),
        (["eval", "--task", "countdown", "--temperature", "0", "--samples", "3"], "--samples 1"),
    ],
)
def test_eval_user_errors(tmp_path, model_dir, capsys, args, message):
    db = tmp_path / "r.db"
    assert (
        main(
            [
                "eval",
                "--model",
                str(model_dir),
                "--count",
                "2",
                "--max-completion-length",
                "4",
                "--db",
                str(db),
                "--run-name",
                "before",
            ]
        )
        == 0
    )
    capsys.readouterr()
    code = main([*args, "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("inner", ["final_model", "model"])
def test_a_directory_holding_a_model_one_level_down_is_named_in_the_error(tmp_path, model_dir, capsys, inner):
    outer = tmp_path / "run-or-checkpoint"  # a run holds final_model/, a checkpoint model/
    shutil.copytree(model_dir, outer / inner)
    (outer / "config.json").write_text('{"steps": 3}')  # a run's own config, not a model's
    code = main(["eval", "--model", str(outer), "--count", "2", "--db", str(tmp_path / "r.db")])
    err = capsys.readouterr().err
    assert code == 2 and f"pass {outer / inner}" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.db").exists()


def test_eval_refuses_a_foreign_database(tmp_path, model_dir, capsys):
    foreign = tmp_path / "f.db"
    foreign.write_text("not sqlite at all")
    assert main(["eval", "--model", str(model_dir), "--count", "2", "--db", str(foreign)]) == 2
    assert "not an axiom-rl results database" in capsys.readouterr().err
    assert foreign.read_text() == "not sqlite at all"


@needs_shared_data(HUMANEVAL)
def test_eval_on_an_imported_benchmark_file(tmp_path, capsys):
    """--problems-file: HumanEval as `problems import` writes it, its code run in the sandbox
    (the nano model writes no working function, so each attempt fails in the sandbox, not in
    the verifier), stored, and finished on a rerun. A bad line stops it before it starts."""
    imported = tmp_path / "he.jsonl"
    assert (
        run_cli(
            capsys, "problems", "import", "--format", "humaneval", str(HUMANEVAL), "--out", str(imported)
        )[0]
        == 0
    )
    subset = tmp_path / "he3.jsonl"
    subset.write_text("".join(imported.read_text().splitlines(keepends=True)[:3]))
    db = tmp_path / "r.db"
    cfg = EvalConfig(
        model="tiny", tiny_size="nano", problems_file=str(subset), max_completion_length=24, db=str(db)
    )
    name, summary = evaluate(cfg)
    assert name == "tiny-he3-greedy-s0"
    assert [(s["task"], s["difficulty"], s["problems"], s["attempts"]) for s in summary] == [
        ("humaneval", 0, 3, 3)
    ]
    with ResultsDB(db) as store:
        attempts = store.attempts(store.require_run(name))
    assert [a["problem_id"] for a in attempts] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert all(a["status"] != "internal_error" and a["total"] > 0 for a in attempts), attempts

    again_name, again = evaluate(cfg)  # nothing left to do: the same run, the same rows
    assert again_name == name and again == summary

    # The file changed under the same ids (a test edited): not mixed into this database's
    # attempts, under this run's name or another's; nothing is written.
    changed = tmp_path / "he3-changed.jsonl"
    rows = [json.loads(line) for line in subset.read_text().splitlines()]
    rows[1]["test_code"] += "\n    assert True\n"
    changed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = db.read_bytes()
    for run_name in (None, "another-name"):
        with pytest.raises(
            UserError, match=r"1 of these problems \('HumanEval/1' first\) differ from the problems"
        ):
            evaluate(dataclasses.replace(cfg, problems_file=str(changed), run_name=run_name))
    assert db.read_bytes() == before
    code, _, err = run_cli(
        capsys, "eval", "--model", "tiny", "--problems-file", str(changed), "--db", str(db)
    )
    assert code == 2 and err.count("\n") == 1 and "evaluate them into another --db" in err

    code, _, err = run_cli(
        capsys, "eval", "--model", "tiny", "--problems-file", str(tmp_path / "absent.jsonl")
    )
    assert code == 2 and err == f"axiom-rl: error: no such problems file: {tmp_path / 'absent.jsonl'}\n"
    subset.write_text(subset.read_text() + "{not json\n" + '{"id": "x", "task": "nope"}\n')
    code, _, err = run_cli(capsys, "eval", "--model", "tiny", "--problems-file", str(subset), "--db", str(db))
    assert code == 2 and err.startswith(f"axiom-rl: error: {subset}:4: ") and "(and 1 more bad lines)" in err
    code, _, err = run_cli(  # options that choose generated problems are refused, not ignored
        capsys,
        "eval",
        "--model",
        "tiny",
        "--problems-file",
        str(imported),
        "--count",
        "30",
        "--split",
        "train",
    )
    assert code == 2 and "--count and --split cannot be used with --problems-file" in err


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ---------------------------------------------------------------------------------- SFT


def test_sft_on_reference_solutions_learns_the_format(tmp_path):
    final = sft(
        SFTConfig(
            tiny_size="nano",
            steps=60,
            batch_size=16,
            lr=5e-3,
            warmup_steps=5,
            output_dir=str(tmp_path / "sft"),
        )
    )
    rows = [json.loads(line) for line in (tmp_path / "sft/metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 60 and rows[-1]["loss"] < rows[0]["loss"] / 2
    card = json.loads((final / "axiom_rl.json").read_text())
    assert card["prompt_style"] == "compact"
    assert (card["tasks"], card["difficulties"]) == (["countdown"], [1])  # what `eval compare` marks
    _, summary = evaluate(
        EvalConfig(model=str(final), count=20, max_completion_length=24, db=str(tmp_path / "r.db"))
    )
    assert summary[0]["statuses"].get("format_error", 0) < 20  # it writes answers in tags now


def test_the_sft_command_plots_its_loss(tmp_path, capsys):
    run = tmp_path / "sft"
    assert main(["sft", "--tiny-size", "nano", "--steps", "3", "--output-dir", str(run)]) == 0
    assert (run / "training.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert f"done: {run / 'final_model'}" in capsys.readouterr().err


def test_sft_from_the_samples_of_an_evaluation(tmp_path):
    db = tmp_path / "r.db"
    problems = generate_problems("countdown", 1, 5, split="eval")
    task = get_task("countdown")
    with ResultsDB(db) as store:
        run = store.start_run("good", "tiny", {})
        store.add_batch(
            run,
            problems,
            [
                Attempt(p.id, 0, task.reference_completion(p, "compact"), 1.0, "passed", 1, 1, 9, 0.0)
                for p in problems[:3]
            ],
        )
        empty = store.start_run("bad", "tiny", {"n": 1})
        store.add_batch(
            empty, problems, [Attempt(p.id, 0, "nope", 0.0, "format_error", 0, 1, 2, 0.0) for p in problems]
        )
    options: dict = dict(tiny_size="nano", steps=5, batch_size=4, from_samples="good", db=str(db))
    final = sft(SFTConfig(**options, output_dir=str(tmp_path / "a")))
    assert (final / "model.safetensors").exists()
    card = json.loads((final / "axiom_rl.json").read_text())
    assert (card["tasks"], card["difficulties"]) == (["countdown"], [1])  # the samples say what is learnt
    # A --task beside --from-samples would be silently unused: refused before anything is written.
    with pytest.raises(UserError, match="--task cannot be used with --from-samples"):
        sft(SFTConfig(**options, tasks=["edit_distance"], output_dir=str(tmp_path / "c")))
    assert not (tmp_path / "c").exists()
    with pytest.raises(UserError, match="no correct completions"):
        sft(
            SFTConfig(
                tiny_size="nano", steps=5, from_samples="bad", db=str(db), output_dir=str(tmp_path / "b")
            )
        )
    assert not (tmp_path / "b").exists()  # refused before anything was written


@pytest.mark.parametrize("source", ["references", "samples", "problems-file", "references-bf16"])
def test_sft_resumed_from_a_checkpoint_ends_as_an_uninterrupted_run(tmp_path, source):
    """The same metrics and the same final weights, byte for byte: the model, AdamW, the schedule
    and the position in the example stream (all three kinds: generated references; samples of an
    evaluation shuffled anew each epoch, here 2 epochs of 3 samples by step 2; a problems file,
    reshuffled each pass) all come back. bf16: the float32 master weights and the learning rate
    the schedule set for the step after the checkpoint come back too."""
    # Byte for byte is a CPU promise: CUDA kernels are not bitwise reproducible run to run (on an
    # H100 one of these cases came back 2e-5 off in a loss), so this runs on the CPU everywhere.
    options: dict = dict(
        tiny_size="nano", steps=6, batch_size=4, lr=5e-3, warmup_steps=2, save_every=2, device="cpu"
    )
    if source == "references-bf16":
        options.update(dtype="bf16")
    if source == "problems-file":
        problems_file = tmp_path / "p.jsonl"
        problems = generate_problems("lcs", 2, 3)
        problems_file.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in problems))
        options.update(problems_file=str(problems_file))
    if source == "samples":
        db = tmp_path / "r.db"
        problems = generate_problems("countdown", 1, 3, split="eval")
        with ResultsDB(db) as store:
            good = [
                Attempt(
                    p.id,
                    0,
                    get_task("countdown").reference_completion(p, "compact"),
                    1.0,
                    "passed",
                    1,
                    1,
                    9,
                    0.0,
                )
                for p in problems
            ]
            store.add_batch(store.start_run("good", "tiny", {}), problems, good)
        options.update(from_samples="good", db=str(db))
    straight = sft(SFTConfig(**options, output_dir=str(tmp_path / "a")))

    def ctrl_c_at_step_3(step: int, total: int, row: dict) -> None:
        if step == 3:
            os.kill(os.getpid(), signal.SIGINT)  # as a user would: the step finishes, then a checkpoint

    with pytest.raises(SFTStopped):
        sft(
            SFTConfig(**options, output_dir=str(tmp_path / "b")),
            progress=ctrl_c_at_step_3,
            say=lambda m: None,
        )
    assert sorted(p.name for p in (tmp_path / "b/checkpoints").iterdir()) == ["step-2", "step-3"]
    resumed = sft(SFTConfig(**options, output_dir=str(tmp_path / "b"), resume=True))
    assert json.loads((tmp_path / "b/config.json").read_text())["resume"]  # the options it went on under

    def rows(run: str) -> list[dict]:
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if k != "elapsed_s"} for line in lines]

    assert [r["step"] for r in rows("b")] == [1, 2, 3, 4, 5, 6] and rows("b") == rows("a")
    assert (resumed / "model.safetensors").read_bytes() == (straight / "model.safetensors").read_bytes()


def test_sft_on_a_problems_file_learns_every_reference_solution_once_a_pass(tmp_path):
    """`sft --problems-file`: the targets are the file's own reference solutions, each problem
    once per pass in a seeded order; the model card names the file's tasks. A file with a problem
    lacking its reference solution is refused before anything is written."""
    from axiom_rl.models.load import load_policy
    from axiom_rl.train.sft import SFTExamples

    problems = generate_problems("lcs", 2, 4) + generate_problems("fizzbuzz", 1, 3)
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in problems))
    cfg = SFTConfig(tiny_size="nano", steps=3, batch_size=4, problems_file=str(path))
    tokenizer = load_policy("tiny", tiny_size="nano", need_reference=False).tokenizer
    examples = SFTExamples(cfg, tokenizer, "full", problems=problems)
    want = {
        (format_prompt(p, tokenizer, "full", "auto"), f"```python\n{p.reference_solution.rstrip()}\n```")
        for p in problems
    }
    first, second = examples.take(len(problems)), examples.take(len(problems))
    assert set(first) == want and set(second) == want and len(first) == len(second) == len(want)
    assert first != second  # the seeded order is reshuffled for the second pass
    final = sft(dataclasses.replace(cfg, output_dir=str(tmp_path / "a")), say=lambda m: None)
    card = json.loads((final / "axiom_rl.json").read_text())
    assert (card["tasks"], card["difficulties"]) == (["fizzbuzz", "lcs"], [1, 2])
    assert "reference solutions of" in (tmp_path / "a/train.log").read_text()

    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[5]["reference_solution"] = None
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError, match=f"1 of 7 problems have no reference solution.*{problems[5].id}"):
        sft(dataclasses.replace(cfg, output_dir=str(tmp_path / "b")))
    assert not (tmp_path / "b").exists()


def test_sft_ctrl_c_writes_a_checkpoint_and_resumes(tmp_path, capsys):
    run = tmp_path / "sft"
    proc = run_in_background(
        ["sft", "--tiny-size", "nano", "--steps", "5000", "--batch-size", "2", "--save-every", "0"], run
    )
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and f"resume with: axiom-rl sft --resume --output-dir {run}" in stderr
    steps = len((run / "metrics.jsonl").read_text().splitlines())
    assert (run / f"checkpoints/step-{steps}").exists() and not (run / "final_model").exists()
    assert f"stopped by request (Ctrl-C) at step {steps}" in (run / "train.log").read_text()
    # A fresh run there is refused; a resume with more steps finishes it.
    assert main(["sft", "--tiny-size", "nano", "--output-dir", str(run)]) == 2
    assert "already holds a run; use --resume" in capsys.readouterr().err
    assert main(["sft", "--resume", "--output-dir", str(run), "--steps", str(steps + 1)]) == 0
    assert len((run / "metrics.jsonl").read_text().splitlines()) == steps + 1
    assert json.loads((run / "final_model/axiom_rl.json").read_text())["sft_steps"] == steps + 1


# ---------------------------------------------------------------------------------- quickstart


def test_an_sft_base_the_time_budget_cut_short_is_used_but_not_cached(tmp_path):
    """A slow or busy machine stops the quickstart's SFT at its time budget: that base serves the run
    from the run's own directory, and the cache is left empty, so the next run trains it again and
    does not start from the weaker model forever. A short base an earlier version cached is
    dropped, and a complete one is reused."""
    import contextlib

    from axiom_rl.quickstart import QuickstartConfig, cached_sft_base

    @contextlib.contextmanager
    def phase(name):
        yield lambda done, total, row: None

    cache = tmp_path / "cache"
    # 0.3 x 1 s for SFT: far fewer than a million steps
    short_cfg = QuickstartConfig(tiny_size="nano", sft_steps=10**6, max_seconds=1.0, cache_dir=str(cache))
    short = cached_sft_base(short_cfg, phase, tmp_path / "run1" / "sft")
    assert 0 < short.steps < 10**6 and not short.cached and short.seconds > 0
    assert (
        short.path == tmp_path / "run1" / "sft" / "final_model"
        and (short.path / "model.safetensors").exists()
    )
    assert not list(cache.glob("sft-*")) and not list(cache.glob(".sft-*"))
    again = cached_sft_base(short_cfg, phase, tmp_path / "run2" / "sft")
    assert not again.cached and again.path.parent == tmp_path / "run2" / "sft"

    full_cfg = QuickstartConfig(tiny_size="nano", sft_steps=3, max_seconds=600.0, cache_dir=str(cache))
    first = cached_sft_base(full_cfg, phase, tmp_path / "run3" / "sft")
    assert (first.steps, first.cached) == (3, False) and first.path.parent.parent == cache
    assert not (tmp_path / "run3").exists()
    second = cached_sft_base(full_cfg, phase, tmp_path / "run4" / "sft")
    assert (second.path, second.steps, second.cached, second.seconds) == (first.path, 3, True, 0.0)
    # an entry left short by an earlier version (its card says fewer steps) is trained again
    card = first.path / "axiom_rl.json"
    card.write_text(json.dumps(dict(json.loads(card.read_text()), sft_steps=2)))
    third = cached_sft_base(full_cfg, phase, tmp_path / "run5" / "sft")
    assert (third.steps, third.cached) == (3, False) and third.path == first.path
    assert json.loads(card.read_text())["sft_steps"] == 3


@pytest.mark.slow
def _killed_quickstart(cwd: Path) -> tuple[Path, Path]:
    """A real `axiom-rl quickstart` SIGKILLed while it trains its base: the half-trained base
    in the cache and the unfinished run directory it leaves."""
    killed = subprocess.Popen([sys.executable, "-m", "axiom_rl", "quickstart", "--output-dir", "runs",
                               "--sft-steps", "100000"], cwd=cwd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and killed.poll() is None:
        rows = [len(m.read_text().splitlines()) for m in (cwd / ".axiom-cache").glob(".sft-*/metrics.jsonl")]
        if rows and rows[0] >= 2:
            break
        time.sleep(0.1)
    killed.kill()
    killed.wait()
    (work,) = [p for p in (cwd / ".axiom-cache").glob(".sft-*") if p.is_dir()]
    (run,) = (cwd / "runs").glob("quickstart-*")
    return work, run


def test_quickstart_pipeline_end_to_end(tmp_path):
    """The whole quickstart, twice (the second from the cached base), after one that was killed:
    what that one left (a .sft-* work directory in the cache, an unfinished run directory: nothing
    removed them) goes, and another quickstart's work in progress stays."""
    from rich.console import Console

    from axiom_rl.cli import phase_bar
    from axiom_rl.io import hold_run_dir, holding
    from axiom_rl.quickstart import QuickstartConfig, run_quickstart

    cache, runs = tmp_path / ".axiom-cache", tmp_path / "runs"
    left_work, left_run = _killed_quickstart(tmp_path)
    busy_run, busy_work = runs / "quickstart-20000101-000000-s9", cache / ".sft-busy"
    busy_run.mkdir(), busy_work.mkdir()
    (busy_run / "quickstart.json").write_text("{}")
    cfg = QuickstartConfig(
        sft_steps=30,
        grpo_steps=3,
        eval_count=8,
        eval_samples=2,
        control=True,
        output_dir=str(runs),
        cache_dir=str(cache),
    )
    console = Console(file=open(tmp_path / "out.txt", "w"), width=100)  # noqa: SIM115
    with hold_run_dir(busy_run), holding(cache / ".sft-busy.lock"):  # held as a live quickstart holds them
        run = run_quickstart(cfg, console, phase_bar)
    said = " ".join((tmp_path / "out.txt").read_text().split())  # as rich wrapped it, unwrapped
    assert f"removed {left_run}: a quickstart that was stopped before it finished" in said
    assert not left_work.exists() and not left_work.with_name(left_work.name + ".lock").exists()
    assert not left_run.exists() and busy_run.exists() and busy_work.exists()
    assert sorted(p.name for p in cache.glob(".sft-*")) == [".sft-busy", ".sft-busy.lock"]
    for name in (
        "report.md",
        "training.png",
        "accuracy.png",
        "results.db",
        "summary.json",
        "grpo/final_model",
        "more-sft/final_model",
    ):
        assert (run / name).exists(), name
    summary = json.loads((run / "summary.json").read_text())
    assert {r["difficulty"] for r in summary["after"]["greedy"]} == {
        1,
        3,
    }  # the trained and an untrained difficulty
    report = (run / "report.md").read_text()
    assert "| 1 | yes |" in report
    assert "the control (the same wall time spent on more SFT) on sampled accuracy" in report
    assert len(list(cache.glob("sft-*/final_model"))) == 1
    second = run_quickstart(cfg, console, phase_bar)  # starts at GRPO: the SFT'd base is cached
    assert "(cached)" in (tmp_path / "out.txt").read_text() and second != run


def test_the_sft_cache_key_follows_the_code(tmp_path):
    """A base SFT'd by other code is not reused: the key's fingerprint changes with any source file
    of the package (kernels included), and with nothing else in it."""
    from axiom_rl.quickstart import code_fingerprint

    (tmp_path / "models").mkdir()
    for name, text in (("train.py", "x = 1\n"), ("models/kernel.cpp", "int f();\n"), ("notes.txt", "a")):
        (tmp_path / name).write_text(text)
    first = code_fingerprint(tmp_path)
    assert code_fingerprint(tmp_path) == first and len(first) == 12
    (tmp_path / "notes.txt").write_text("b")  # not source: the same key
    assert code_fingerprint(tmp_path) == first
    (tmp_path / "models" / "kernel.cpp").write_text("int f(); // summed in another order\n")
    assert code_fingerprint(tmp_path) != first
    assert code_fingerprint() != code_fingerprint(tmp_path)  # the installed package's own


def _summary(greedy: float, sampled: float, difficulty: int = 1) -> dict:
    return {
        "greedy": [{"difficulty": difficulty, "success_rate": greedy}],
        "sampled": [{"difficulty": difficulty, "success_rate": sampled}],
    }


def test_goal_verdicts_say_plainly_what_was_and_was_not_met():
    from axiom_rl.report import goal_verdicts

    # sampled 0.20 -> 0.31: +11 pts and 1.55x (met); greedy 0.30 -> 0.34: +4 pts (< 5: not met);
    # the control at 0.35 sampled is above GRPO's 0.31, so GRPO does not beat it.
    lines = goal_verdicts(_summary(0.30, 0.20), _summary(0.34, 0.31), _summary(0.40, 0.35), 1)
    assert len(lines) == 3
    assert "+11.0 pts, 1.55x" in lines[0] and "is met" in lines[0]
    assert "+4.0 pts" in lines[1] and "NOT met" in lines[1]
    assert "does NOT beat" in lines[2] and "-4.0 pts" in lines[2]
    # +12 pts but only 1.2x (0.60 -> 0.72): the ratio half of the sampled goal fails it
    lines = goal_verdicts(_summary(0.5, 0.60), _summary(0.6, 0.72), _summary(0.5, 0.65), 1)
    assert "NOT met" in lines[0] and "is met" in lines[1] and "beats" in lines[2]
    # without a control there is no third sentence; an unevaluated difficulty gives none at all
    assert len(goal_verdicts(_summary(0.3, 0.2), _summary(0.4, 0.3), None, 1)) == 2
    assert goal_verdicts(_summary(0.3, 0.2), _summary(0.4, 0.3), None, 5) == []
    # from 0% there is no ratio to print (it read "infx"); a gain of 10 points still meets the goal
    lines = goal_verdicts(_summary(0.0, 0.0), _summary(0.0, 0.0), None, 1)
    assert "(+0.0 pts, no ratio from 0%)" in lines[0] and "NOT met" in lines[0]
    assert "is met" in goal_verdicts(_summary(0.0, 0.0), _summary(0.2, 0.15), None, 1)[0]


def test_quickstart_command_rejects_bad_counts(capsys):
    assert main(["quickstart", "--eval-count", "0"]) == 2
    assert "--eval-count must be >= 1" in capsys.readouterr().err


def test_problems_check_command(capsys):
    assert main(["problems", "check", "--count", "1"]) == 0
    assert "reference solutions verified" in capsys.readouterr().out


def test_make_quickstart_target_calls_the_cli():
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    assert "$(BIN)/axiom-rl quickstart" in makefile
    assert (
        subprocess.run(
            [sys.executable, "-m", "axiom_rl", "quickstart", "--help"], capture_output=True
        ).returncode
        == 0
    )


def test_accuracy_cells_feed_both_result_tables():
    from axiom_rl.report import accuracy_cells

    before, after = _summary(0.30, 0.20), _summary(0.34, 0.31)
    assert accuracy_cells(before, after, _summary(0.40, 0.35), "sampled", 1) == (
        ["20.0%", "31.0%", "+11.0 pts"],
        "35.0%",
    )
    assert accuracy_cells(before, after, None, "greedy", 1) == (["30.0%", "34.0%", "+4.0 pts"], "")
    # a difficulty that was not evaluated shows dashes, on both sides and for the control
    assert accuracy_cells(before, after, _summary(0.4, 0.3), "greedy", 3) == (["-"] * 3, "-")


def test_eval_reads_a_yaml_config_and_the_command_line_wins(tmp_path, capsys):
    config = tmp_path / "eval.yaml"
    config.write_text(
        "model: tiny\ntiny_size: nano\ncount: 2\nmax_completion_length: 4\nrun_name: from-yaml\n"
    )
    db = tmp_path / "r.db"
    assert main(["eval", "--config", str(config), "--count", "3", "--db", str(db)]) == 0
    capsys.readouterr()
    with ResultsDB(db) as store:
        attempts = store.attempts(store.require_run("from-yaml"))
    assert len(attempts) == 3 and all(a["tokens"] <= 4 for a in attempts)
    config.write_text("cuont: 2\n")
    assert main(["eval", "--config", str(config), "--db", str(db)]) == 2
    assert "unknown option 'cuont'; did you mean 'count'?" in capsys.readouterr().err
    config.write_text("zzzz: 2\n")  # nothing close: every option is listed
    assert main(["eval", "--config", str(config), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "unknown option 'zzzz'; options are:" in err and "max_completion_length" in err
