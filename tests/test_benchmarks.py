"""The benchmark scripts' own arithmetic (their figures are measured by running them, not here)."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "grpo_step.py"


@pytest.fixture(scope="module")
def grpo_step():
    spec = importlib.util.spec_from_file_location("grpo_step_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_matmul_bound_covers_each_pass_of_the_step(grpo_step):
    """The bound's accounting, with each matmul costing its FLOPs (timings would make the
    comparisons as noisy as the machine); the real timer is checked on its own below."""
    small = grpo_step.Setup("small", hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, completion=8)
    shapes: set[tuple[int, int, int, str]] = set()

    def flops(m: int, k: int, n: int, kind: str = "fwd") -> float:
        shapes.add((m, k, n, kind))
        return 2.0 * m * k * n

    bound = grpo_step.matmul_bound(small, 10, "cpu", flops)
    assert set(bound) == {"generation", "reference", "forward", "backward"}
    assert all(v > 0 for v in bound.values())
    assert bound["reference"] == bound["forward"]  # the same shapes, without gradient
    assert bound["backward"] == 2 * bound["forward"]  # the input's and the weight's gradient
    assert {kind for *_, kind in shapes} == {"fwd", "dx", "dw"}
    # no reference pass without a KL term, and more decode steps cost more generation
    assert grpo_step.matmul_bound(replace(small, beta=0.0), 10, "cpu", flops)["reference"] == 0.0
    longer = grpo_step.matmul_bound(replace(small, completion=64), 10, "cpu", flops)
    rows = small.prompts * small.generations
    per_token = grpo_step.matmul_bound(replace(small, completion=9), 10, "cpu", flops)["generation"]
    assert longer["generation"] - bound["generation"] == 56 * (per_token - bound["generation"])
    assert per_token - bound["generation"] > 2 * rows * 64 * 64  # a decode step multiplies every row
    # replayed: the policy forward over the completions multiplies only the logits
    replayed = grpo_step.matmul_bound(small, 10, "cpu", flops, replayed=True)
    completion_rows = rows * small.completion
    layers = small.layers * sum(
        flops(completion_rows, k, n) for k, n in [(64, 128), (64, 64), (64, 256), (128, 64)]
    )
    assert bound["forward"] - replayed["forward"] == pytest.approx(layers)
    assert replayed["backward"] == bound["backward"] and replayed["reference"] == bound["reference"]


def test_the_matmul_timer_times_each_shape_once(grpo_step):
    timed = grpo_step.matmul_timer("fp32", "cpu")
    seconds = [timed(8, 64, 32, kind) for kind in ("fwd", "dx", "dw")]
    assert all(0 < s < 1 for s in seconds)
    assert timed(8, 64, 32, "fwd") == seconds[0]  # kept, not timed again


def test_step_flops_grow_with_the_work(grpo_step):
    full = grpo_step.CONFIGS["full"]
    flops = grpo_step.step_flops(grpo_step.step_work(full, 30))
    assert grpo_step.step_flops(grpo_step.step_work(replace(full, completion=128), 30)) > flops
    assert grpo_step.step_flops(grpo_step.step_work(replace(full, beta=0.0), 30)) < flops  # no reference


def test_the_floor_is_the_slower_of_compute_and_memory(grpo_step):
    full = grpo_step.CONFIGS["full"]
    rate = 1e11
    work = grpo_step.step_work(full, 30)
    compute = grpo_step.floor_seconds(work, rate, None)
    assert compute == pytest.approx(grpo_step.step_flops(work) / rate)
    assert grpo_step.floor_seconds(work, rate, 1e15) == pytest.approx(compute)  # bandwidth to spare
    # a slow memory bounds decoding first: every decode step reads all weights and the KV cache
    slow = grpo_step.floor_seconds(work, rate, 1e9)
    assert slow > compute
    assert slow >= work["decode"][1] / 1e9
    longer = grpo_step.step_work(replace(full, completion=128), 30)["decode"][1]
    assert longer > 2 * work["decode"][1]  # twice the steps, each over a longer cache


def test_the_floor_leaves_out_what_axiom_rl_does_not_compute(grpo_step):
    """On a CPU in float32 the first update replays the rollout's linear outputs over the
    completions: exactly 2 x body parameters x completion tokens fewer FLOPs in the policy forward
    than the textbook step, which also runs every row's prompt in every pass."""
    full = grpo_step.CONFIGS["full"]
    own = grpo_step.axiom_work(full, 30, "cpu")
    shared = grpo_step.step_work(full, 30)
    textbook = grpo_step.step_work(full, 30, prompts_once=False)
    d, layers = full.hidden, full.layers
    kv = full.kv_heads * (d // full.heads)
    body = layers * (d * (d + 2 * kv) + d * d + 3 * d * full.intermediate)
    tokens = full.prompts * full.generations * full.completion
    assert shared["forward"][0] - own["forward"][0] == pytest.approx(2 * body * tokens)
    assert own["backward"] == shared["backward"] and own["reference"] == shared["reference"]
    assert grpo_step.step_flops(own) < grpo_step.step_flops(shared) < grpo_step.step_flops(textbook)
    # no replay in bf16 or on a GPU; a GPU runs every row's prompt in its training passes
    assert grpo_step.axiom_work(replace(full, dtype="bf16"), 30, "cpu")["forward"][0] == shared["forward"][0]
    gpu = grpo_step.axiom_work(full, 30, "cuda")
    assert gpu["forward"] == textbook["forward"] and gpu["prefill"] == shared["prefill"]


def test_the_floor_takes_the_best_of_the_run_s_measurements(grpo_step):
    """A measurement taken while the shared host was busy reads slow; the floor is what the machine
    allows, so each library's fastest rate, the highest bandwidth and each phase's shortest bound."""
    Machine = grpo_step.Machine
    busy = Machine({"torch": 1.8e11, "onednn": 2.4e11}, None, {"generation": 0.07, "backward": 0.05})
    quiet = Machine({"torch": 3.1e11, "onednn": 2.3e11}, None, {"generation": 0.04, "backward": 0.06})
    best = grpo_step.fastest([busy, quiet])
    assert best.rates == {"torch": 3.1e11, "onednn": 2.4e11}
    assert best.bound == {"generation": 0.04, "backward": 0.05}
    assert best.bandwidth is None
    gpu = grpo_step.fastest([Machine({"torch": 1.0}, 2e12, {}), Machine({"torch": 2.0}, 3e12, {})])
    assert gpu.bandwidth == 3e12 and gpu.rates == {"torch": 2.0}


def test_a_run_says_when_its_matmul_measurements_disagree(grpo_step):
    """Measurements within 15% of each other are a quiet host; a twofold spread (as a busy host gave)
    gets a warning that names the spread."""
    assert grpo_step.busy_host_note([2.16e11, 1.99e11, 2.10e11]) is None
    assert grpo_step.busy_host_note([2.16e11]) is None
    note = grpo_step.busy_host_note([2.16e11, 1.11e11, 2.05e11])
    assert note is not None and "111-216 GFLOP/s" in note and "busy" in note
    edge = 1e11 * grpo_step.BUSY_HOST_RATIO
    assert grpo_step.busy_host_note([1e11, edge]) is None
    assert grpo_step.busy_host_note([1e11, edge * 0.99]) is not None


def test_training_passes_count_each_prompt_once_per_group(grpo_step):
    """16 rows as 4 prompts x G=4 need less training-pass work than 16 prompts x G=1: the same
    completions, but a quarter of the prompt tokens (each group's prompt runs once)."""
    grouped = grpo_step.CONFIGS["full"]  # 4 prompts x G = 4
    single = replace(grouped, prompts=16, generations=1)
    for phase in ("reference", "forward", "backward"):
        assert grpo_step.step_work(grouped, 30)[phase][0] < grpo_step.step_work(single, 30)[phase][0]


def test_each_ablation_changes_what_it_names_on_its_device(grpo_step):
    """`--ablations` alone runs those that change something on the device; one named for the
    other device is refused before anything runs (a run that equals the default wastes minutes)."""
    import subprocess

    assert set(grpo_step.ABLATION_DEVICE) <= set(grpo_step.ABLATIONS)
    for device, other in (("cpu", "eager-decode"), ("cuda", "unshared-prompts")):
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), "--device", device, "--ablations", other],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2 and f"--ablations {other} changes nothing on {device}" in proc.stderr
    # Every ablation is a setting of the run, as a user sets it: each names a real speed setting
    # (or another option), and nothing is patched.
    from axiom_rl.speed import Speed

    settings = {f.name for f in dataclasses.fields(Speed)}
    for name in grpo_step.ABLATIONS:
        overrides = grpo_step.switch_off(name)
        assert overrides and set(overrides.get("speed", {})) <= settings, name
        Speed.resolve(overrides.get("speed"), "cpu")  # each a valid section
    assert grpo_step.switch_off("unshared-prompts") == {"speed": {"share_prompt_passes": False}}
    assert grpo_step.switch_off("shared-prompts") == {"speed": {"share_prompt_passes": True}}


