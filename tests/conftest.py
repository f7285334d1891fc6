"""Shared fixtures. The session ends by checking that no sandboxed process outlived the suite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from axiom_rl.sandbox.pool import UID_BASE, UID_COUNT

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
HUMANEVAL = SHARED_DATA / "humaneval" / "HumanEval.jsonl"
MBPP = SHARED_DATA / "mbpp" / "mbpp.jsonl"
SANDBOX_UIDS = range(UID_BASE, UID_BASE + UID_COUNT)  # every uid a worker slot may claim


def _proc_uid(pid: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _pid_ns(pid: str | int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def sandbox_leftovers() -> list[str]:
    """Processes that belong to a sandbox: a sandbox uid (when we run as root), or, without root,
    our own uid inside another pid namespace."""
    me, my_ns = os.getuid(), _pid_ns("self")
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        uid = _proc_uid(pid)
        if uid is None:
            continue
        if (me == 0 and uid in SANDBOX_UIDS) or (me != 0 and uid == me and _pid_ns(pid) not in (my_ns, None)):
            try:
                found.append(f"{pid}: {Path(f'/proc/{pid}/cmdline').read_bytes()[:80]!r}")
            except OSError:
                continue
    return found


def wait_for_no_leftovers(timeout: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := sandbox_leftovers()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture(scope="session", autouse=True)
def no_stray_processes_after_the_suite():
    yield
    from axiom_rl.sandbox import pool

    if pool._default is not None:
        pool._default.close()
    left = wait_for_no_leftovers()
    assert not left, f"sandboxed processes outlived the test suite: {left}"


def needs_shared_data(path: Path):
    return pytest.mark.skipif(
        not path.exists(), reason=f"{path} not found (the shared data lives beside the repo in CI)"
    )


def as_from_a_terminal() -> None:
    """Popen's preexec_fn for a child that a test interrupts as a user's Ctrl-C would: SIGINT and
    SIGQUIT back to their defaults. A shell starts a background job (`make test &`, a CI step run
    so) with both ignored, its children inherit that, and Python then installs no KeyboardInterrupt
    handler at all, so the signal the test sends would be lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def run_in_background(args: list[str], run: Path, steps: int = 2) -> subprocess.Popen:
    """`python -m axiom_rl ARGS` started in the background, returned once the run directory RUN's
    metrics.jsonl holds `steps` rows (or after two minutes): a run under way, to interrupt."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "axiom_rl", *args, "--output-dir", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    deadline = time.monotonic() + 120
    metrics = run / "metrics.jsonl"
    while time.monotonic() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= steps):
        time.sleep(0.2)
    return proc


@pytest.fixture(params=["default", "onednn"])
def matmul_backend(request, monkeypatch):
    """Run a test with each CPU matmul library for float32 linear layers (speed/cpu_matmul.py);
    oneDNN is skipped where this PyTorch build lacks it."""
    from axiom_rl.speed import cpu_matmul

    if request.param == "onednn" and not cpu_matmul.onednn_available():
        pytest.skip("this PyTorch build has no oneDNN")
    monkeypatch.setenv(cpu_matmul.ENV, request.param)
    cpu_matmul.backend.cache_clear()
    yield request.param
    cpu_matmul.backend.cache_clear()  # the next test chooses again, from its own environment


def logits_and_grads(nets, tokenizer) -> list[tuple]:
    """For each model: its logits at the real (unpadded) positions of a small left-padded batch
    and its parameters' gradients (by name) of a loss over them, for comparing twins that differ
    in one kernel."""
    batch = tokenizer(["12+7=", "a longer prompt: 3*4=", "x"], return_tensors="pt", padding=True)
    mask = batch["attention_mask"].bool()
    results = []
    for net in nets:
        logits = net(**batch).logits
        logits[mask].logsumexp(-1).sum().backward()
        results.append((logits.detach()[mask], {n: p.grad for n, p in net.named_parameters()}))
    return results


def under_avx2(code: str) -> list[str]:
    """The words `code` prints, run in a fresh interpreter with ATen held to AVX2 (as on a CPU
    without AVX-512: the kernels then run 8 lanes a vector), from the repository's root with the
    tests' folder on the path too (for their `from conftest import`)."""
    path = os.pathsep.join(filter(None, [os.path.dirname(__file__), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "PYTHONPATH": path}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()
