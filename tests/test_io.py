"""Atomic writes: complete or absent, never half-written, with the permissions plain open() and
mkdir() would give (not the 0600 / 0700 of a temporary file)."""

from __future__ import annotations

import gzip
import os
import stat

import pytest

from axiom_rl.errors import UserError
from axiom_rl.io import (
    atomic_directory,
    atomic_open,
    check_not_held,
    current_umask,
    hold_run_dir,
    write_text_atomic,
)


@pytest.fixture
def umask_027():
    previous = os.umask(0o027)
    yield 0o027
    os.umask(previous)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_current_umask_reads_without_changing_it(umask_027):
    assert current_umask() == 0o027
    assert current_umask() == 0o027


def test_a_new_file_gets_the_umask_permissions(tmp_path, umask_027):
    write_text_atomic(tmp_path / "new.txt", "data")
    assert (tmp_path / "new.txt").read_text() == "data"
    assert mode(tmp_path / "new.txt") == 0o640


def test_a_replaced_file_keeps_its_permissions(tmp_path, umask_027):
    target = tmp_path / "shared.jsonl"
    target.write_text("old")
    target.chmod(0o664)
    write_text_atomic(target, "new")
    assert target.read_text() == "new"
    assert mode(target) == 0o664


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "results.jsonl"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_open(target) as f:
        f.write("half")
        raise RuntimeError("crash")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["results.jsonl"]


def test_a_new_directory_gets_the_umask_permissions(tmp_path, umask_027):
    with atomic_directory(tmp_path / "model") as tmp:
        (tmp / "weights.bin").write_bytes(b"w")
        (tmp / "weights.bin").chmod(0o600)  # as safetensors leaves its files
        (tmp / "sub").mkdir(mode=0o700)
    assert (tmp_path / "model" / "weights.bin").read_bytes() == b"w"
    assert mode(tmp_path / "model") == 0o750
    assert mode(tmp_path / "model" / "weights.bin") == 0o640
    assert mode(tmp_path / "model" / "sub") == 0o750
    assert os.listdir(tmp_path) == ["model"]


def test_a_directory_is_replaced_whole(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "stale.bin").write_bytes(b"old")
    with atomic_directory(tmp_path / "model") as tmp:
        (tmp / "fresh.bin").write_bytes(b"new")
    assert os.listdir(tmp_path / "model") == ["fresh.bin"]
    assert os.listdir(tmp_path) == ["model"]  # neither the temporary nor the old one is left


def test_a_failed_directory_write_leaves_the_old_one(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "good.bin").write_bytes(b"good")
    with pytest.raises(RuntimeError), atomic_directory(tmp_path / "model") as tmp:
        (tmp / "partial.bin").write_bytes(b"half")
        raise RuntimeError("crash while saving")
    assert os.listdir(tmp_path / "model") == ["good.bin"]
    assert os.listdir(tmp_path) == ["model"]


def test_a_directory_over_a_file_is_refused_before_any_work(tmp_path):
    (tmp_path / "model").write_text("a file")
    with pytest.raises(UserError, match="not a directory"), atomic_directory(tmp_path / "model"):
        pytest.fail("the body must not run")
    assert (tmp_path / "model").read_text() == "a file"
    assert os.listdir(tmp_path) == ["model"]


def test_a_held_run_directory_refuses_a_second_holder_until_released(tmp_path, capsys):
    from axiom_rl.cli import main

    run = tmp_path / "run"
    check_not_held(run)  # nothing there yet: nothing to refuse, and nothing created
    assert not run.exists()
    with hold_run_dir(run):
        with pytest.raises(UserError, match="in use by another axiom-rl process"):
            check_not_held(run)
        with pytest.raises(UserError, match="in use by another axiom-rl process"), hold_run_dir(run):
            pass
        sft = ["sft", "--model", "tiny", "--tiny-size", "nano", "--steps", "1", "--output-dir", str(run)]
        assert main(sft) == 2 and "in use" in capsys.readouterr().err
        assert sorted(p.name for p in run.iterdir()) == [".lock"]
    check_not_held(run)
    with hold_run_dir(run):
        pass


def test_jsonl_is_read_with_a_byte_order_mark_or_gzipped(tmp_path):
    """Files written by other tools: a UTF-8 byte-order mark (some Windows editors) and gzip
    (HumanEval.jsonl.gz) read as the plain file; bad lines still carry their line numbers."""
    from axiom_rl.io import read_jsonl

    text = '{"a": 1}\n\n{oops\n{"b": 2}\n'
    plain, bom, packed = tmp_path / "p.jsonl", tmp_path / "bom.jsonl", tmp_path / "p.jsonl.gz"
    plain.write_text(text)
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    packed.write_bytes(gzip.compress(text.encode()))

    def lines(path):
        return [(line.lineno, line.value, bool(line.error)) for line in read_jsonl(path)]

    assert (
        lines(plain)
        == lines(bom)
        == lines(packed)
        == [(1, {"a": 1}, False), (3, None, True), (4, {"b": 2}, False)]
    )


def test_a_bad_jsonl_line_names_its_column_once(tmp_path):
    from axiom_rl.io import read_jsonl

    path = tmp_path / "bad.jsonl"
    path.write_text('{"ok": 1}\n{"text": "no end\n[1, 2,]\n')
    errors = [line.error for line in read_jsonl(path) if line.error]
    assert errors == [
        "not valid JSON (Unterminated string starting at column 10)",
        "not valid JSON (Expecting value at column 7)",
    ]