def test_each_speed_ablation_changes_the_setting_its_device_resolves(grpo_step):
    """A speed ablation flips a setting that is on by default where it applies (a typo or a
    setting already off there would measure nothing)."""
    from axiom_rl.speed import Speed

    for name, (_, overrides) in grpo_step.ABLATIONS.items():
        if "speed" not in overrides:
            continue
        device = grpo_step.ABLATION_DEVICE.get(name, "cpu")
        default = Speed.resolve(None, device)
        ablated = Speed.resolve(overrides["speed"], device)
        changed = {
            f.name for f in dataclasses.fields(Speed) if getattr(default, f.name) != getattr(ablated, f.name)
        }
        assert changed == set(overrides["speed"]), (name, changed)


LENGTH_BUCKETS = SCRIPT.with_name("length_buckets.py")


def run_script(script: Path, *args: str, timeout: int = 300):
    import subprocess

    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout
    )


def last_column_by_mode(stdout: str, modes: tuple[str, ...]) -> dict[str, float]:
    """The last figure of each mode's line in a benchmark's table (not the ratios' line)."""
    rows = {
        line.split()[0]: float(line.split()[-1])
        for line in stdout.splitlines()
        if line.strip().startswith(tuple(f"{m} " for m in modes)) and ":" not in line
    }
    assert set(rows) == set(modes), stdout
    return rows


