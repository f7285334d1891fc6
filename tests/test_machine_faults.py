"""The machine failing under a run: a disk that fills during a checkpoint or an evaluation,
results on read-only media, memory that runs out. Each is one line and exit 2, nothing written
before is lost, and the same command goes on once the machine allows.

The faults are real: storage tests run axiom-rl in a user and mount namespace (`unshare`) over a
tmpfs of a chosen size, or a read-only bind mount, as a user would meet them on a full scratch
disk or a read-only share; the memory test gives a real run an address-space limit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from axiom_rl.cli import main

AXIOM = f"{sys.executable} -m axiom_rl"


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null || mount -t tmpfs -o size=64k tmpfs /tmp"
    return (
        subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", probe]).returncode == 0
    )


pytestmark = pytest.mark.slow
needs_namespaces = pytest.mark.skipif(
    not _namespaces_work(), reason="needs unprivileged user and mount namespaces (unshare)"
)


def in_namespace(script: str) -> subprocess.CompletedProcess:
    """Run the shell `script` as root of a new user and mount namespace: its mounts vanish with it."""
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "set -u\n" + script],
        capture_output=True,
        text=True,
        timeout=600,
    )


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.startswith("axiom-rl: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def figures(metrics: list[dict]) -> list[list]:
    keys = ("step", "loss", "lr", "grad_norm", "reward_mean", "kl")
    return [[row.get(k) for k in keys] for row in metrics]


TRAIN = ("train --model tiny --tiny-size nano --task countdown --steps 4 --prompts-per-step 2 --num-generations 2 "
         "--max-completion-length 6 --save-every 2")  # fmt: skip


@needs_namespaces
def test_a_disk_that_fills_during_a_checkpoint_is_one_line_and_the_run_resumes_exactly(tmp_path):
    """torch.save's writer on a full disk raised "unexpected pos 377152 vs 377040" from deep in
    the checkpoint, a traceback that named no disk. The disk here holds the run and its first
    checkpoint but not the second beside it. (sft's run is held by the same machine_errors.)"""
    command = TRAIN
    whole = tmp_path / "whole"
    assert main([*command.split(), "--output-dir", str(whole)]) == 0  # the run never stopped, in-process
    checkpoint = sum(f.stat().st_size for f in (whole / "checkpoints" / "step-2").rglob("*") if f.is_file())
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir(), out.mkdir()
    run = disk / "run"
    verb = command.split()[0]
    done = in_namespace(f"""
        mount -t tmpfs -o size={int(checkpoint * 1.5) + 200_000} tmpfs {disk}
        {AXIOM} {command} --output-dir {run} 2>{out}/full.err; echo $? > {out}/full.rc
        ls -a {run} {run}/checkpoints > {out}/left.txt
        cp {run}/metrics.jsonl {out}/metrics-before.jsonl
        mount -o remount,size=50m {disk}
        {AXIOM} {verb} --resume --output-dir {run} 2>{out}/resume.err; echo $? > {out}/resume.rc
        cp {run}/metrics.jsonl {out}/ && cp {run}/final_model/model.safetensors {out}/
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "full.rc").read_text().strip() == "2"
    line = one_error_line((out / "full.err").read_text())
    assert "no space left on the device while writing" in line
    assert f"resume with: axiom-rl {verb} --resume --output-dir {run}" in line
    left = (out / "left.txt").read_text().split()
    assert "step-2" in left and "step-4" not in left and not any(n.endswith(".tmp") for n in left), left
    assert (out / "resume.rc").read_text().strip() == "0", (out / "resume.err").read_text()[-3000:]
    assert figures(rows(out / "metrics.jsonl")) == figures(rows(whole / "metrics.jsonl"))
    assert (out / "model.safetensors").read_bytes() == (
        whole / "final_model" / "model.safetensors"
    ).read_bytes()


EVAL = "eval --model tiny --tiny-size nano --task countdown --max-completion-length 8"


@needs_namespaces
def test_results_on_read_only_media_are_read_and_never_written(tmp_path):
    """A WAL database on a read-only share could not even be listed ("unable to open database
    file": SQLite makes a -shm file beside it); an evaluation into it was a traceback."""
    share = tmp_path / "share"
    share.mkdir()
    db = share / "results.db"
    assert main([*EVAL.split(), "--count", "3", "--db", str(db), "--run-name", "before"]) == 0
    before = db.read_bytes()
    out = tmp_path / "out"
    out.mkdir()
    done = in_namespace(f"""
        mount --bind {share} {share} && mount -o remount,ro,bind {share}
        {AXIOM} eval list --db {db} > {out}/list.txt 2>&1; echo $? >> {out}/list.txt
        {AXIOM} eval show before --db {db} > {out}/show.txt 2>&1; echo $? >> {out}/show.txt
        {AXIOM} failures profile --db {db} --run before --out-dir {out} > {out}/profile.txt 2>&1; echo $? >> {out}/profile.txt
        {AXIOM} {EVAL} --count 3 --db {db} --run-name after 2> {out}/eval.err; echo $? > {out}/eval.rc
    """)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("list", "show", "profile"):
        text = (out / f"{name}.txt").read_text()
        assert text.split()[-1] == "0" and "Traceback" not in text, text[-2000:]
    assert "before" in (out / "list.txt").read_text() and (out / "profile-before.png").exists()
    assert (out / "eval.rc").read_text().strip() == "2"
    line = one_error_line((out / "eval.err").read_text())
    assert f"results database {db} is on a read-only file system" in line
    assert db.read_bytes() == before and sorted(p.name for p in share.iterdir()) == ["results.db"]


# Checks the database where it lies (with its -wal file), and prints what each run holds.
CHECK_DB = (
    f"{sys.executable} -c 'import json, sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
    'print(json.dumps([c.execute("PRAGMA integrity_check").fetchone()[0], dict(c.execute('
    '"SELECT r.name, COUNT(a.run_id) FROM runs r LEFT JOIN attempts a ON a.run_id = r.id GROUP BY r.name"))]))'
    "'"
)


@needs_namespaces
def test_a_disk_that_fills_during_an_evaluation_keeps_what_was_stored(tmp_path):
    """SQLite's "database or disk is full" reached the user as a traceback."""
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir(), out.mkdir()
    db, seed = disk / "results.db", tmp_path / "seed.db"
    assert main([*EVAL.split(), "--count", "3", "--db", str(seed), "--run-name", "first"]) == 0
    second = f"{EVAL} --count 60 --samples 2 --temperature 1.0 --db {db} --run-name second"
    done = in_namespace(f"""
        mount -t tmpfs -o size=4m tmpfs {disk}
        cp {seed} {db}
        # a filler leaves three pages free: the next evaluation's attempts do not fit
        dd if=/dev/zero of={disk}/filler bs=4k count=$(( $(df -k --output=avail {disk} | tail -1) / 4 - 3 )) 2>/dev/null
        {AXIOM} {second} 2> {out}/full.err; echo $? > {out}/full.rc
        rm {disk}/filler
        {CHECK_DB} {db} > {out}/after-failure.json
        {AXIOM} {second} 2> {out}/again.err; echo $? > {out}/again.rc
        {CHECK_DB} {db} > {out}/finished.json
    """)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "full.rc").read_text().strip() == "2"
    line = one_error_line((out / "full.err").read_text())
    assert f"results database {db}: no space left on the device" in line, line
    integrity, counts = json.loads((out / "after-failure.json").read_text())
    assert integrity == "ok" and counts["first"] == 3 and counts.get("second", 0) < 120
    assert (out / "again.rc").read_text().strip() == "0", (out / "again.err").read_text()[-2000:]
    integrity, counts = json.loads((out / "finished.json").read_text())
    assert integrity == "ok" and counts == {"first": 3, "second": 120}


# A run with an address-space limit set once its libraries are loaded (as a long run has them):
# `budget` MiB more than it holds then.
WITH_MEMORY_BUDGET = """
import resource, sys
import torch, transformers
from axiom_rl.cli import main
from axiom_rl.train import grpo
held = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
limit = held + (int(sys.argv[1]) << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
sys.exit(main(sys.argv[2:]))
"""


def test_running_out_of_memory_is_one_line_and_the_run_goes_on_with_a_smaller_step(tmp_path):
    """torch's "DefaultCPUAllocator: can't allocate memory" was a traceback from the rollout."""
    run = tmp_path / "run"
    big = ["--prompts-per-step", "64", "--num-generations", "16", "--max-completion-length", "200"]
    args = ["train", "--model", "tiny", "--tiny-size", "nano", "--task", "countdown", "--steps", "2",
            "--save-every", "1", "--output-dir", str(run)]  # fmt: skip
    failed = subprocess.run([sys.executable, "-c", WITH_MEMORY_BUDGET, "600", *args, *big],
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert failed.returncode == 2, failed.stderr[-3000:]
    line = one_error_line(failed.stderr)
    assert "out of memory (an allocation of" in line and "MiB failed)" in line
    assert f"resume with: axiom-rl train --resume --output-dir {run}" in line
    assert json.loads((run / "config.json").read_text())["prompts_per_step"] == 64
    log = (run / "train.log").read_text()  # the log keeps the library's own words
    assert "failed after 0 step(s)" in log and "can't allocate memory" in log
    # The advice taken: a smaller step fits the same budget, and the run finishes.
    small = ["--prompts-per-step", "2", "--num-generations", "2", "--max-completion-length", "6"]
    resumed = subprocess.run([sys.executable, "-c", WITH_MEMORY_BUDGET, "600", "train", "--resume", "--output-dir",
                              str(run), *small], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [row["step"] for row in rows(run / "metrics.jsonl")] == [1, 2]
    assert (run / "final_model" / "model.safetensors").exists()


@needs_namespaces
def test_a_full_disk_under_a_command_that_writes_a_file_is_one_line_and_leaves_nothing(tmp_path):
    """`problems export` (and every command writing a file) raised OSError's traceback."""
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir(), out.mkdir()
    done = in_namespace(f"""
        mount -t tmpfs -o size=40k tmpfs {disk}
        {AXIOM} problems export --task countdown --count 2000 --out {disk}/p.jsonl 2> {out}/err; echo $? > {out}/rc
        ls -a {disk} > {out}/left
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "rc").read_text().strip() == "2"
    line = one_error_line((out / "err").read_text())
    assert "no space left on the device; files are written whole or not at all" in line
    assert (out / "left").read_text().split() == [".", ".."]  # neither the file nor its temporary
