"""Faults: `axiom-rl train` killed at random points, then resumed, against a run never stopped.

One uninterrupted run gives the reference: its metrics and its final weights. Then each trial
starts the same run in a fresh directory, stops it at a random point with a signal (SIGKILL by
default: a power cut, the OOM killer, `kill -9`; SIGTERM: a scheduler's preemption; SIGINT:
Ctrl-C), and resumes it with `--resume` until it finishes (a run killed before it wrote its
config began nothing: it is started again with its own command, as `--resume` then says). A
trial is exact when the resumed run logged the reference's figures, step for step, and wrote its
final weights byte for byte; it must also leave no hidden temporary behind and print no
traceback.

The kill points are spread over the run: wait until the metrics hold k rows (k drawn from 0 to
steps - 1), then a random part of a step more. With a checkpoint every 3 of 8 steps, kills land
before the process trains, before the first checkpoint, between checkpoints, and during a
checkpoint's or the final model's write; each trial says where its kill landed.

    python benchmarks/faults.py --trials 30 --signals KILL TERM INT   # the figure in docs/benchmarks.md
    python benchmarks/faults.py                                        # 20 trials, SIGKILL alone

Exits 1 if any trial was not exact, else 0; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from axiom_rl.io import temporaries_in  # noqa: E402

TRAIN = ["--model", "tiny", "--tiny-size", "nano", "--task", "countdown", "--prompts-per-step", "2",
         "--num-generations", "4", "--max-completion-length", "12", "--save-every", "3"]  # fmt: skip
FIGURES = ("step", "loss", "reward_mean", "accuracy", "kl", "grad_norm", "completion_len_mean")


def train(run: Path, steps: int, resume: bool = False) -> subprocess.Popen:
    args = (
        ["--output-dir", str(run), "--resume"]
        if resume
        else [*TRAIN, "--steps", str(steps), "--output-dir", str(run)]
    )
    return subprocess.Popen([sys.executable, "-m", "axiom_rl", "train", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=as_from_a_terminal)  # fmt: skip


def as_from_a_terminal() -> None:
    """SIGINT and SIGQUIT at their defaults in the run, as a terminal's Ctrl-C finds them: a shell
    starts a background job (this script under nohup or `&`) with both ignored, the run would
    inherit that, and Python would then install no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def rows(run: Path) -> list[dict]:
    metrics = run / "metrics.jsonl"
    if not metrics.exists():
        return []
    out = []
    for line in metrics.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):  # a torn last line, while the run writes
            out.append(json.loads(line))
    return out


def figures(run: Path) -> list[list]:
    return [[row.get(k) for k in FIGURES] for row in rows(run)]


@dataclass
class Trial:
    signal: str
    landed: str  # where the kill landed
    resumes: int
    exact: bool
    why: str = ""


def landing(run: Path, steps: int, finished: bool) -> str:
    if finished:
        return "after the run ended"
    if temporaries_in(run):
        return "while writing a checkpoint or the final model"
    done = len(rows(run))
    if not (run / "config.json").exists():
        return "before the run wrote its config"
    if done == 0:
        return "before the first step"
    if not (run / "checkpoints").is_dir():
        return "before the first checkpoint"
    return "between checkpoints" if done < steps else "after the last step, before the final model"


def one_trial(
    workdir: Path, reference: Path, steps: int, step_s: float, sig: str, rng: random.Random
) -> Trial:
    run = workdir / "run"
    shutil.rmtree(run, ignore_errors=True)
    proc = train(run, steps)
    wait_rows = rng.randrange(steps)
    deadline = time.monotonic() + 300
    while proc.poll() is None and len(rows(run)) < wait_rows and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(rng.uniform(0, 1.5 * step_s))
    finished = proc.poll() is not None
    landed = landing(run, steps, finished)  # as the signal goes: SIGTERM and SIGINT then finish a step
    if not finished:
        proc.send_signal(getattr(signal, f"SIG{sig}"))
    _, err = proc.communicate(timeout=300)
    resumes = 0
    while not (run / "final_model" / "model.safetensors").exists():
        if resumes == 3:
            return Trial(sig, landed, resumes, False, "not finished after 3 resumes")
        # Killed before it wrote its config, no run began: --resume says so, and the command is run again.
        resumed = train(run, steps, resume=(run / "config.json").exists())
        _, err = resumed.communicate(timeout=600)
        resumes += 1
        if resumed.returncode != 0 or "Traceback" in err:
            return Trial(
                sig, landed, resumes, False, f"resume failed ({resumed.returncode}): {err.strip()[-300:]}"
            )
    if figures(run) != figures(reference):
        return Trial(sig, landed, resumes, False, "metrics differ from the uninterrupted run's")
    if (run / "final_model" / "model.safetensors").read_bytes() != (
        reference / "final_model" / "model.safetensors"
    ).read_bytes():
        return Trial(sig, landed, resumes, False, "final weights differ")
    if left := temporaries_in(run):
        return Trial(sig, landed, resumes, False, f"temporaries left: {[p.name for p in left]}")
    return Trial(sig, landed, resumes, True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--signals", nargs="+", default=["KILL"], choices=["KILL", "TERM", "INT"])
    parser.add_argument("--seed", type=int, default=0, help="of the kill points")
    args = parser.parse_args()
    if args.trials < 1 or args.steps < 2:
        parser.error("--trials must be >= 1 and --steps >= 2")
    rng = random.Random(args.seed)
    print(
        f"host: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory(prefix="axiom-faults-") as tmp:
        workdir = Path(tmp)
        reference = workdir / "reference"
        start = time.perf_counter()
        proc = train(reference, args.steps)
        _, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            print(f"the uninterrupted run failed: {err[-2000:]}", file=sys.stderr)
            return 1
        elapsed = [row.get("time_rollout_s", 0) + row.get("time_update_s", 0) for row in rows(reference)]
        step_s = statistics.median(elapsed) if elapsed else 0.1
        print(f"uninterrupted run: {args.steps} steps in {time.perf_counter() - start:.1f} s "
              f"(a step {step_s * 1000:.0f} ms)\n")  # fmt: skip
        trials = []
        for i in range(args.trials):
            trial = one_trial(
                workdir, reference, args.steps, step_s, args.signals[i % len(args.signals)], rng
            )
            trials.append(trial)
            verdict = "exact" if trial.exact else f"NOT EXACT: {trial.why}"
            print(
                f"{i + 1:3d}  SIG{trial.signal:<4}  {trial.landed:<48}  resumes {trial.resumes}  {verdict}",
                flush=True,
            )
    print("\nwhere the kills landed (exact / tried):")
    by_place = collections.defaultdict(list)
    for trial in trials:
        by_place[trial.landed].append(trial.exact)
    for place, exact in sorted(by_place.items()):
        print(f"  {place:<48} {sum(exact)} / {len(exact)}")
    exact = sum(t.exact for t in trials)
    print(f"exact resumes: {exact} / {len(trials)}")
    return 0 if exact == len(trials) else 1


if __name__ == "__main__":
    sys.exit(main())
