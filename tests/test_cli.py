"""The command line: outputs, determinism, and one-line errors with exit code 2."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest
from conftest import HUMANEVAL, MBPP, needs_shared_data

from axiom_rl.cli import main


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_problems_list_shows_every_task(capsys):
    code, out, _ = run(capsys, "problems", "list")
    assert code == 0
    for name in ("countdown", "edit_distance", "n_queens", "topological_sort", "humaneval"):
        assert name in out
    assert "28 generated tasks" in out


def test_problems_show(capsys):
    code, out, _ = run(capsys, "problems", "show", "coin_change", "--difficulty", "4", "--seed", "2")
    assert code == 0 and "def coin_change" in out and "hidden tests" in out
    code, out, _ = run(capsys, "problems", "show", "countdown", "--json")
    assert json.loads(out)["task"] == "countdown"


def test_export_is_byte_identical_and_splits_are_disjoint(capsys, tmp_path):
    a, b, e = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "e.jsonl"
    args = ["problems", "export", "--all", "--difficulty-range", "1-10", "--count", "2", "--seed", "0"]
    assert run(capsys, *args, "--out", str(a))[0] == 0
    # Again, with --difficulty taking the range as train, sft and eval do (--difficulty-range is
    # its older name): the same bytes.
    again = [w if w != "--difficulty-range" else "--difficulty" for w in args]
    assert run(capsys, *again, "--out", str(b))[0] == 0
    assert a.read_bytes() == b.read_bytes()
    assert len(a.read_text().splitlines()) == 28 * 10 * 2
    assert run(capsys, *args, "--split", "eval", "--out", str(e))[0] == 0
    train = {json.dumps([p["prompt"], p["tests"]]) for p in map(json.loads, a.read_text().splitlines())}
    evals = {json.dumps([p["prompt"], p["tests"]]) for p in map(json.loads, e.read_text().splitlines())}
    assert len(evals) == 28 * 10 * 2 and not train & evals


@pytest.mark.parametrize(
    "args, message",
    [
        (["problems", "show", "nope"], "unknown task 'nope'; choose from: "),
        (["problems", "show", "lcs", "--difficulty", "11"], "out of range"),
        (["problems", "show", "lcs", "--seed", "-1"], "-1 is not in the range x>=0"),  # it names problems
        (["eval", "--model", "tiny", "--seed", "-1"], "seed must be >= 0, got -1"),
        (["problems", "export", "--task", "lcs", "--count", "0", "--out", "x.jsonl"], "--count must be >= 1"),
        (["problems", "export", "--task", "lcs", "--difficulty-range", "5-2", "--out", "x.jsonl"], "empty"),
        (
            ["problems", "export", "--task", "lcs", "--difficulty-range", "a-b", "--out", "x.jsonl"],
            "--difficulty-range must be D or A-B (such as 1-10)",
        ),
        (["problems", "export", "--out", "x.jsonl"], "exactly one of --task"),
        (
            ["problems", "export", "--task", "lcs", "--difficulty", "x", "--out", "x.jsonl"],
            "--difficulty must be D or A-B",
        ),
        (
            ["problems", "export", "--task", "lcs", "--difficulty", "0", "--out", "x.jsonl"],
            "difficulty 0 is out of range",
        ),
        (  # a small problem space (n from 1 to 4): a one-line error after its progress bar, no file
            [
                "problems",
                "export",
                "--task",
                "n_queens",
                "--difficulty",
                "1",
                "--split",
                "eval",
                "--count",
                "400",
                "--out",
                "x.jsonl",
            ],
            "ran out of distinct eval problems after 325",
        ),
        (["problems", "show", "lcs", "--difficulty", "x"], "not a valid integer"),
        (["nope"], "No such command"),
        (["verify", "missing.jsonl", "also-missing.jsonl"], "no such file"),
    ],
)
def test_user_errors_are_one_line_with_exit_code_2(capsys, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, *args)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.jsonl").exists()


def test_outputs_that_cannot_be_written_are_one_line_errors(capsys, tmp_path, monkeypatch):
    """An --out / --output-dir / --db under a file (or in /proc) is the user's to fix: exit 2 and
    one line, and verify says so before it verifies anything."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("not a directory")
    assert run(capsys, "problems", "export", "--task", "lcs", "--count", "1", "--out", "p.jsonl")[0] == 0
    problem_id = json.loads((tmp_path / "p.jsonl").read_text())["id"]
    (tmp_path / "c.jsonl").write_text(
        json.dumps({"problem_id": problem_id, "completion": "def lcs(a, b): return 0"})
    )
    under_a_file = "cannot create directory afile"
    cases = [
        (["problems", "export", "--task", "lcs", "--out", "afile/x.jsonl"], under_a_file),
        (["verify", "p.jsonl", "c.jsonl", "--out", "afile/r.jsonl"], under_a_file),
        (["train", "--model", "tiny", "--task", "countdown", "--steps", "1", "--output-dir", "afile/run"], under_a_file),
        (["eval", "--model", "tiny", "--task", "lcs", "--count", "1", "--difficulty", "1", "--db", "afile/e.sqlite"],
         under_a_file),
        (["eval", "--model", "tiny", "--task", "lcs", "--count", "1", "--difficulty", "1", "--db", "/proc/axiom.sqlite"],
         "cannot write /proc/axiom.sqlite"),
    ]  # fmt: skip
    for args, message in cases:
        code, out, err = run(capsys, *args)
        assert code == 2, args
        assert err.strip().splitlines()[-1].startswith(f"axiom-rl: error: {message}"), err
        assert "Traceback" not in err
        assert "verification summary" not in out
    assert (tmp_path / "afile").read_text() == "not a directory"


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf"])
def test_verify_refuses_a_timeout_that_is_not_a_positive_number(capsys, tmp_path, timeout):
    """NaN passed the old `timeout <= 0` check, and every submission then failed."""
    problems, completions = tmp_path / "p.jsonl", tmp_path / "c.jsonl"
    assert run(capsys, "problems", "export", "--task", "lcs", "--count", "1", "--out", str(problems))[0] == 0
    completions.write_text(
        json.dumps({"problem_id": json.loads(problems.read_text())["id"], "completion": "x"})
    )
    code, out, err = run(capsys, "verify", str(problems), str(completions), "--timeout", timeout)
    assert code == 2 and err.startswith("axiom-rl: error: --timeout must be > 0") and not out