def assert_one_line_error(script: Path, args: list[str], message: str) -> None:
    bad = run_script(script, *args, timeout=120)
    assert bad.returncode == 2 and message in bad.stderr
    assert "Traceback" not in bad.stderr


def test_the_length_bucketing_benchmark_runs_both_ways_and_counts_what_bucketing_saves():
    """A small real run: both modes timed, and bucketing's positions fewer than the unbucketed
    batch's (completions of varied lengths); a bad count is one line and exit code 2."""
    small = [
        "--tiny-size",
        "nano",
        "--repeats",
        "1",
        "--prompts",
        "2",
        "--generations",
        "4",
        "--completion",
        "32",
    ]
    proc = run_script(LENGTH_BUCKETS, *small, "--micro-batches", "4", "--prompt-passes", "separate")
    assert proc.returncode == 0, proc.stderr
    positions = last_column_by_mode(proc.stdout, ("on", "off"))
    on, off = int(positions["on"]), int(positions["off"])
    assert 0 < on < off
    assert f"positions {on / off:.3f}x" in proc.stdout
    assert_one_line_error(LENGTH_BUCKETS, ["--repeats", "0"], "--repeats must be at least 1")


FINISHED_ROWS = SCRIPT.with_name("finished_rows.py")


def test_the_finished_rows_benchmark_samples_alike_both_ways_and_counts_the_rows_left_out():
    """A small real run: both modes timed, the same tokens sampled, and fewer rows computed when the
    finished ones leave the step; bad input is one line and exit code 2."""
    small = [
        "--tiny-size",
        "nano",
        "--repeats",
        "2",
        "--prompts",
        "2",
        "--generations",
        "8",
        "--completion",
        "48",
    ]
    proc = run_script(FINISHED_ROWS, *small, "--stops", "aeiou0123")
    assert proc.returncode == 0, proc.stderr
    assert "the same tokens in both modes on every repeat" in proc.stdout
    row_steps = last_column_by_mode(proc.stdout, ("keep", "drop"))
    assert 0 < row_steps["drop"] < row_steps["keep"]
    assert_one_line_error(FINISHED_ROWS, ["--repeats", "0"], "--repeats must be at least 1")
    assert_one_line_error(FINISHED_ROWS, ["--stops", ""], "--stops needs")


def test_time_to_accuracy_reads_its_curves_as_it_says():
    spec = importlib.util.spec_from_file_location(
        "time_to_accuracy_bench", SCRIPT.parent / "time_to_accuracy.py"
    )
    tta = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tta)
    curve = [(0.0, 0.30), (60.0, 0.40), (120.0, 0.60)]
    assert tta.time_to_reach(curve, 0.50) == pytest.approx(90.0)  # halfway between 0.40 and 0.60
    assert tta.time_to_reach(curve, 0.40) == 60.0 and tta.time_to_reach(curve, 0.25) == 0.0
    assert tta.time_to_reach(curve, 0.61) is None
    saved = [(5, Path("a")), (10, Path("b")), (15, Path("c"))]
    ended = {5: 20.0, 10: 61.0, 15: 100.0}  # step 10 ended just after the 60 s point
    assert tta.at_points(saved, ended, [10.0, 60.0, 120.0]) == [
        (10.0, None),
        (60.0, Path("a")),
        (120.0, Path("c")),
    ]


def test_time_to_accuracy_trains_its_base_again_unless_it_is_the_size_asked(tmp_path):
    """A base left in --out is used again only when its model card says it had the SFT steps asked
    for: an earlier quick check's 60-step base is not taken for the 700-step one."""
    spec = importlib.util.spec_from_file_location(
        "time_to_accuracy_bench", SCRIPT.parent / "time_to_accuracy.py"
    )
    tta = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tta)
    card = tmp_path / "axiom_rl.json"
    assert tta.base_to_train(card, 700)  # none there
    card.write_text(json.dumps({"method": "sft", "sft_steps": 60}))
    assert tta.base_to_train(card, 700) and not tta.base_to_train(card, 60)
    card.write_text("not json")
    assert tta.base_to_train(card, 60)