def test_verify_reports_bad_lines_and_verifies_the_rest(capsys, tmp_path):
    problems = tmp_path / "p.jsonl"
    assert (
        run(capsys, "problems", "export", "--task", "house_robber", "--count", "2", "--out", str(problems))[0]
        == 0
    )
    rows = [json.loads(line) for line in problems.read_text().splitlines()]
    good = "```python\ndef house_robber(nums):\n    a = b = 0\n    for x in nums:\n        a, b = b, max(b, a + x)\n    return b\n```"
    completions = tmp_path / "c.jsonl"
    completions.write_text(
        "\n".join(
            [
                json.dumps({"problem_id": rows[0]["id"], "completion": good}),
                "{not json",
                json.dumps({"problem_id": "missing-id", "completion": good}),
                json.dumps({"problem_id": rows[1]["id"], "completion": ""}),
                json.dumps({"problem_id": rows[1]["id"], "completion": ["def house_robber(nums): ..."]}),
                json.dumps(
                    {
                        "problem_id": rows[1]["id"],
                        "completion": "```python\ndef house_robber(nums):\n    return 0\n```",
                    }
                ),
            ]
        )
        + "\n"
    )
    out_path = tmp_path / "r.jsonl"
    code, _, err = run(
        capsys, "verify", str(problems), str(completions), "--out", str(out_path), "--workers", "2"
    )
    assert code == 2
    assert "c.jsonl:2: not valid JSON" in err
    assert "c.jsonl:3: unknown problem id 'missing-id'" in err
    assert "c.jsonl:4: empty completion" in err
    assert "c.jsonl:5: completion must be a string, got list" in err
    results = [json.loads(line) for line in out_path.read_text().splitlines()]
    assert [r["status"] for r in results] == ["passed", "wrong_answer"]
    assert results[0]["reward"] == 1.0 and 0 <= results[1]["reward"] < 1.0
    assert set(results[0]) >= {"problem_id", "reward", "status", "passed", "total", "time_s", "detail"}


def test_verify_with_its_files_swapped_or_wrong_is_one_line(capsys, tmp_path):
    """The two files the wrong way round printed an error per line and an empty table."""
    problems, completions = tmp_path / "p.jsonl", tmp_path / "c.jsonl"
    assert run(capsys, "problems", "export", "--task", "lcs", "--count", "20", "--out", str(problems))[0] == 0
    ids = [json.loads(line)["id"] for line in problems.read_text().splitlines()]
    completions.write_text("".join(json.dumps({"problem_id": i, "completion": "x"}) + "\n" for i in ids))
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"name": i}) + "\n" for i in ids))
    for args, message in (
        ((completions, problems), f"{completions} holds completions: are the files the wrong way round?"),
        ((problems, problems), f"{problems} holds problems: are the files the wrong way round?"),
        ((other, completions), f"no problem in {other}: {other}:1: not a problem"),
    ):
        code, out, err = run(capsys, "verify", *map(str, args))
        assert code == 2 and message in err, err
        assert len(err.strip().splitlines()) == 1 and out == ""
    assert "(and 19 more lines like it)" in err


def test_verify_starts_no_more_sandbox_slots_than_completions(capsys, tmp_path):
    """Each slot is a monitor process: --workers 64 for two completions starts two; a file whose
    every line is bad starts none."""
    from axiom_rl.verify_files import verify_files

    problems = tmp_path / "p.jsonl"
    assert (
        run(capsys, "problems", "export", "--task", "fizzbuzz", "--count", "2", "--out", str(problems))[0]
        == 0
    )
    ids = [json.loads(line)["id"] for line in problems.read_text().splitlines()]
    completions = tmp_path / "c.jsonl"
    completions.write_text(
        "".join(json.dumps({"problem_id": i, "completion": "def f(): pass"}) + "\n" for i in ids)
    )
    report = verify_files(problems, completions, workers=64)
    assert report.workers == 2 and len(report.results) == 2 and report.isolation
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem_id": "missing-id", "completion": "x"}) + "\n")
    report = verify_files(problems, bad, workers=64)
    assert report.workers == 0 and not report.results and report.errors
    code, _, err = run(capsys, "verify", str(problems), str(bad))
    assert code == 2 and "unknown problem id 'missing-id'" in err and "sandbox: not started" in err


@needs_shared_data(HUMANEVAL)
def test_import_then_verify_humaneval(capsys, tmp_path):
    problems = tmp_path / "he.jsonl"
    assert (
        run(capsys, "problems", "import", "--format", "humaneval", str(HUMANEVAL), "--out", str(problems))[0]
        == 0
    )
    rows = [json.loads(line) for line in problems.read_text().splitlines()]
    completions = tmp_path / "c.jsonl"
    completions.write_text(
        "".join(
            json.dumps({"problem_id": r["id"], "completion": r["reference_solution"]}) + "\n" for r in rows
        )
    )
    code, _, err = run(capsys, "verify", str(problems), str(completions), "--out", str(tmp_path / "r.jsonl"))
    results = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    failed = [(r["problem_id"], r["status"], r["detail"]) for r in results if r["status"] != "passed"]
    assert code == 0 and not failed, failed  # which, and why, if a canonical solution ever fails
    assert "164 verified, mean reward 1.000" in err


@needs_shared_data(HUMANEVAL)
@needs_shared_data(MBPP)
def test_verify_reads_the_samples_format_of_the_humaneval_and_mbpp_harnesses(capsys, tmp_path):
    """Their sample files key completions by "task_id" (HumanEval's a string, MBPP's a number),
    and HumanEval's completions continue the prompt (a function body): both verify as they are."""
    for fmt, source, body, how_many in (
        ("humaneval", HUMANEVAL, "canonical_solution", 164),
        ("mbpp", MBPP, "code", 40),
    ):
        problems = tmp_path / f"{fmt}.jsonl"
        assert run(capsys, "problems", "import", "--format", fmt, str(source), "--out", str(problems))[0] == 0
        rows = [json.loads(line) for line in source.read_text().splitlines()][:how_many]
        samples = tmp_path / f"{fmt}-samples.jsonl"
        samples.write_text(
            "".join(json.dumps({"task_id": r["task_id"], "completion": r[body]}) + "\n" for r in rows)
        )
        code, out, err = run(capsys, "verify", str(problems), str(samples))
        results = [json.loads(line) for line in out.splitlines()]
        assert code == 0 and f"{how_many} verified, mean reward 1.000" in err, err
        expected_ids = [r["task_id"] if fmt == "humaneval" else f"MBPP/{r['task_id']}" for r in rows]
        assert [r["problem_id"] for r in results] == expected_ids


@needs_shared_data(HUMANEVAL)
def test_humaneval_as_shipped_gzipped_imports_the_same(capsys, tmp_path):
    """openai/human-eval ships data/HumanEval.jsonl.gz: it imports as the plain file does, and a
    damaged one is a one-line error."""
    packed = tmp_path / "HumanEval.jsonl.gz"
    packed.write_bytes(gzip.compress(HUMANEVAL.read_bytes()))
    plain, unpacked = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for source, out in ((HUMANEVAL, plain), (packed, unpacked)):
        assert (
            run(capsys, "problems", "import", "--format", "humaneval", str(source), "--out", str(out))[0] == 0
        )
    assert unpacked.read_bytes() == plain.read_bytes() and len(plain.read_text().splitlines()) == 164
    packed.write_bytes(packed.read_bytes()[:200])
    code, _, err = run(
        capsys, "problems", "import", "--format", "humaneval", str(packed), "--out", str(plain)
    )
    assert code == 2 and err.strip() == f"axiom-rl: error: not a readable gzip file: {packed}"


def test_import_rejects_a_file_of_the_wrong_format(capsys, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": 1}\n')
    code, _, err = run(
        capsys, "problems", "import", "--format", "mbpp", str(bad), "--out", str(tmp_path / "o.jsonl")
    )
    assert code == 2 and "bad.jsonl:1: not a MBPP record" in err


def test_tables_keep_their_width_when_the_output_is_not_a_terminal():
    """Piped or logged, rich assumed 80 columns and cut or wrapped every wide table."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [sys.executable, "-m", "axiom_rl", "problems", "list"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0
    line = next(line for line in proc.stdout.splitlines() if line.startswith("humaneval"))
    assert line.endswith("import with `axiom-rl problems import --format humaneval`.")


def test_commands_that_train_nothing_load_no_torch(tmp_path):
    """The command line's options are built without importing the registries behind them (torch,
    transformers: seconds), so `problems` and `verify` start in well under a second."""
    out, refs = tmp_path / "p.jsonl", tmp_path / "r.jsonl"
    code = (
        "import sys, axiom_rl.cli as c; c.main(['problems', 'list']); "
        f"c.main(['problems', 'export', '--task', 'countdown', '--out', '{out}', '--references', '{refs}']); "
        f"c.main(['verify', '{out}', '{refs}', '--out', '{tmp_path / 'v.jsonl'}']); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_console_script_entry_point_runs():
    proc = subprocess.run(
        [sys.executable, "-m", "axiom_rl", "problems", "show", "nope"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["train", "sft", "eval"])
def test_every_option_has_help_text(capsys, command):
    """Options come from the config dataclasses, help text from each field's docstring, including
    fields a config inherits (the model options train and sft share)."""
    from axiom_rl.config import EvalConfig, SFTConfig, TrainConfig, cli_fields

    cls = {"train": TrainConfig, "sft": SFTConfig, "eval": EvalConfig}[command]
    undocumented = [name for name, _, doc in cli_fields(cls) if not doc]
    assert undocumented == []
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    assert ("LoRA rank." in out) == (command != "eval")


def test_help_shows_each_default_and_the_names_an_option_takes(capsys, monkeypatch):
    """Defaults differ by command (train's lr 1e-5 constant, sft's 1e-3 cosine) and live in the
    config classes; the names come from the registries when help is shown, so an estimator a user
    registers is listed beside the built-in ones."""
    from axiom_rl.algorithms import ADVANTAGES

    monkeypatch.setitem(ADVANTAGES, "my_estimator", ADVANTAGES["grpo"])
    help_of = {}
    for command in ("train", "sft", "eval"):
        code, out, _ = run(capsys, command, "--help")
        assert code == 0
        help_of[command] = " ".join(out.split())  # unwrapped
    train, sft, evaluate = help_of["train"], help_of["sft"], help_of["eval"]
    assert "--lr FLOAT Peak learning rate (AdamW). [default: 1e-05]" in train
    assert "--lr FLOAT Peak learning rate (AdamW). [default: 0.001]" in sft
    assert "One of: constant, linear, cosine. [default: constant]" in train
    assert "One of: constant, linear, cosine. [default: cosine]" in sft
    assert (
        "--advantage NAME" in train
        and "One of: grpo, dr_grpo, rloo, batch_norm, dgro, krpo, my_estimator." in train
    )
    assert "One of: grpo, dr_grpo, dapo, bnpo, hybrid, gspo, dgro. [default: grpo]" in train  # --loss-type
    assert "One of: uniform, file, learnability, schedule, adaptive, failures." in train  # --source
    assert (
        "One of: auto, code_execution, binary, countdown, countdown_graduated, or_debug, format, length_penalty,"
        " oracle_steps, prm, learnability." in train
    )
    assert "[default: --no-resume]" in train and "--steps INT" in train and "--tasks, --task TEXT" in train
    assert "One of: train, eval. [default: eval]" in evaluate  # --split
    # an option given on the command line is the only kind that overrides (a YAML file, a resumed run)
    assert "[default: None]" not in train and "[default: ]" not in train and "[default: {}]" not in train


def test_the_sandbox_options_have_one_name_in_every_command(capsys, tmp_path):
    """train calls them verify_workers and verify_timeout, eval and verify workers and timeout:
    each command takes both names, on the command line and in YAML."""
    from axiom_rl.config import EvalConfig, TrainConfig, build_config

    for cls, own in ((TrainConfig, "verify_"), (EvalConfig, "")):
        for given in ("workers", "verify_workers"):
            cfg = build_config(cls, None, {given: 3, given.replace("workers", "timeout"): 2.5})
            assert getattr(cfg, own + "workers") == 3 and getattr(cfg, own + "timeout") == 2.5
    for command in ("train", "eval", "verify"):
        code, out, _ = run(capsys, command, "--help")
        text = " ".join(out.split())
        assert code == 0 and "--workers" in text and "--verify-workers" in text and "--verify-timeout" in text
    problems, completions = tmp_path / "p.jsonl", tmp_path / "c.jsonl"
    assert (
        run(capsys, "problems", "export", "--task", "fizzbuzz", "--count", "1", "--out", str(problems))[0]
        == 0
    )
    pid = json.loads(problems.read_text())["id"]
    completions.write_text(
        json.dumps({"problem_id": pid, "completion": "```python\ndef fizzbuzz(n):\n    return []\n```"})
        + "\n"
    )
    code, _, err = run(
        capsys, "verify", str(problems), str(completions), "--verify-workers", "1", "--verify-timeout", "2"
    )
    assert code == 0 and "wrong_answer" in err


def test_the_training_bar_fits_80_columns(monkeypatch):
    """Its figures were cut off at the right in an 80-column terminal."""
    import io
    import re

    from rich.console import Console

    import axiom_rl.cli as cli_module

    buf = io.StringIO()
    monkeypatch.setattr(cli_module, "err", Console(file=buf, width=80, force_terminal=True))
    bar, update = cli_module.training_progress()
    with bar:
        update(1580, 2000, {"reward_mean": 0.3512, "accuracy": 0.281, "kl": 0.1234, "tokens_per_s": 141156.0})
    last = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", buf.getvalue()).rstrip("\n").splitlines()[-1]
    assert "1580/2000 reward 0.35 acc 0.28 kl 0.123 141156 tok/s" in last and len(last.rstrip()) <= 80, last


def test_an_error_after_the_progress_bar_is_set_up_is_still_one_line_and_writes_nothing(capsys, tmp_path):
    """sft --from-samples finds out that its database is missing once its bar exists; outside a
    terminal the bar drew a half-done line on stderr before the error, and opening the missing
    database created it, empty."""
    db = tmp_path / "misspelt.db"
    code, _, err = run(
        capsys, "sft", "--model", "tiny", "--from-samples", "base", "--db", str(db),
        "--output-dir", str(tmp_path / "run"),
    )  # fmt: skip
    assert code == 2 and err == f"axiom-rl: error: no such database: {db}\n"
    assert not db.exists() and not (tmp_path / "run").exists()
