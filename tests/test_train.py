"""The GRPO trainer, end to end on CPU with the built-in tiny model."""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import json
import math
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from conftest import run_in_background

from axiom_rl.algorithms import ADVANTAGES, LOSSES, register_loss, regroupable
from axiom_rl.algorithms.losses import clipped_surrogate_loss
from axiom_rl.cli import main, resolve_config
from axiom_rl.config import SFTConfig, TrainConfig
from axiom_rl.errors import UserError
from axiom_rl.io import current_umask, write_jsonl_atomic
from axiom_rl.models.load import load_policy
from axiom_rl.models.tiny import build_tiny_model
from axiom_rl.report import plot_run
from axiom_rl.tasks import Task, generate_problems, register_task
from axiom_rl.tasks.registry import TASKS
from axiom_rl.train.batch import (
    TokenBatch,
    _select_rows,
    _shared_prompt_logits,
    build_batch,
    completion_logprobs,
    micro_batches,
    prompt_runs,
)
from axiom_rl.train.checkpoint import CHECKSUMS, file_checksums
from axiom_rl.train.distributed import Parallel
from axiom_rl.train.grpo import TrainingStopped, frozen_passes, optimizer_step, train
from axiom_rl.train.sft import sft
from axiom_rl.train.stop import MESSAGE as STOP_MESSAGE
from axiom_rl.train.stop import StopRequest
from axiom_rl.types import PASSED, WRONG_ANSWER, Problem, Verdict

REPO = Path(__file__).resolve().parents[1]
TIMING_KEYS = {
    "time_rollout_s",
    "time_reward_s",
    "time_update_s",
    "time_reference_s",
    "time_forward_s",
    "time_backward_s",
    "tokens_per_s",
}


class CountLetters(Task):
    """A test plugin whose reward varies even for random text: how many lowercase letters (of 8)."""

    name = "test_letters"
    category = "test"
    description = "Write eight lowercase letters."

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        return Problem(id="x", task=self.name, difficulty=difficulty, prompt=f"a{rng.randint(0, 10**9)}\n")

    def score(self, problem: Problem, completion: str, sandbox=None, limits=None) -> Verdict:
        n = min(8, sum(c.islower() for c in completion))
        return Verdict(PASSED if n == 8 else WRONG_ANSWER, n, 8)


@pytest.fixture(scope="module", autouse=True)
def letters_task():
    register_task(CountLetters)
    yield
    TASKS.pop("test_letters", None)


def small(tmp_path: Path, **overrides) -> TrainConfig:
    values = dict(
        model="tiny",
        tiny_size="nano",
        tasks=["test_letters"],
        steps=2,
        prompts_per_step=2,
        num_generations=4,
        max_completion_length=16,
        lr=1e-3,
        output_dir=str(tmp_path / "run"),
        save_every=0,
    )
    values.update(overrides)
    return TrainConfig(**values)


def files_in(run: Path) -> dict[Path, bytes]:
    """Every file of a run directory and its bytes: what a refused command must leave as it was."""
    return {f: f.read_bytes() for f in run.rglob("*") if f.is_file()}


def strip_timing(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


# ---------------------------------------------------------------------------------- the CLI path


def test_countdown_on_cpu_in_under_a_minute(tmp_path):
    run = tmp_path / "t"
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "axiom_rl", "train", "--model", "tiny", "--task", "countdown", "--steps", "3",
         "--prompts-per-step", "2", "--num-generations", "4", "--max-completion-length", "32", "--output-dir", str(run)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert elapsed < 60
    for name in (
        "config.json",
        "metrics.jsonl",
        "train.log",
        "samples.jsonl",
        "checkpoints/step-3",
        "final_model",
    ):
        assert (run / name).exists(), name
    assert (run / "training.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")  # the plots of the run
    # What the run writes has the permissions of the umask, like any file the user makes: a
    # teammate can read the model and the config (the temporaries they pass through are 0600/0700).
    umask = current_umask()
    for name, default in (
        ("config.json", 0o666),
        ("final_model", 0o777),
        ("final_model/model.safetensors", 0o666),
        ("checkpoints/step-3", 0o777),
        ("checkpoints/step-3/optimizer.pt", 0o666),
    ):
        assert stat.S_IMODE((run / name).stat().st_mode) == default & ~umask, name
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    required = {"step", "loss", "reward_mean", "reward_std", "reward_max", "zero_std_frac", "kl", "clip_frac",
                "completion_len_mean", "time_rollout_s", "time_reward_s", "time_update_s", "tokens_per_s", "lr",
                "reward/countdown"}  # fmt: skip
    assert required <= set(rows[0])
    assert json.loads((run / "config.json").read_text())["max_completion_length"] == 32
    # final_model loads in a fresh Python with plain transformers, and generates
    check = textwrap.dedent(
        f"""
        from transformers import AutoModelForCausalLM, AutoTokenizer
        m = AutoModelForCausalLM.from_pretrained({str(run / "final_model")!r})
        t = AutoTokenizer.from_pretrained({str(run / "final_model")!r})
        ids = t("3 5 7 -> 22\\n<answer>", return_tensors="pt")
        out = m.generate(**ids, max_new_tokens=8, do_sample=False)
        print(out.shape[1] - ids["input_ids"].shape[1])
        """
    )
    gen = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0, gen.stderr[-2000:]
    assert 1 <= int(gen.stdout.strip().splitlines()[-1]) <= 8


def test_code_tasks_are_rewarded_through_the_sandbox(tmp_path):
    result = train(small(tmp_path, tasks=["edit_distance", "coin_change"], max_completion_length=24))
    row = result.metrics[-1]
    statuses = {k for k in row if k.startswith("status/")}
    assert statuses and statuses <= {
        f"status/{s}" for s in ("no_code", "syntax_error", "runtime_error", "wrong_answer", "passed")
    }
    assert row["internal_errors"] == 0 and "reward/code_execution" in row


def commented_out_problem(i: int) -> Problem:
    """benchmarks/overlap_verification.py's problems: assert-style (HumanEval's form), the
    completion lands in a comment, so the sandbox runs every completion and it passes unless it
    breaks the line (a random model does, now and then)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "overlap_verification.py"
    spec = importlib.util.spec_from_file_location("overlap_verification_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.commented_out_problem(i)


@pytest.mark.parametrize(("dynamic_sampling", "num_iterations"), [(False, 1), (True, 1), (False, 2)])
def test_overlapped_verification_trains_to_the_same_numbers(tmp_path, dynamic_sampling, num_iterations):
    """overlap_verification on: completions go to the sandbox as they end and the reference (and
    old) log-probs are computed while they are verified (after the refills, with dynamic sampling).
    The verdicts, rewards and losses are those of verifying after generation; every completion
    here is a program the sandbox runs."""
    problems = tmp_path / "p.jsonl"
    write_jsonl_atomic(problems, [commented_out_problem(i).to_dict() for i in range(3)])
    options = dict(
        tasks=["countdown"],
        problems_file=str(problems),
        steps=4,
        max_completion_length=24,
        dynamic_sampling=dynamic_sampling,
        num_iterations=num_iterations,
    )
    runs = {
        mode: train(small(tmp_path, **options, overlap_verification=mode, output_dir=str(tmp_path / mode)))
        for mode in ("off", "on")
    }
    assert strip_timing(runs["on"].metrics) == strip_timing(runs["off"].metrics)
    statuses = Counter(k for row in runs["on"].metrics for k in row if k.startswith("status/"))
    assert {"status/passed", "status/syntax_error"} <= statuses.keys() <= {
        "status/passed", "status/syntax_error", "status/runtime_error"
    }, statuses  # fmt: skip


def test_overlap_verification_is_on_where_the_model_runs_on_a_gpu():
    from axiom_rl.train.plan import plan_run
    from axiom_rl.verifier import overlaps_verification, sandbox_workers

    assert [overlaps_verification(choice, "cpu") for choice in ("auto", "on", "off")] == [False, True, False]
    assert [overlaps_verification(choice, "cuda") for choice in ("auto", "on", "off")] == [True, True, False]
    cores = len(os.sched_getaffinity(0))  # the cores this process may use
    assert sandbox_workers(None, False) == cores and sandbox_workers(3, True) == 3
    assert sandbox_workers(None, True) == max(1, cores - 1)  # a core for the thread driving the model
    assert sandbox_workers(None, False, processes=2) == max(1, cores // 2)
    with pytest.raises(UserError, match="unknown overlap verification 'sometimes'"):
        plan_run(TrainConfig(overlap_verification="sometimes"))


@pytest.mark.parametrize("estimator", sorted(ADVANTAGES))
def test_every_advantage_estimator_trains(tmp_path, estimator):
    result = train(small(tmp_path, advantage=estimator))
    assert len(result.metrics) == 2 and all(torch.isfinite(torch.tensor(r["loss"])) for r in result.metrics)


@pytest.mark.parametrize("loss_type", sorted(LOSSES))
def test_every_loss_type_trains(tmp_path, loss_type):
    result = train(small(tmp_path, loss_type=loss_type, num_iterations=2, clip_eps_high=0.28))
    assert len(result.metrics) == 2 and result.metrics[-1]["skipped"] == 0


def test_beta_zero_loads_no_reference_and_full_finetuning_keeps_a_copy(tmp_path):
    assert load_policy("tiny", tiny_size="nano", need_reference=False).reference is None
    full = load_policy("tiny", tiny_size="nano", need_reference=True)
    assert full.reference is not None and not full.lora
    result = train(small(tmp_path, beta=0.0))
    assert all(r["kl"] == 0.0 for r in result.metrics)


def test_lora_saves_an_adapter_and_merge_saves_weights(tmp_path):
    model, tokenizer = build_tiny_model("nano", seed=3)
    model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    base = str(tmp_path / "base")
    train(small(tmp_path, model=base, finetune="lora", output_dir=str(tmp_path / "lora")))
    assert (tmp_path / "lora/final_model/adapter_model.safetensors").exists()
    train(small(tmp_path, model=base, finetune="lora", merge=True, output_dir=str(tmp_path / "merged")))
    merged = tmp_path / "merged/final_model"
    assert (merged / "model.safetensors").exists() and not (merged / "adapter_model.safetensors").exists()
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(merged) is not None


CHAT_TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"


def test_a_local_model_directory_trains_like_a_hub_model(tmp_path):
    model, tokenizer = build_tiny_model("nano", seed=3)
    tokenizer.chat_template = CHAT_TEMPLATE
    local = tmp_path / "my-model"
    model.save_pretrained(local)
    tokenizer.save_pretrained(local)
    # as with a hub model: LoRA, full prompts, the chat template
    result = train(small(tmp_path, model=str(local), finetune="lora"))
    assert len(result.metrics) == 2
    final = tmp_path / "run/final_model"
    assert (final / "adapter_config.json").exists()
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(local)
    assert PeftModel.from_pretrained(base, final) is not None
    from axiom_rl.tasks.prompts import format_prompt

    loaded = load_policy(str(local), need_reference=False)
    assert format_prompt(CountLetters().generate(random.Random(0), 1), loaded.tokenizer).startswith(
        "<|user|>"
    )


def _random_adapter(base_net, base_name: str, out: Path, seed: int) -> None:
    """A LoRA adapter on `base_net` with random, non-zero weights (a fresh one is zero: merging it
    would prove nothing), saved naming `base_name` as its base."""
    from peft import LoraConfig, get_peft_model

    base_net.name_or_path = base_name
    peft_net = get_peft_model(base_net, LoraConfig(r=4, target_modules="all-linear"))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_net.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    peft_net.save_pretrained(out, save_embedding_layers=False)


def test_a_lora_runs_final_model_evaluates_and_trains_on_with_its_adapter_merged(tmp_path, monkeypatch):
    """A LoRA run's final_model is an adapter directory. eval and train load it as its base with
    the adapter merged; a LoRA run started from it saves an adapter naming that directory as its
    base, so loading the second adapter brings back both. (Before, eval and train refused the
    directory. Merged without that name, the second adapter would record the original base, and
    loading it would silently drop the first.)"""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from axiom_rl.models.load import load_for_inference

    base_dir, first, second = tmp_path / "base", tmp_path / "first", tmp_path / "second"
    model, tokenizer = build_tiny_model("nano", seed=3)
    model.save_pretrained(base_dir)
    tokenizer.save_pretrained(base_dir)
    _random_adapter(AutoModelForCausalLM.from_pretrained(base_dir), str(base_dir), first, seed=1)
    ids = torch.tensor([[5, 17, 42, 9, 33]])

    def logits(net) -> torch.Tensor:
        with torch.no_grad():
            return net.eval()(ids).logits

    expected = logits(PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), first))
    loaded, _, _ = load_for_inference(str(first), dtype="fp32", device="cpu")
    assert not torch.allclose(expected, logits(AutoModelForCausalLM.from_pretrained(base_dir)), atol=1e-3)
    torch.testing.assert_close(logits(loaded), expected, rtol=0, atol=1e-5)

    # A second adapter trained on the merged model names `first` as its base: both come back.
    _random_adapter(loaded, str(first), second, seed=2)
    assert json.loads((second / "adapter_config.json").read_text())["base_model_name_or_path"] == str(first)
    both = PeftModel.from_pretrained(
        PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), first).merge_and_unload(),
        second,
    )
    again, _, _ = load_for_inference(str(second), dtype="fp32", device="cpu")
    torch.testing.assert_close(logits(again), logits(both), rtol=0, atol=1e-5)

    # The trainer does the same from the directory: a LoRA run on `first` records `first`.
    train(small(tmp_path, model=str(first), finetune="lora", steps=1, output_dir=str(tmp_path / "run")))
    saved = json.loads((tmp_path / "run/final_model/adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == str(first)

    # Given as a relative path, the base is recorded absolute: the adapter loads from any directory.
    monkeypatch.chdir(tmp_path)
    train(small(tmp_path, model="first", finetune="lora", steps=1, output_dir="relative"))
    saved = json.loads((tmp_path / "relative/final_model/adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == str(first.resolve())
    monkeypatch.chdir(tmp_path / "relative")
    load_for_inference(str(tmp_path / "relative/final_model"), dtype="fp32", device="cpu")

    # An adapter that names no base says so in one line.
    (tmp_path / "orphan").mkdir()
    (tmp_path / "orphan/adapter_config.json").write_text('{"base_model_name_or_path": null}')
    with pytest.raises(UserError, match="names no base model"):
        load_for_inference(str(tmp_path / "orphan"), device="cpu")
    (tmp_path / "orphan/adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(second)}))
    config = json.loads((first / "adapter_config.json").read_text())
    (first / "adapter_config.json").write_text(json.dumps(dict(config, base_model_name_or_path=str(second))))
    with pytest.raises(UserError, match="in a loop"):  # orphan -> second -> first -> second
        load_for_inference(str(tmp_path / "orphan"), device="cpu")


def test_a_lora_run_of_the_built_in_model_saves_its_final_model_merged(tmp_path):
    """The tiny model is built in memory: an adapter for it could name no base, so it is merged."""
    train(small(tmp_path, finetune="lora", steps=1))
    final = tmp_path / "run/final_model"
    assert (final / "config.json").exists() and not (final / "adapter_config.json").exists()
    from transformers import AutoModelForCausalLM

    assert not any(
        "lora" in name for name, _ in AutoModelForCausalLM.from_pretrained(final).named_parameters()
    )


class HalfFlat(CountLetters):
    """Half its problems score every completion alike (a group with no reward variance), half
    score like test_letters; the prompt says which. It remembers each problem it scored."""

    name = "test_half_flat"
    prompts: ClassVar[dict[str, str]] = {}

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        kind = "flat" if rng.random() < 0.5 else "varied"
        return Problem(
            id="x", task=self.name, difficulty=difficulty, prompt=f"{kind}{rng.randint(0, 10**9)}\n"
        )

    def score(self, problem: Problem, completion: str, sandbox=None, limits=None) -> Verdict:
        self.prompts[problem.id] = problem.prompt
        if problem.prompt.startswith("flat"):
            return Verdict(WRONG_ANSWER, 0, 8)
        return super().score(problem, completion)


def test_dynamic_sampling_replaces_flat_groups_and_keeps_each_row_with_its_own_problem(tmp_path):
    """DAPO's dynamic sampling: groups whose rewards are all equal are swapped for fresh prompts'
    groups. Every logged row's reward must be its own problem's score of its own completion
    (a swap that moved one list and not another would break that), and the step ends with no
    more flat groups than it sampled."""
    from axiom_rl.rewards import compute_reward

    register_task(HalfFlat)
    try:
        result = train(
            small(tmp_path, tasks=["test_half_flat"], steps=4, prompts_per_step=4, samples_per_step=4,
                  dynamic_sampling=True, dynamic_sampling_rounds=3)
        )  # fmt: skip
        rows = [json.loads(line) for line in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
        prompts = dict(HalfFlat.prompts)
        for row in rows:
            problem = Problem(row["problem_id"], "test_half_flat", 1, prompts[row["problem_id"]])
            verdict = HalfFlat().score(problem, row["completion"])
            assert row["reward"] == compute_reward(problem, row["completion"], verdict)[0], row
    finally:
        TASKS.pop("test_half_flat", None)
    metrics = result.metrics
    assert sum(m["refilled_groups"] for m in metrics) > 0
    assert all(m["zero_std_frac"] <= m["zero_std_frac_sampled"] for m in metrics)
    assert any(m["zero_std_frac"] < m["zero_std_frac_sampled"] for m in metrics)
    assert all(m["completions"] == 4 * 4 for m in metrics)  # the batch keeps its size
    flat_logged = [r for r in rows if prompts[r["problem_id"]].startswith("flat")]
    assert len(flat_logged) < len(rows) / 2  # refills pushed flat groups out of the batch


# ---------------------------------------------------------------------------------- resume


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"finetune": "lora"},
        {"advantage": "krpo", "krpo_key": "task"},
        {"dtype": "bf16"},
        {"finetune": "lora", "dtype": "fp16"},
    ],
    ids=["full", "lora", "krpo", "full-bf16", "lora-fp16"],
)
def test_resume_gives_the_same_metrics_as_an_uninterrupted_run(tmp_path, options):
    """KRPO: its Kalman filter's state is checkpointed too (keyed by task, it carries over every
    step; keyed by problem, a stream of fresh problems would never read it back). bf16: the
    optimizer's float32 master weights are, not only their rounded copies in the model. fp16:
    the loss scale is."""
    options = dict(options, steps=4)
    straight = train(small(tmp_path, **options, output_dir=str(tmp_path / "a")))
    half = train(small(tmp_path, **dict(options, steps=2), output_dir=str(tmp_path / "b")))
    assert len(half.metrics) == 2
    resumed = train(small(tmp_path, **options, output_dir=str(tmp_path / "b"), resume=True))
    assert [r["step"] for r in resumed.metrics] == [3, 4]
    on_disk = [json.loads(line) for line in (tmp_path / "b/metrics.jsonl").read_text().splitlines()]
    assert strip_timing(on_disk) == strip_timing(straight.metrics)
    # The comparison covers real updates. (The loss value itself is ~0 at ratio 1: it is -mean(A),
    # and advantages sum to zero per group; the gradient is not.)
    assert any(r["grad_norm"] > 0 and r["reward_std"] > 0 for r in straight.metrics)


class _RunsCode:
    """Pickled, it calls a function when unpickled: what a crafted checkpoint file would hold."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("part", ["rng.pt", "optimizer.pt", "scheduler.pt"])
def test_resuming_a_run_directory_someone_handed_over_runs_none_of_its_code(tmp_path, part):
    """A checkpoint's .pt files load as weights only (tensors and plain containers): one carrying
    a pickled call is refused with a one-line error, the call is never made, and nothing in the
    run directory changes."""
    train(small(tmp_path))
    step = tmp_path / "run/checkpoints/step-2"
    marker = tmp_path / "code-ran"
    original = torch.load(step / part, weights_only=True)
    torch.save({"payload": _RunsCode(marker), "state": original}, step / part)
    # whoever handed it over can write its checksums too: the load itself must refuse the call
    (step / CHECKSUMS).write_text(json.dumps(file_checksums(step)))
    before = files_in(tmp_path / "run")
    with pytest.raises(UserError, match=f"cannot resume from .*step-2: its {part} is damaged or unreadable"):
        train(small(tmp_path, steps=3, resume=True))
    assert not marker.exists()
    assert files_in(tmp_path / "run") == before


def test_a_checkpoint_resumes_only_in_the_precision_it_was_trained_in(tmp_path):
    """A run started on a CPU (--dtype auto: fp32) and resumed where auto means bf16 (a GPU) has
    no float32 master weights to restore, and the other way round: one line saying which --dtype
    resumes it, and the checkpoint is left as it was."""
    for trained, resumed, fix in (("fp32", "bf16", "--dtype fp32"), ("bf16", "fp32", "the run's --dtype")):
        out = tmp_path / trained
        train(small(tmp_path, dtype=trained, output_dir=str(out)))
        before = files_in(out)
        with pytest.raises(
            UserError, match=f"trained in .*this run holds them in {resumed}; resume with {fix}"
        ):
            train(small(tmp_path, dtype=resumed, steps=3, output_dir=str(out), resume=True))
        assert files_in(out) == before  # config.json too: a plain --resume reads it
        again = train(small(tmp_path, dtype=trained, steps=3, output_dir=str(out), resume=True))
        assert len(again.metrics) == 1
        assert json.loads((out / "config.json").read_text())["steps"] == 3  # the run's options now


def test_a_learning_rate_given_with_resume_applies_from_the_next_step(tmp_path):
    """`--resume --lr X`: the checkpoint's optimizer holds the old rate, and X must replace it
    (not only in config.json). A rate too small to move any weight leaves the model where the
    checkpoint had it, the float32 masters of a bf16 run too; the old rate moves it."""
    from safetensors.torch import load_file

    for dtype in ("fp32", "bf16"):
        out = tmp_path / dtype
        train(small(tmp_path, dtype=dtype, save_every=2, output_dir=str(out)))
        shutil.copytree(out, tmp_path / f"{dtype}-old-rate")
        still = train(small(tmp_path, dtype=dtype, steps=3, lr=1e-30, output_dir=str(out), resume=True))
        moved = train(
            small(tmp_path, dtype=dtype, steps=3, output_dir=str(tmp_path / f"{dtype}-old-rate"), resume=True)
        )
        assert still.metrics[-1]["lr"] == 1e-30 and moved.metrics[-1]["lr"] == 1e-3
        checkpoint = load_file(out / "checkpoints/step-2/model/model.safetensors")
        for run, same in ((out, True), (tmp_path / f"{dtype}-old-rate", False)):
            final = load_file(run / "final_model/model.safetensors")
            moved_by = max(float((final[k].float() - v.float()).abs().max()) for k, v in checkpoint.items())
            # A weight at 0 whose gradient is rounding noise (the keys' bias: softmax ignores it)
            # moves by about the rate itself, 1e-30: "still" is within that, not bit-equal.
            assert (moved_by < 1e-20) is same, (dtype, run, moved_by)


def test_a_time_budget_ends_the_run_like_its_last_step(tmp_path):
    """--max-seconds: the step under way finishes, then the run ends as if that were its last
    step (checkpoint, final model), not as an interruption."""
    result = train(small(tmp_path, steps=10_000, max_seconds=2))
    assert 1 <= result.steps < 10_000 and not result.stopped_early
    run = tmp_path / "run"
    assert (run / "final_model/model.safetensors").exists()
    assert (run / f"checkpoints/step-{result.steps}").exists()
    assert f"time budget of 2s reached at step {result.steps}" in (run / "train.log").read_text()
    assert len((run / "metrics.jsonl").read_text().splitlines()) == result.steps


def test_an_existing_run_is_not_overwritten(tmp_path):
    train(small(tmp_path))
    before = (tmp_path / "run/metrics.jsonl").read_bytes()
    with pytest.raises(UserError, match="already holds a run"):
        train(small(tmp_path))
    assert (tmp_path / "run/metrics.jsonl").read_bytes() == before
    with pytest.raises(UserError, match="no checkpoint"):
        train(small(tmp_path, output_dir=str(tmp_path / "empty"), resume=True))
    # A resume with nothing left to train says so, before writing anything (config.json too).
    files = files_in(tmp_path / "run")
    for steps, says in ((2, "has done 2 steps and finished"), (1, "has done 2 steps, more than --steps 1")):
        with pytest.raises(UserError, match=f"{says}; give --steps above 2 to train it further"):
            train(small(tmp_path, steps=steps, resume=True))
        sft_run = SFTConfig(tiny_size="nano", steps=2, batch_size=2, output_dir=str(tmp_path / "sft"))
        if steps == 2:
            sft(sft_run)
        with pytest.raises(UserError, match=f"{says}; give --steps above 2"):
            sft(dataclasses.replace(sft_run, steps=steps, resume=True))
    assert files_in(tmp_path / "run") == files


def test_a_run_that_failed_before_its_first_step_can_be_started_again(tmp_path):
    """An error found once the model is loaded (here: a chat template it lacks) comes after the
    run directory holds its config; the corrected command must not be told "already holds a run",
    and --resume, with no checkpoint to continue from, starts it again. Its log says why it ended."""
    run = tmp_path / "run"
    with pytest.raises(UserError, match="has no chat template"):
        train(small(tmp_path, chat_template="on"))
    assert (run / "config.json").exists() and not (run / "checkpoints").exists()
    assert (
        "failed after 0 step(s): chat_template=on, but the tokenizer has no chat template"
        in (run / "train.log").read_text()
    )
    result = train(small(tmp_path, resume=True))  # no checkpoint to continue from: it starts again
    assert result.steps == 2 and json.loads((run / "config.json").read_text())["chat_template"] == "auto"
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    with pytest.raises(UserError, match="already holds a run"):  # now it has begun
        train(small(tmp_path))
    # SFT the same way
    sft_cfg = SFTConfig(tiny_size="nano", steps=1, batch_size=2, output_dir=str(tmp_path / "sft"))
    with pytest.raises(UserError, match="has no chat template"):
        sft(dataclasses.replace(sft_cfg, chat_template="on"))
    assert (sft(sft_cfg) / "model.safetensors").exists()


# ---------------------------------------------------------------------------------- the update


def grouped_batch(policy, prompt_lengths, g, completion_lengths, seed=0):
    """Prompts of the given lengths, each repeated for g rows with its own completion."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 250, (n,), generator=gen).tolist() for n in prompt_lengths]
    completions = [torch.randint(3, 250, (n,), generator=gen).tolist() for n in completion_lengths]
    rows = [prompts[i // g] for i in range(len(prompts) * g)]
    return build_batch(rows, completions, policy.tokenizer.pad_token_id, policy.device)


def logprobs_and_grads(policy, batch, share, rows=None):
    """Masked log-probs and entropies, and the gradients of a loss over them, micro-batched by
    `rows` (slices) the way the trainer splits a batch."""
    policy.model.zero_grad(set_to_none=True)
    parts = []
    for part_rows in rows or [slice(0, batch.input_ids.shape[0])]:
        part = batch.rows(part_rows)
        logprobs, entropy = completion_logprobs(policy.model, part, with_entropy=True, share_prompts=share)
        weights = torch.linspace(-1.0, 1.0, logprobs.shape[0], device=logprobs.device)[:, None]
        (logprobs * weights * part.completion_mask).sum().backward()
        parts.append((logprobs * part.completion_mask, entropy * part.completion_mask))
    grads = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.requires_grad}
    return torch.cat([lp for lp, _ in parts]), torch.cat([e for _, e in parts]), grads


def test_shared_prompt_passes_give_the_plain_passes_log_probs_and_gradients():
    """Each group's prompt run once (its keys and values indexed out to its rows) must give what
    G separate copies give: the same log-probs, entropies and gradients, to float rounding --
    with left padding (prompts of different lengths), right padding (completions of different
    lengths), full fine-tuning and LoRA, the reference with the adapter off, and micro-batches
    that cut a group in two."""
    for finetune in ("full", "lora"):
        # fp32 wherever it runs (auto is bf16 on a GPU): the tolerances below are float32 rounding
        policy = load_policy(
            "tiny", tiny_size="nano", finetune=finetune, seed=0, need_reference=False, dtype="fp32"
        )
        if finetune == "lora":  # a fresh adapter's B is 0: make it matter
            with torch.no_grad():
                for i, (_, p) in enumerate(n for n in policy.model.named_parameters() if "lora_" in n[0]):
                    p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.5)
        batch = grouped_batch(policy, [5, 11, 8], 3, [7, 3, 7, 1, 7, 6, 2, 7, 7])
        policy.model.train()
        assert _shared_prompt_logits(policy.model, batch) is not None  # the shared path is taken
        for rows in (None, [slice(0, 4), slice(4, 9)]):
            plain = logprobs_and_grads(policy, batch, share=False, rows=rows)
            shared = logprobs_and_grads(policy, batch, share=True, rows=rows)
            exact = logprobs_and_grads(policy.model.double() and policy, batch, share=False, rows=rows)
            policy.model.float()  # float32 -> float64 -> float32 is exact
            assert torch.allclose(plain[0], shared[0], atol=1e-5), (finetune, rows)
            assert torch.allclose(plain[1], shared[1], atol=1e-5), (finetune, rows)
            assert plain[2].keys() == shared[2].keys() == exact[2].keys() and plain[2]
            for name, grad in exact[2].items():
                # As accurate as the plain pass: both off float64 by float32 rounding only (with
                # these large adapters, LoRA's plain gradients are ~2e-3 off; full's ~1e-6).
                plain_error, shared_error = (
                    float((g[2][name] - grad).norm() / grad.norm()) for g in (plain, shared)
                )
                assert shared_error <= 1.5 * plain_error + 1e-6, (
                    finetune,
                    rows,
                    name,
                    shared_error,
                    plain_error,
                )
        if finetune == "lora":
            with policy.reference_mode() as ref, torch.no_grad():
                adapter_off = [completion_logprobs(ref, batch, share_prompts=s)[0] for s in (False, True)]
            with torch.no_grad():
                with_adapter = completion_logprobs(policy.model, batch, share_prompts=True)[0]
            mask = batch.completion_mask
            assert torch.allclose(adapter_off[0] * mask, adapter_off[1] * mask, atol=1e-5)
            assert not torch.allclose(adapter_off[0] * mask, with_adapter * mask, atol=1e-3)
            # Back on afterwards, and still trained: disabling takes the adapters' gradients away.
            lora = [p for n, p in policy.model.named_parameters() if "lora_" in n]
            assert lora and all(p.requires_grad for p in lora)


def test_selecting_cache_rows_matches_transformers_own_selection_and_its_gradients():
    """The shared prompt pass's cache, gathered to every row by index_select, must hold what
    transformers' batch_select_indices gives, and send back the same gradient bits."""
    policy = load_policy(
        "tiny", tiny_size="nano", finetune="full", seed=0, need_reference=False, dtype="fp32"
    )
    batch = grouped_batch(policy, [5, 9], 3, [4] * 6)
    firsts, run_of_row = prompt_runs(batch)
    p = batch.input_ids.shape[1] - batch.completion_length
    selected = []
    for select in (_select_rows, lambda cache, index: cache.batch_select_indices(index)):
        policy.model.zero_grad(set_to_none=True)
        out = policy.model(
            input_ids=batch.input_ids[firsts, :p],
            attention_mask=batch.attention_mask[firsts, :p],
            position_ids=batch.position_ids[firsts, :p],
            use_cache=True,
        )
        cache = out.past_key_values
        select(cache, run_of_row)
        tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
        assert len(tensors) == 2 * policy.model.config.num_hidden_layers
        assert all(t.shape[0] == len(run_of_row) for t in tensors)
        weights = torch.linspace(-1.0, 1.0, len(run_of_row))[:, None, None, None]
        sum((t * weights).sin().sum() for t in tensors).backward()  # rows weighted unlike each other
        grads = {n: q.grad.clone() for n, q in policy.model.named_parameters() if q.grad is not None}
        selected.append(([t.detach() for t in tensors], grads))
    (ours, our_grads), (theirs, their_grads) = selected
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    assert our_grads.keys() == their_grads.keys() and our_grads
    assert all(torch.equal(our_grads[n], their_grads[n]) for n in our_grads)


def test_prompt_runs_group_neighbouring_rows_with_the_same_padded_prompt():
    pad = 0
    # Rows 2 and 3 hold the same ids, but in row 3 the leading pad id is a real token (a
    # tokenizer that pads with EOS): different prompts. Row 4 repeats row 0 but is not beside it.
    prompts = torch.tensor([[7, 8], [7, 8], [pad, 9], [pad, 9], [7, 8]])
    prompt_mask = torch.tensor([[1, 1], [1, 1], [0, 1], [1, 1], [1, 1]])
    completion = torch.full((5, 1), 4)
    batch = TokenBatch(
        torch.cat([prompts, completion], 1),
        torch.cat([prompt_mask, torch.ones((5, 1), dtype=torch.long)], 1),
        torch.zeros((5, 3), dtype=torch.long),  # unused here
        completion,
        torch.ones((5, 1)),
    )
    firsts, run_of_row = prompt_runs(batch)
    assert firsts.tolist() == [0, 2, 3, 4]
    assert run_of_row.tolist() == [0, 0, 1, 2, 3]


def real_lengths(batch):
    """Each row's (prompt, completion) real-token counts."""
    t = batch.completion_length
    return [(int(a[:-t].sum()), int(a[-t:].sum())) for a in batch.attention_mask]


@pytest.mark.parametrize("share", [False, True])
def test_micro_batches_hold_rows_of_similar_lengths_without_their_padding(share):
    """Gradient-accumulation micro-batches take each row once, each only as wide as its own longest
    prompt and completion, its rows in the batch's order (a group's stay neighbours); rows of
    similar lengths go together where that needs fewer token positions than the rows in order,
    and the log-probs are the whole batch's."""
    policy = load_policy(
        "tiny", tiny_size="nano", finetune="full", seed=0, need_reference=False, dtype="fp32"
    )
    policy.model.eval()
    # Each group one long and one short completion: sorted by length, the long rows go together.
    mixed = grouped_batch(policy, [5, 6, 5, 6], 2, [9, 1] * 4)
    # Groups of similar rows, prompts of different lengths: the rows in order need the fewest.
    similar = grouped_batch(policy, [5, 11, 8, 3], 2, [9, 8, 1, 3, 9, 9, 2, 2])
    for batch, expected in (
        (mixed, [[2, 6], [0, 4], [3, 7], [1, 5]]),
        (similar, [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ):
        with torch.no_grad():
            whole, _ = completion_logprobs(policy.model, batch, share_prompts=share)
        parts = micro_batches(batch, 4, share_prompts=share)
        chosen = [list(range(8))[rows] if isinstance(rows, slice) else rows.tolist() for rows, _ in parts]
        assert chosen == expected
        lengths = real_lengths(batch)
        for (rows, part), own in zip(parts, chosen):
            assert part.input_ids.shape[1] == max(lengths[i][0] for i in own) + max(
                lengths[i][1] for i in own
            )
            assert share is False or len(prompt_runs(part)[0]) == len({i // 2 for i in own})
            with torch.no_grad():
                logprobs, _ = completion_logprobs(policy.model, part, share_prompts=share)
            t = part.completion_length
            assert torch.equal(part.completion_mask, batch.completion_mask[rows, :t])
            assert torch.allclose(
                logprobs * part.completion_mask, whole[rows, :t] * part.completion_mask, atol=1e-5
            )
        assert sum(part.input_ids.numel() for _, part in parts) < batch.input_ids.numel() * 3 / 4
        # Not regrouped (a loss that reads each micro-batch's own tokens): the rows in order, trimmed.
        in_order = micro_batches(batch, 4, share_prompts=share, regroup=False)
        assert [rows for rows, _ in in_order] == [slice(i, i + 2) for i in range(0, 8, 2)]
    # One part is the whole batch as it is; without bucketing, the rows in order at full width.
    [(rows, part)] = micro_batches(mixed, 1, share_prompts=share)
    assert rows == slice(0, 8) and part is mixed
    plain = micro_batches(mixed, 4, share_prompts=share, bucket=False)
    assert [rows for rows, _ in plain] == [slice(i, i + 2) for i in range(0, 8, 2)]
    assert all(part.input_ids.shape == (2, mixed.input_ids.shape[1]) for _, part in plain)


def test_trimming_keeps_one_prompt_and_one_completion_column():
    pad = 0
    ids = torch.tensor([[pad, pad, 7, 5, pad, pad], [pad, pad, 8, 6, 9, pad]])
    mask = (torch.arange(6) >= 2).long().expand(2, 6) * torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]])
    batch = TokenBatch(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0), ids[:, 3:], mask[:, 3:].float())
    trimmed = batch.trimmed()
    assert trimmed.input_ids.tolist() == [[7, 5, pad], [8, 6, 9]]
    assert trimmed.completion_ids.tolist() == [[5, pad], [6, 9]]
    assert trimmed.position_ids.tolist() == [[0, 1, 1], [0, 1, 2]]
    assert trimmed.trimmed() is trimmed  # nothing left to trim
    # Rows with no completion token at all keep one completion column; every prompt column padding, one.
    empty = TokenBatch(
        ids[:, :4],
        torch.zeros(2, 4, dtype=torch.long),
        torch.zeros(2, 4, dtype=torch.long),
        ids[:, 3:4],
        torch.zeros(2, 1),
    )
    assert empty.trimmed().input_ids.shape == (2, 2)


def test_loss_params_reach_the_loss_and_are_checked_before_the_run(tmp_path, monkeypatch):
    """`loss_params` (YAML) pass every documented option of the loss the trainer does not set
    itself; an unknown one, or a value the loss refuses, is a one-line error before anything is
    written. The trainer passes the whole step's longest completion (hybrid: one alpha a step)."""
    seen: list[dict] = []

    def recording(logprobs, old_logprobs, ref_logprobs, advantages, mask, **params):
        seen.append(params)
        return clipped_surrogate_loss(logprobs, old_logprobs, ref_logprobs, advantages, mask, **params)

    monkeypatch.setitem(LOSSES, "recording", recording)
    params = {
        "dual_clip": 3.0,
        "kl_bias_correction": True,
        "importance_sampling": "sequence",
        "hybrid_alpha": 0.5,
    }
    train(small(tmp_path, steps=1, loss_type="recording", loss_params=params, gradient_accumulation_steps=2))
    trained = [p for p in seen if p.get("num_sequences") == 8]  # the step's, not the plan's check
    assert len(trained) == 2 and all(p.items() >= params.items() for p in trained)
    assert {p["longest_completion"] for p in trained} == {16.0}  # every micro-batch: the batch's
    for bad, message in (
        (
            {"epsilon": 0.1},
            r"loss_params \['epsilon'\] unknown; the grpo loss takes: dual_clip, hybrid_alpha",
        ),
        ({"beta_sampling": 0.1}, r"loss_params \['beta_sampling'\] unknown; the grpo loss takes"),
        ({"dual_clip": 0.5}, "dual_clip must be > 1, got 0.5"),
        ({"importance_sampling": "word"}, "importance_sampling must be 'token' or 'sequence'"),
    ):
        with pytest.raises(UserError, match=message):
            train(small(tmp_path, loss_params=bad, output_dir=str(tmp_path / "refused")))
        assert not (tmp_path / "refused").exists()


def test_dgro_trains_with_its_coefficients_from_the_config(tmp_path):
    """DGRO as a user sets it up in YAML: the `dgro` estimator's beta_1 (annealed) and the `dgro`
    loss's beta_2 (`beta_sampling`), two updates a rollout so the second sees the penalty towards
    the policy that sampled. An option of a clipped loss is refused before the run."""
    import json

    cfg = small(
        tmp_path, steps=4, loss_type="dgro", advantage="dgro", num_iterations=2, beta=0.0,
        advantage_params={"beta_reward": 2.0, "beta_reward_end": 0.5, "anneal_steps": 4, "scale": "none"},
        loss_params={"beta_sampling": 0.5},
    )  # fmt: skip
    train(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss/sequence_log_ratio_sq" in r]
    assert len(steps) == 4
    # each rollout's first update is on-policy (no penalty), its second is not
    assert steps[0]["loss/sequence_log_ratio_sq"] < 1e-9 and steps[1]["loss/sequence_log_ratio_sq"] > 1e-4
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["loss_params"] == {"beta_sampling": 0.5} and saved["advantage_params"]["anneal_steps"] == 4
    with pytest.raises(
        UserError, match=r"loss_params \['dual_clip'\] unknown; the dgro loss takes: beta_sampling"
    ):
        train(
            small(tmp_path, loss_type="dgro", loss_params={"dual_clip": 3.0}, output_dir=str(tmp_path / "no"))
        )
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("loss_type", sorted(LOSSES))
def test_bucketed_micro_batches_give_the_unbucketed_update(loss_type, share):
    """The trainer's reference log-probs and optimizer step over length-bucketed, trimmed
    micro-batches give what micro-batches of the rows in order at full width give (the gradient as
    the parameters' change under SGD), to float32 rounding; for a loss that sums alike however the
    rows are split (regroupable), what one pass over the whole batch gives too. bnpo reads each
    micro-batch's own tokens: its rows keep their micro-batches, only trimmed. The loss's metrics
    (the KL, the ratios) are the whole batch's for every loss: token means, weighed by tokens."""
    results = {}
    for name, parts, bucketed in (("bucketed", 4, True), ("in order", 4, False), ("whole", 1, True)):
        policy = load_policy(
            "tiny", tiny_size="nano", finetune="full", seed=0, need_reference=True, dtype="fp32"
        )
        # each group one long and one short completion: bucketing puts the long rows together
        batch = grouped_batch(policy, [5, 6, 5, 6], 2, [9, 1] * 4, seed=1)
        if bucketed and parts > 1:
            grouped = [
                rows for rows, _ in micro_batches(batch, parts, share, regroupable(loss_type), bucketed)
            ]
            assert all(isinstance(rows, slice) for rows in grouped) != regroupable(loss_type)
        cfg = TrainConfig(
            model="tiny",
            tiny_size="nano",
            loss_type=loss_type,
            beta=0.04,
            max_grad_norm=1e9,
            gradient_accumulation_steps=parts,
            max_completion_length=batch.completion_length,
            speed={"share_prompt_passes": share, "bucket_lengths": bucketed},
        )
        ref, _, _ = frozen_passes(policy, batch, cfg)
        with policy.reference_mode() as reference, torch.no_grad():
            reference.eval()
            plain_ref, _ = completion_logprobs(reference, batch)
        mask = batch.completion_mask
        assert torch.allclose(ref * mask, plain_ref * mask, atol=1e-5), name
        # A reference that differs from the policy, by token: the KL (a metric) is not 0.
        ref = ref + 0.1 * torch.randn(ref.shape, generator=torch.Generator().manual_seed(3))
        before = {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}
        sgd = torch.optim.SGD(policy.trainable_parameters, lr=1.0)
        advantages = torch.linspace(-1.0, 1.0, batch.input_ids.shape[0])
        update = optimizer_step(
            policy, policy.model, sgd, batch, advantages, None, ref, cfg, Parallel(torch.device("cpu"))
        )
        change = {n: p.detach() - before[n] for n, p in policy.model.named_parameters() if n in before}
        results[name] = (update, change)
    assert results["whole"][0]["grad_norm"] > 0
    compared = ["in order"] + (["whole"] if regroupable(loss_type) else [])
    update, change = results["bucketed"]
    for name in compared:
        other_update, other_change = results[name]
        assert update["loss"] == pytest.approx(other_update["loss"], rel=1e-5, abs=1e-7), name
        assert update["grad_norm"] == pytest.approx(other_update["grad_norm"], rel=1e-4), name
        assert update["entropy"] == pytest.approx(other_update["entropy"], rel=1e-5), name
        for n, delta in other_change.items():
            assert torch.allclose(change[n], delta, atol=1e-6, rtol=1e-4), (name, n)
    whole = results["whole"][0]
    assert whole["kl"] > 1e-3
    for name in ("bucketed", "in order"):
        for key in ("kl", "ratio_mean", "ratio_min", "ratio_max", "clip_frac"):
            assert results[name][0][key] == pytest.approx(whole[key], rel=1e-5, abs=1e-7), (name, key)


def test_gradient_checkpointing_runs_every_rows_prompt():
    """A checkpointed model keeps no cache in training: the plain pass runs, with the same result."""
    policy = load_policy(
        "tiny", tiny_size="nano", finetune="full", seed=0, need_reference=False, gradient_checkpointing=True
    )
    batch = grouped_batch(policy, [4, 6], 2, [5, 5, 3, 5])
    policy.model.train()
    assert _shared_prompt_logits(policy.model, batch) is None
    shared, _ = completion_logprobs(policy.model, batch, share_prompts=True)
    plain, _ = completion_logprobs(policy.model, batch, share_prompts=False)
    assert torch.equal(shared, plain)


def test_a_model_that_drops_out_runs_every_rows_prompt():
    """In training mode with dropout (LoRA's, or attention dropout), G copies of a prompt draw G
    masks and one shared prompt pass would draw one: the plain pass runs. Without dropout, or in
    eval mode, the prompt is shared."""
    for finetune, options in (("lora", {"lora_dropout": 0.1}), ("full", {})):
        policy = load_policy(
            "tiny", tiny_size="nano", finetune=finetune, seed=0, need_reference=False, **options
        )
        if finetune == "full":
            policy.model.config.attention_dropout = 0.1
        batch = grouped_batch(policy, [4, 6], 2, [5, 5, 3, 5])
        policy.model.train()
        assert _shared_prompt_logits(policy.model, batch) is None, finetune
        policy.model.eval()
        assert _shared_prompt_logits(policy.model, batch) is not None, finetune
    policy = load_policy("tiny", tiny_size="nano", finetune="lora", seed=0, need_reference=False)
    assert policy.model.train() and _shared_prompt_logits(policy.model, batch) is not None  # lora_dropout 0


def test_parameters_change_and_the_reference_is_the_base_model(tmp_path):
    for finetune in ("full", "lora"):
        policy = load_policy("tiny", tiny_size="nano", finetune=finetune, seed=0)
        base = build_tiny_model("nano", seed=0)[0].to(policy.device, policy.dtype)
        ids = [[5, 6, 7]] * 2
        batch = build_batch(ids, [[8, 9, 10], [11, 12]], policy.tokenizer.pad_token_id, policy.device)
        with policy.reference_mode() as ref, torch.no_grad():
            ref_lp, _ = completion_logprobs(ref, batch)
            base_lp, _ = completion_logprobs(base.eval(), batch)
        assert torch.allclose(ref_lp, base_lp, atol=1e-6), finetune
    before = {k: v.clone() for k, v in build_tiny_model("nano", seed=0)[0].state_dict().items()}
    train(small(tmp_path, steps=1))
    from transformers import AutoModelForCausalLM

    after = AutoModelForCausalLM.from_pretrained(tmp_path / "run/final_model").state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) > len(before) // 2


def test_non_finite_losses_stop_the_run_after_a_checkpoint(tmp_path):
    @register_loss("test_nan")
    def nan_loss(logprobs, old_logprobs, ref_logprobs, advantages, mask, **params):
        loss, metrics = clipped_surrogate_loss(
            logprobs, old_logprobs, ref_logprobs, advantages, mask, **params
        )
        return loss * float("nan"), metrics

    try:
        with pytest.raises(TrainingStopped, match="3 steps in a row"):
            train(small(tmp_path, loss_type="test_nan", steps=10))
        rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
        assert [r["skipped"] for r in rows] == [1, 1, 1]
        assert (tmp_path / "run/checkpoints/step-3").exists()
        # The plots read the metrics back as they were written ("nan" for NaN): they still draw.
        assert plot_run(tmp_path / "run").read_bytes().startswith(b"\x89PNG")
    finally:
        LOSSES.pop("test_nan")


def test_a_warm_up_as_long_as_the_run_is_said_once(tmp_path):
    """sft's default warm-up of 20 steps under `--steps 5` never lets the learning rate reach
    --lr: both commands say so once, at the start (console and train.log)."""
    said: list[str] = []
    sft(SFTConfig(tiny_size="nano", steps=5, batch_size=2, output_dir=str(tmp_path / "s")), say=said.append)
    assert said == ["warning: warmup_steps (20) is not below steps (5): the learning rate is still warming up "
                    "when the run ends (lower --warmup-steps)"]  # fmt: skip
    assert "warning: warmup_steps (20)" in (tmp_path / "s/train.log").read_text()
    said.clear()
    train(small(tmp_path, steps=2, warmup_steps=2), say=said.append)
    assert [m for m in said if "warmup_steps" in m] == [
        said[0]
    ] and "warmup_steps (2) is not below steps (2)" in said[0]
    said.clear()
    train(small(tmp_path, steps=3, warmup_steps=2, output_dir=str(tmp_path / "fine")), say=said.append)
    assert not any("warmup_steps" in m for m in said)


def test_an_sft_loss_that_was_not_finite_still_plots(tmp_path):
    """An fp16 SFT step that overflowed logs an inf loss; the moving average skips it (the plot
    crashed the `sft` command at its very end, after the model was saved)."""
    from axiom_rl.report import _smooth
    from axiom_rl.train.runlog import RunLog

    log = RunLog(tmp_path)
    for step, loss in enumerate([2.0, float("inf"), 1.0, float("nan"), 0.5], start=1):
        log.metrics({"step": step, "loss": loss, "lr": 1e-3, "elapsed_s": step})
    log.close()
    assert plot_run(tmp_path).read_bytes().startswith(b"\x89PNG")
    assert _smooth([2.0, float("inf"), 1.0], window=2) == [2.0, 2.0, 1.0]


def test_ctrl_c_during_an_import_the_message_needs_still_stops_after_the_step(capfd):
    """The first Ctrl-C arrived while rich was importing its emoji table for the run's first
    print; the handler's own print needed the half-imported module, and the run died."""

    def half_imported(message: str) -> None:
        raise ImportError("cannot import name 'EMOJI' from partially initialized module")

    with StopRequest(half_imported) as stop:
        stop._handle(signal.SIGINT, None)
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):  # the second stops at once, as before
            stop._handle(signal.SIGINT, None)
    assert STOP_MESSAGE in capfd.readouterr().err


def test_ctrl_c_writes_a_checkpoint_and_exits_cleanly(tmp_path, capsys):
    run = tmp_path / "ctrl-c"
    proc = run_in_background(
        ["train", "--model", "tiny", "--tiny-size", "nano", "--task", "countdown", "--steps", "500",
         "--prompts-per-step", "2", "--num-generations", "2", "--max-completion-length", "8", "--save-every", "0"],
        run,
    )  # fmt: skip
    # A resume while the run still goes on is refused: the two would interleave their metrics.
    assert main(["train", "--resume", "--output-dir", str(run)]) == 2
    assert "is in use by another axiom-rl process" in capsys.readouterr().err
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and "resume with" in stderr
    steps = len((run / "metrics.jsonl").read_text().splitlines())
    assert (run / f"checkpoints/step-{steps}").exists()
    assert f"stopped by request (Ctrl-C) at step {steps}" in (run / "train.log").read_text()
    # Once it has ended (the kernel drops its lock), the resume goes ahead.
    assert main(["train", "--resume", "--output-dir", str(run), "--steps", str(steps + 1)]) == 0
    assert [json.loads(r)["step"] for r in (run / "metrics.jsonl").read_text().splitlines()] == list(
        range(1, steps + 2)
    )


# ---------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--model", "./no/such/model"],
            "no such model directory: ./no/such/model (relative to the working directory, ",
        ),
        (["--task", "nope"], "unknown task 'nope'"),
        (["--task", "humaneval"], "humaneval has no generator: import its problems"),
        (["--loss-type", "nope"], "unknown loss type 'nope'; choose from: bnpo, dapo"),
        (["--advantage", "nope"], "unknown advantage estimator 'nope'; choose from: batch_norm"),
        (["--steps", "0"], "steps must be >= 1"),
        (["--num-generations", "x"], "num_generations: expected int"),
        (["--nope", "1"], "No such option"),
    ],
)
def test_bad_input_is_one_line_before_anything_loads(tmp_path, capsys, args, message):
    assert main(["train", "--output-dir", str(tmp_path / "r"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists()


def test_bad_input_stops_a_fresh_process_before_a_model_loads(tmp_path):
    """The same from the shell: a new interpreter, one line, no directory, and no model loaded
    first (an unknown task after a hub model would otherwise download it)."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "axiom_rl", "train", "--output-dir", str(tmp_path / "r"), "--model",
         "Qwen/Qwen2.5-0.5B", "--task", "nope"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "unknown task 'nope'" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert time.monotonic() - start < 20
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "command, args, message",
    [
        ("train", ["--dtype", "bf17"], "unknown dtype 'bf17'"),
        ("train", ["--finetune", "partial"], "finetune must be lora, full or auto"),
        ("train", ["--lr", "nan"], "lr must be > 0, got nan"),
        ("train", ["--weight-decay", "-1"], "weight_decay must be >= 0"),
        ("train", ["--temperature", "nan"], "temperature must be >= 0"),
        ("train", ["--top-p", "2"], "top_p must be in (0, 1]"),
        ("train", ["--temperature", "0"], "temperature 0 (greedy) makes the completions of a group identical"),
        ("train", ["--beta", "inf"], "beta must be >= 0"),
        ("train", ["--lora-r", "0"], "lora_r must be >= 1"),
        ("train", ["--lora-dropout", "1"], "lora_dropout must be below 1"),
        ("train", ["--verify-timeout", "0"], "verify_timeout must be > 0"),
        ("train", ["--verify-workers", "0"], "verify_workers must be >= 1, got 0"),
        ("train", ["--max-seconds", "-5"], "max_seconds must be >= 0"),
        ("train", ["--seed", "-1"], "seed must be >= 0"),  # it names generated problems
        ("sft", ["--seed", "-1"], "seed must be >= 0"),
        ("train", ["--min-completion-length", "64", "--max-completion-length", "32"], "exceeds max_completion_length"),
        ("sft", ["--dtype", "bf17"], "unknown dtype 'bf17'"),
        ("sft", ["--lr", "inf"], "lr must be > 0, got inf"),
        ("sft", ["--warmup-steps", "-1"], "warmup_steps must be >= 0"),
        # one source of SFT targets; the defaults given explicitly count too
        ("sft", ["--problems-file", "p.jsonl", "--task", "countdown"], "--task cannot be used with --problems-file"),
        ("sft", ["--problems-file", "p.jsonl", "--all"], "error: --all cannot be used with --problems-file"),
        ("train", ["--problems-file", "p.jsonl", "--all"], "error: --all cannot be used with --problems-file"),
        ("sft", ["--problems-file", "p.jsonl", "--from-samples", "a"], "--from-samples cannot be used with --problems-file"),
        ("sft", ["--from-samples", "a", "--difficulty", "1"], "--difficulty cannot be used with --from-samples"),
    ],
)  # fmt: skip
def test_bad_options_stop_before_the_run_directory_is_made(capsys, tmp_path, command, args, message):
    """A typo must not leave a run directory behind: it would block the corrected command
    ("already holds a run")."""
    code = main([command, "--model", "tiny", "--output-dir", str(tmp_path / "r"), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--top-p", "2"], "top_p must be in (0, 1]"),
        (["--dtype", "bf17"], "unknown dtype 'bf17'"),
        (["--workers", "0"], "workers must be >= 1, got 0"),
        (["--timeout", "nan"], "timeout must be > 0, got nan"),
    ],
)
def test_eval_checks_its_options_before_it_starts(capsys, tmp_path, args, message):
    db = tmp_path / "e.sqlite"
    code = main(["eval", "--model", "tiny", "--task", "lcs", "--count", "1", "--db", str(db), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not db.exists()


def test_resume_settings_are_checked_and_the_command_line_wins(capsys, tmp_path):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(f"resume: maybe\noutput_dir: {tmp_path / 'r'}\n")
    assert main(["train", "--config", str(yaml_file)]) == 2
    assert "resume: expected bool, got 'maybe'" in capsys.readouterr().err
    # resume: true in the YAML file, --no-resume on the command line: a fresh run, nothing to find
    yaml_file.write_text(f"resume: true\noutput_dir: {tmp_path / 'r'}\n")
    assert resolve_config(TrainConfig, str(yaml_file), {"resume": False}).resume is False
    with pytest.raises(UserError, match="needs --output-dir of an existing run"):
        resolve_config(TrainConfig, str(yaml_file), {})
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.json").write_text("{truncated")
    assert main(["train", "--resume", "--output-dir", str(tmp_path / "r")]) == 2
    assert "config.json is not a readable run config" in capsys.readouterr().err
    sft_run = tmp_path / "sft"  # an SFT run's directory is not a GRPO run to resume
    sft_args = ["--model", "tiny", "--tiny-size", "nano", "--task", "countdown", "--steps", "1"]
    assert main(["sft", *sft_args, "--output-dir", str(sft_run)]) == 0
    capsys.readouterr()
    saved = (sft_run / "config.json").read_text()
    assert main(["train", "--resume", "--output-dir", str(sft_run)]) == 2
    err = capsys.readouterr().err
    assert "holds no 'axiom-rl train' run to resume" in err and "from_samples" in err
    assert len(err.strip().splitlines()) == 1 and (sft_run / "config.json").read_text() == saved


def test_a_damaged_checkpoint_is_named_with_the_way_out(capsys, tmp_path):
    run = tmp_path / "r"
    args = ["train", "--model", "tiny", "--tiny-size", "nano", "--task", "countdown", "--prompts-per-step", "1",
            "--num-generations", "2", "--max-completion-length", "8", "--save-every", "1", "--output-dir", str(run)]  # fmt: skip
    assert main([*args, "--steps", "2"]) == 0
    (run / "checkpoints/step-2/optimizer.pt").write_bytes(b"truncated")
    capsys.readouterr()
    assert main(["train", "--resume", "--output-dir", str(run), "--steps", "3"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar's line
    assert last.startswith("axiom-rl: error: cannot resume from") and "step-2" in last, last
    assert "its optimizer.pt does not match its checksum (damaged on disk)" in last
    assert last.endswith("move it aside to resume from step-1")
    (run / "checkpoints/step-2").rename(run / "step-2.damaged")  # what the message says to do
    assert main(["train", "--resume", "--output-dir", str(run), "--steps", "3"]) == 0
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_a_checkpoint_of_another_model_says_which_option_differs(capsys, tmp_path):
    """A readable checkpoint that another model or fine-tuning mode wrote is not "damaged": the
    way out is the run's own options (an older checkpoint would fail alike), and the run is left
    as it was."""
    run = tmp_path / "r"
    args = ["train", "--model", "tiny", "--tiny-size", "nano", "--task", "countdown", "--prompts-per-step", "1",
            "--num-generations", "2", "--max-completion-length", "8", "--save-every", "1", "--output-dir", str(run)]  # fmt: skip
    assert main([*args, "--steps", "2"]) == 0
    before = files_in(run)
    capsys.readouterr()
    for flags, says in (
        (["--finetune", "lora"], "its model is full weights and this run trains a LoRA adapter; resume with --finetune full"),
        (["--tiny-size", "micro"], "its model has other shapes than this run's (model.embed_tokens.weight is [259, 64] there, [259, 128] here)"),
    ):  # fmt: skip
        assert main(["train", "--resume", "--output-dir", str(run), "--steps", "3", *flags]) == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert last.startswith(f"axiom-rl: error: cannot resume from {run}/checkpoints/step-2: {says}"), last
        assert "damaged" not in last and "move it aside" not in last
    assert files_in(run) == before


def test_seed_flag_names_and_yaml_with_overrides(tmp_path, capsys):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(
        "model: tiny\ntiny_size: nano\nsteps: 5\nprompts_per_step: 1\nmax_completion_length: 8\n"
    )
    run = tmp_path / "seeds"
    code = main(["train", "--config", str(yaml_file), "--problems", "countdown", "test_letters_not_registered_here",
                 "--generations", "2", "--steps", "1", "--output-dir", str(run)])  # fmt: skip
    assert code == 2 and "test_letters_not_registered_here" in capsys.readouterr().err  # --problems took both
    code = main(["train", "--config", str(yaml_file), "--problems", "countdown", "lcs", "--generations", "2",
                 "--steps", "1", "--verbose", "--output-dir", str(run)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    cfg = json.loads((run / "config.json").read_text())
    assert (
        cfg["tasks"] == ["countdown", "lcs"] and cfg["num_generations"] == 2 and cfg["steps"] == 1
    )  # CLI over YAML
    assert cfg["tiny_size"] == "nano" and cfg["verbose"] is True
    assert "[step 1]" in err


# ---------------------------------------------------------------------------------- data parallel


@pytest.mark.slow
def test_two_processes_with_accelerate_launch(tmp_path):
    run = tmp_path / "ddp"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # In a session of its own: if the run hangs, the launcher and both ranks are killed together
    # (killing the launcher alone would leave the ranks running after the test).
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("accelerate")), "launch", "--multi_gpu", "--num_processes", "2",
         "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "axiom_rl", "train",
         "--model", "tiny", "--tiny-size", "nano", "--task", "countdown", "--device", "cpu", "--steps", "2",
         "--prompts-per-step", "2", "--num-generations", "2", "--max-completion-length", "8", "--output-dir", str(run)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        _, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        pytest.fail(f"two ranks did not finish in 300 s (a hang at exit?):\n{stderr[-3000:]}")
    assert proc.returncode == 0, stderr[-3000:]
    assert "2 process(es)" in (run / "train.log").read_text()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["world_size"] == 2 and r["completions"] == 2 * 2 * 2 for r in rows)
    assert (run / "final_model/model.safetensors").exists()
    # Its checkpoint holds two problem streams, each with its own share: one process cannot resume it.
    with pytest.raises(UserError, match="written by 2 process\\(es\\), not 1; resume with as many"):
        train(TrainConfig(output_dir=str(run), resume=True, steps=3, tiny_size="nano", prompts_per_step=2,
                          num_generations=2, max_completion_length=8, device="cpu"))  # fmt: skip


TRAIN_CONFIGS = sorted(p for p in (REPO / "configs").glob("*.yaml") if not p.name.endswith("-sft.yaml"))


@pytest.mark.parametrize("path", TRAIN_CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_are_valid(path, monkeypatch):
    from axiom_rl.config import build_config
    from axiom_rl.train import plan as planning

    cfg = build_config(TrainConfig, path)
    # Hub models cannot be fetched here: check everything else the same way a run would.
    monkeypatch.setattr(
        planning, "check_model_spec", lambda model, size: "tiny" if model == "tiny" else "hub"
    )
    plan = planning.plan_run(cfg)
    assert plan.tasks and cfg.steps >= 1


def test_the_cpu_recipe_runs_its_two_configs_in_order(tmp_path, monkeypatch, capsys):
    """configs/tiny-cpu-sft.yaml then configs/tiny-cpu.yaml, as their comments say to run them
    (a few steps each): the second finds the first's model where the first wrote it."""
    monkeypatch.chdir(tmp_path)
    sft_config, train_config = REPO / "configs/tiny-cpu-sft.yaml", REPO / "configs/tiny-cpu.yaml"
    assert "--output-dir runs/tiny-sft" in sft_config.read_text()
    assert main(["sft", "--config", str(sft_config), "--steps", "2", "--output-dir", "runs/tiny-sft"]) == 0
    assert main(["train", "--config", str(train_config), "--steps", "2", "--output-dir", "runs/tiny"]) == 0
    assert (
        json.loads((tmp_path / "runs/tiny/config.json").read_text())["model"] == "runs/tiny-sft/final_model"
    )
    assert (tmp_path / "runs/tiny/final_model/model.safetensors").exists()


def test_a_run_with_nothing_to_learn_from_says_so_once(tmp_path):
    """A random model on Countdown never earns a reward: after STALL_STEPS rollouts of all-zero
    advantages the user is told why, once; a task whose rewards vary within groups says nothing."""
    from axiom_rl.train.grpo import STALL_STEPS

    said: list[str] = []
    flat = small(tmp_path, tasks=["countdown"], steps=STALL_STEPS + 2, max_completion_length=4)
    train(flat, say=said.append)
    warnings = [m for m in said if m.startswith("warning:")]
    assert len(warnings) == 1 and "never earns a reward" in warnings[0] and "axiom-rl sft" in warnings[0]
    assert (
        sum("nothing to learn from" in line for line in (tmp_path / "run/train.log").read_text().splitlines())
        == 1
    )

    said.clear()
    train(small(tmp_path, steps=STALL_STEPS + 2, output_dir=str(tmp_path / "letters")), say=said.append)
    assert not any(m.startswith("warning:") for m in said)


def test_prompts_cut_to_max_prompt_length_are_reported(tmp_path):
    """A prompt longer than max_prompt_length loses its beginning (the task statement, first):
    training says so once, on the console and in train.log, and so does an evaluation; prompts
    that fit say nothing."""
    from axiom_rl.config import EvalConfig
    from axiom_rl.eval.evaluate import evaluate
    from axiom_rl.rollout import encode_prompts

    tokenizer = load_policy("tiny", tiny_size="nano", need_reference=False).tokenizer
    ids, cut = encode_prompts(tokenizer, ["abcdef", "abc", "abcdefgh"], 4)
    assert cut == 2 and [len(r) for r in ids] == [4, 3, 4] and tokenizer.decode(ids[0]) == "cdef"

    said: list[str] = []
    train(small(tmp_path, steps=3, max_prompt_length=8), say=said.append)
    message = (
        "at step 1, 2 of 2 prompts were longer than max_prompt_length (8 tokens) and lost their beginning"
    )
    assert [m for m in said if "max_prompt_length" in m] == [f"warning: {message}; raise --max-prompt-length"]
    assert sum(message in line for line in (tmp_path / "run/train.log").read_text().splitlines()) == 1

    options = dict(tiny_size="nano", tasks=["countdown"], count=3, max_completion_length=4)
    said.clear()
    evaluate(EvalConfig(**options, max_prompt_length=8, db=str(tmp_path / "a.db")), say=said.append)
    assert said == ["warning: 3 of 3 prompts were longer than max_prompt_length (8 tokens) and lost their "
                    "beginning; raise --max-prompt-length"]  # fmt: skip
    said.clear()
    evaluate(EvalConfig(**options, db=str(tmp_path / "b.db")), say=said.append)
    train(small(tmp_path, steps=1, output_dir=str(tmp_path / "fits")), say=said.append)
    assert said == []


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_weights_are_updated_through_float32_masters(dtype):
    """AdamW straight on bf16 weights rounds most small updates away, and on fp16 its second
    moment underflows to 0 (NaN or wrong-sized steps). make_optimizer gives half-precision
    parameters float32 masters: they follow float32 AdamW exactly (same gradients, a scheduler's
    learning rate included), and the model holds them rounded."""
    from axiom_rl.train.master_weights import MasterWeightOptimizer
    from axiom_rl.train.optim import make_optimizer

    gen = torch.Generator().manual_seed(0)
    start = torch.randn(2000, generator=gen) * 0.02
    half = torch.nn.Parameter(start.to(dtype))
    full = torch.nn.Parameter(half.detach().float().clone())
    opt, reference = make_optimizer([half], 1e-5, 0.01), make_optimizer([full], 1e-5, 0.01)
    assert isinstance(opt, MasterWeightOptimizer) and not isinstance(reference, MasterWeightOptimizer)
    schedules = [
        torch.optim.lr_scheduler.LambdaLR(o, lambda step: 1.0 / (1 + step)) for o in (opt, reference)
    ]
    for _ in range(5):
        grad = (torch.randn(2000, generator=gen) * 1e-5).to(dtype)
        half.grad, full.grad = grad, grad.float()
        opt.step()
        reference.step()
        for schedule in schedules:
            schedule.step()
    assert torch.equal(opt.masters[0], full.detach())
    assert torch.equal(half.detach(), full.detach().to(dtype))
    assert bool((opt.masters[0] != start.to(dtype).float()).all())  # every update kept, if below rounding

    # A checkpoint keeps the masters, not their rounding, and the learning rate the scheduler set
    # for the next step (a restored scheduler does not set it again: LambdaLR's starts at 1.0).
    copy = torch.nn.Parameter(half.detach().clone())
    restored = make_optimizer([copy], 1e-5, 0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(restored, lambda step: 1.0 / (1 + step))
    saved = io.BytesIO()
    torch.save((opt.state_dict(), schedules[0].state_dict()), saved)  # as a checkpoint: no shared tensors
    optimizer_state, schedule_state = torch.load(io.BytesIO(saved.getvalue()), weights_only=False)
    restored.load_state_dict(optimizer_state)
    schedule.load_state_dict(schedule_state)
    assert torch.equal(restored.masters[0], opt.masters[0])
    grad = (torch.randn(2000, generator=gen) * 1e-5).to(dtype)
    for p, o in ((half, opt), (copy, restored)):
        p.grad = grad
        o.step()
    assert torch.equal(restored.masters[0], opt.masters[0]) and torch.equal(copy, half)


def test_a_file_stream_gives_every_problem_once_per_pass_and_restores_its_place():
    from axiom_rl.train.problems import FileProblemStream

    problems = generate_problems("countdown", 1, 5, split="eval")
    stream = FileProblemStream(problems, seed=0)
    passes = [[p.id for p in stream.take(5)] for _ in range(3)]
    assert all(sorted(ids) == sorted(p.id for p in problems) for ids in passes)
    assert len({tuple(ids) for ids in passes}) > 1  # reshuffled between passes
    restored = FileProblemStream(problems, seed=0)
    restored.load_state_dict(FileProblemStream(problems, seed=0).state_dict() | {"given": 7})
    replay = FileProblemStream(problems, seed=0)
    replay.take(7)
    assert [p.id for p in restored.take(6)] == [p.id for p in replay.take(6)]
    assert [p.id for p in FileProblemStream(problems, seed=1).take(5)] != passes[0]


def test_data_parallel_ranks_draw_disjoint_shares_of_the_problems():
    """Each of 2 processes draws its own share: before, every rank of a one-task run trained on
    the very same problems, step after step. A single process draws what it always did."""
    from axiom_rl.train.problems import FileProblemStream, ProblemStream

    one = ProblemStream(["countdown"], [1], seed=0)
    ranks = [ProblemStream(["countdown"], [1], seed=0, rank=r, world=2) for r in (0, 1)]
    first, second = ([p.id for p in s.take(6)] for s in ranks)
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(p.id for p in one.take(12))  # together: the one sequence
    mixed = [ProblemStream(["countdown", "lcs"], [1, 2], seed=0, rank=r, world=2) for r in (0, 1)]
    assert not {p.id for p in mixed[0].take(20)} & {p.id for p in mixed[1].take(20)}
    restored = ProblemStream(["countdown", "lcs"], [1, 2], seed=0, rank=1, world=2)
    restored.load_state_dict(mixed[1].state_dict())
    assert [p.id for p in restored.take(5)] == [p.id for p in mixed[1].take(5)]

    problems = generate_problems("lcs", 1, 10)
    shares = [FileProblemStream(problems, seed=0, rank=r, world=2) for r in (0, 1)]
    for _ in range(3):  # every pass: the two shares split the file between them
        a, b = ([p.id for p in share.take(5)] for share in shares)
        assert sorted(a + b) == sorted(p.id for p in problems)
    few = [FileProblemStream(problems[:1], seed=0, rank=r, world=2) for r in (0, 1)]
    assert [p.id for p in few[1].take(2)] == [problems[0].id] * 2  # fewer problems than ranks


def test_training_on_a_problems_file_draws_only_its_problems_and_resumes_exactly(tmp_path, capsys):
    """--problems-file: an imported benchmark or an export, drawn in a seeded order; a resumed run
    logs what an uninterrupted one does. Options that choose generated problems are refused."""
    problems = tmp_path / "p.jsonl"
    assert main(["problems", "export", "--task", "countdown", "--count", "6", "--out", str(problems)]) == 0
    ids = {json.loads(line)["id"] for line in problems.read_text().splitlines()}
    options = dict(tasks=["countdown"], problems_file=str(problems), steps=4)
    straight = train(small(tmp_path, **options, output_dir=str(tmp_path / "a")))
    train(small(tmp_path, **dict(options, steps=2), output_dir=str(tmp_path / "b")))
    train(small(tmp_path, **options, output_dir=str(tmp_path / "b"), resume=True))
    rows = [json.loads(line) for line in (tmp_path / "b/metrics.jsonl").read_text().splitlines()]
    assert strip_timing(rows) == strip_timing(straight.metrics)
    drawn = [
        json.loads(line)["problem_id"] for line in (tmp_path / "a/samples.jsonl").read_text().splitlines()
    ]
    assert set(drawn) <= ids and len(set(drawn)) > 1
    card = json.loads((tmp_path / "a/final_model/axiom_rl.json").read_text())
    assert (card["tasks"], card["difficulties"]) == (["countdown"], [1])
    capsys.readouterr()
    for extra in (["--task", "countdown"], ["--difficulty", "2"], ["--all"]):
        code = main(["train", "--problems-file", str(problems), *extra, "--output-dir", str(tmp_path / "c")])
        err = capsys.readouterr().err
        assert code == 2 and "cannot be used with --problems-file" in err, (extra, err)
    assert not (tmp_path / "c").exists()


def test_fp16_loss_scaling_keeps_the_gradients_that_fp16_would_flush():
    """A loss the size of a mean over 4,096 tokens: in fp16 its activation gradients fall below
    fp16's range and the LoRA gradients come out wrong; scaled by 2^16 for backward and unscaled
    after (clip_unscale_step), they match float32's to fp16's forward precision."""
    from axiom_rl.train.loss_scale import LossScale, clip_unscale_step

    def lora_grads(dtype: str, scale: LossScale) -> dict[str, torch.Tensor]:
        policy = load_policy(
            "tiny", tiny_size="nano", finetune="lora", dtype=dtype, device="cpu", need_reference=False
        )
        with torch.no_grad():  # the same non-zero adapter in both precisions (a fresh B is 0)
            for i, (_, p) in enumerate(n for n in policy.model.named_parameters() if "lora_" in n[0]):
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.05)
        gen = torch.Generator().manual_seed(0)
        batch = build_batch(
            [torch.randint(3, 250, (12,), generator=gen).tolist() for _ in range(8)],
            [torch.randint(3, 250, (16,), generator=gen).tolist() for _ in range(8)],
            policy.tokenizer.pad_token_id,
            policy.device,
        )
        logprobs, _ = completion_logprobs(policy.model, batch)
        advantages = torch.randn(8, generator=gen)[:, None]
        loss = -(logprobs * advantages * batch.completion_mask).sum() / batch.completion_mask.sum() / 4096
        (loss * scale.value).backward()
        params = policy.trainable_parameters
        _, stepped = clip_unscale_step(torch.optim.SGD(params, lr=0.0), params, scale, max_norm=0.0)
        assert stepped
        return {n: p.grad.float() for n, p in policy.model.named_parameters() if p.requires_grad}

    def error(grads: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
        return float(sum((grads[n] - reference[n]).norm() ** 2 for n in reference) ** 0.5) / float(
            sum(r.norm() ** 2 for r in reference.values()) ** 0.5
        )

    reference = lora_grads("fp32", LossScale(enabled=False))
    assert error(lora_grads("fp16", LossScale(enabled=False)), reference) > 0.2
    assert error(lora_grads("fp16", LossScale(enabled=True)), reference) < 0.02


def test_the_loss_scale_halves_on_overflow_and_grows_back():
    from axiom_rl.train.loss_scale import LossScale

    scale = LossScale(enabled=True, initial=1024.0, growth_interval=3)
    scale.update(finite=False)
    assert scale.value == 512.0
    for _ in range(3):
        scale.update(finite=True)
    assert scale.value == 1024.0 and scale.good_steps == 0
    scale.update(finite=True)
    restored = LossScale(enabled=True)
    restored.load_state_dict(scale.state_dict())
    assert (restored.value, restored.good_steps) == (1024.0, 1)
    off = LossScale(enabled=False)
    off.update(finite=False)
    assert off.value == 1.0


def test_groups_share_their_prompt_pass_where_it_pays():
    """On a CPU each group's prompt runs once in the training passes; elsewhere (an H100 measured
    it slower) every row's prompt runs, unless the switch says otherwise."""
    from axiom_rl.train import grpo

    batch = build_batch([[5, 6]] * 2, [[7], [8]], 0, torch.device("cpu"))
    on_meta = TokenBatch(*(t.to("meta") for t in dataclasses.astuple(batch)))
    cfg = TrainConfig()
    assert grpo.share_prompt_passes(batch, cfg) and not grpo.share_prompt_passes(on_meta, cfg)
    off = TrainConfig(speed={"share_prompt_passes": False})
    assert not grpo.share_prompt_passes(batch, off)


@pytest.mark.parametrize("max_norm", [0.05, 1e9, math.inf, float("nan")])
def test_gradient_clipping_is_torch_s_bit_for_bit_and_leaves_unclipped_gradients_alone(max_norm):
    """clip_grad_norm (what every step clips with) gives clip_grad_norm_'s norm and gradients, bit
    for bit, whether it clips or not; where it does not (the coefficient is 1 or more), no
    gradient is written to at all (torch multiplies each by 1.0)."""
    from axiom_rl.train.loss_scale import clip_grad_norm

    model = build_tiny_model("nano")[0]
    gen = torch.Generator().manual_seed(3)
    grads = {n: torch.randn(p.shape, generator=gen) * 0.01 for n, p in model.named_parameters()}
    grads["lm_head.weight"] = None  # a parameter without a gradient is left out
    results = []
    for clip in (torch.nn.utils.clip_grad_norm_, clip_grad_norm):
        params = list(model.parameters())
        for p, g in zip(model.parameters(), grads.values()):
            p.grad = None if g is None else g.clone()
        versions = [p.grad._version for p in params if p.grad is not None]
        norm = float(clip(params, max_norm))
        written = [p.grad._version != v for p, v in zip([p for p in params if p.grad is not None], versions)]
        results.append((norm, [None if p.grad is None else p.grad.clone() for p in params], written))
    (torch_norm, torch_grads, _), (norm, ours, written) = results
    assert norm == torch_norm or (math.isnan(norm) and math.isnan(torch_norm))
    assert all(
        (a is None and b is None) or torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
        for a, b in zip(torch_grads, ours)
    )
    clipped = not norm < max_norm  # NaN clips (to NaN), as torch does
    assert all(written) if clipped else not any(written)
    if max_norm == 0.05:
        assert clipped and norm > max_norm


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
def test_every_schedule_warms_up_then_starts_at_the_peak(schedule):
    """transformers' "constant" ignores num_warmup_steps: the quickstart's SFT (constant, 50
    warm-up steps) trained at the peak rate from its first step."""
    from types import SimpleNamespace

    from axiom_rl.train.optim import make_scheduler

    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = make_scheduler(SimpleNamespace(lr_schedule=schedule, warmup_steps=4, steps=20), optimizer)
    rates = []
    for _ in range(6):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates[:5] == pytest.approx([0.0, 0.025, 0.05, 0.075, 0.1])  # linear warm-up to the peak
    assert (rates[5] == pytest.approx(0.1)) == (schedule == "constant")  # then decays, unless constant


# ------------------------------------------------------------------------- killed and preempted

KILLABLE = ["--model", "tiny", "--tiny-size", "nano", "--task", "countdown", "--steps", "8", "--prompts-per-step",
            "2", "--num-generations", "2", "--max-completion-length", "6", "--save-every", "10"]  # fmt: skip


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _kill_after_rows(run: Path, rows: int, sig: int) -> subprocess.CompletedProcess:
    """A real `axiom-rl train` process, sent `sig` once its metrics.jsonl holds `rows` rows."""
    proc = subprocess.Popen([sys.executable, "-m", "axiom_rl", "train", *KILLABLE, "--output-dir", str(run)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        metrics = run / "metrics.jsonl"
        if metrics.exists() and len(metrics.read_text().splitlines()) >= rows:
            proc.send_signal(sig)
            break
        time.sleep(0.05)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _same_run(a: list[dict], b: list[dict]) -> None:
    """The same steps with the same figures (timings aside)."""
    figures = ("step", "loss", "reward_mean", "accuracy", "kl", "grad_norm", "completion_len_mean")
    assert [[r[k] for k in figures] for r in a] == [[r[k] for k in figures] for r in b]


@pytest.mark.slow
def test_killed_before_its_first_checkpoint_a_run_resumes_and_is_the_run_it_would_have_been(tmp_path):
    """SIGKILL after the third of eight steps, with a checkpoint every ten: --resume was refused
    ("no checkpoint") and a fresh run too ("already holds a run"): a dead end."""
    from axiom_rl.cli import main

    whole = tmp_path / "whole"
    assert main(["train", *KILLABLE, "--output-dir", str(whole)]) == 0
    run = tmp_path / "killed"
    killed = _kill_after_rows(run, 3, signal.SIGKILL)
    assert (
        killed.returncode == -signal.SIGKILL and len(_rows(run)) >= 3 and not (run / "checkpoints").exists()
    )
    assert main(["train", *KILLABLE, "--output-dir", str(run), "--resume"]) == 0
    _same_run(_rows(run), _rows(whole))  # the first attempt's rows dropped, every step once
    assert (run / "final_model" / "model.safetensors").read_bytes() == (
        whole / "final_model" / "model.safetensors"
    ).read_bytes()


@pytest.mark.slow
def test_sigterm_checkpoints_says_how_to_resume_and_the_resume_is_exact(tmp_path):
    """A scheduler's preemption: SIGTERM acted like SIGKILL, losing every step since the last save."""
    from axiom_rl.cli import main

    whole = tmp_path / "whole"
    assert main(["train", *KILLABLE, "--output-dir", str(whole)]) == 0
    run = tmp_path / "preempted"
    stopped = _kill_after_rows(run, 3, signal.SIGTERM)
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    assert "SIGTERM: stopping after this step, with a checkpoint" in stopped.stderr
    assert f"resume with: axiom-rl train --resume --output-dir {run}" in stopped.stderr
    done = len(_rows(run))
    assert 3 <= done < 8 and (run / "checkpoints" / f"step-{done}").is_dir()
    assert main(["train", *KILLABLE, "--output-dir", str(run), "--resume"]) == 0
    _same_run(_rows(run), _rows(whole))


def test_what_a_writer_killed_mid_write_left_is_removed_when_the_run_starts_again(tmp_path):
    """A kill during a checkpoint or final-model write left a hidden temporary that nothing
    removed (11 of 18 random kills landed in one). Those the last holder left go when the next
    one holds the directory; the run's own files stay."""
    run = tmp_path / "run"
    train(small(tmp_path, steps=2, save_every=1))
    leftovers = [run / ".final_model.k2j3.tmp", run / "checkpoints" / ".step-3.a8f1.tmp",
                 run / ".metrics.jsonl.x9.tmp", run / "checkpoints" / ".step-2.q1.old"]  # fmt: skip
    for path in leftovers:
        if path.suffix == ".tmp" and "jsonl" in path.name:
            path.write_text("half a line")
        else:
            path.mkdir()
            (path / "model.safetensors").write_bytes(b"\0" * 1000)
    train(small(tmp_path, steps=3, save_every=1, resume=True))
    assert not any(path.exists() for path in leftovers)
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [
        1,
        2,
        3,
    ]
    assert (run / "final_model" / "model.safetensors").exists() and (run / "checkpoints" / "step-3").is_dir()


def test_a_resume_drops_only_the_lines_that_cannot_be_rows(tmp_path):
    """One torn line in metrics.jsonl made resume cut the file there: steps [1, ?, 3, 4, 5] became
    [1, 6, 7]. Now only the torn line (and bytes that are not UTF-8, and non-objects) go."""
    run = tmp_path / "run"
    train(small(tmp_path, steps=4, save_every=2))  # checkpoints at 2 and 4
    metrics = run / "metrics.jsonl"
    lines = metrics.read_bytes().splitlines()
    damaged = [lines[0], lines[1][:20], lines[2], b"\xff\xfe not utf-8", b"[1, 2]", lines[3]]
    metrics.write_bytes(b"\n".join(damaged) + b"\n")
    train(small(tmp_path, steps=6, save_every=2, resume=True))
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == [1, 3, 4, 5, 6]  # step 2's row was the torn one; 3 and 4 survive it
    assert "metrics.jsonl has no row for step(s) 2 (lost in a crash" in (run / "train.log").read_text()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda run: (run / "final_model" / "axiom_rl.json").write_text("[1, 2]"),
            "is not a model card (a JSON object)",
        ),
        (
            lambda run: (run / "final_model" / "axiom_rl.json").write_bytes(b"{\xff"),
            "is not a readable model card",
        ),
    ],
)
def test_a_damaged_model_card_is_one_line(tmp_path, capsys, damage, message):
    from axiom_rl.cli import main

    run = tmp_path / "run"
    train(small(tmp_path, steps=1))
    damage(run)
    code = main(["eval", "--model", str(run / "final_model"), "--task", "test_letters", "--count", "1",
                 "--max-completion-length", "2", "--db", str(tmp_path / "r.db")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_resume_whose_config_json_is_a_directory_is_one_line(tmp_path, capsys):
    from axiom_rl.cli import main

    run = tmp_path / "run"
    train(small(tmp_path, steps=1, save_every=1))
    (run / "config.json").unlink()
    (run / "config.json").mkdir()
    code = main(["train", "--output-dir", str(run), "--resume", "--steps", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "is not a readable run config" in err and len(err.strip().splitlines()) == 1, err


def test_a_bit_flipped_weight_file_is_refused_on_resume(tmp_path, capsys):
    """A weight file of the right size with one bit flipped loaded without complaint: the run
    went on from weights it never had. Checkpoints record each file's sha256."""
    from axiom_rl.cli import main

    run = tmp_path / "run"
    train(small(tmp_path, steps=2, save_every=1))
    weights = run / "checkpoints" / "step-2" / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) - 100] ^= 0x01  # inside the last tensor's data: still a valid file
    weights.write_bytes(bytes(data))
    metrics_before = (run / "metrics.jsonl").read_bytes()
    code = main(["train", "--output-dir", str(run), "--resume", "--steps", "3"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "step-2: its model/model.safetensors does not match its checksum (damaged on disk)" in err
    assert (run / "metrics.jsonl").read_bytes() == metrics_before  # nothing rewritten


def test_an_edited_trainer_state_is_one_line(tmp_path, capsys):
    """Valid JSON with its keys gone raised a KeyError from deep in the resume."""
    from axiom_rl.cli import main

    run = tmp_path / "run"
    train(small(tmp_path, steps=2, save_every=1))
    (run / "checkpoints" / "step-2" / "trainer_state.json").write_text('{"note": "edited"}')
    code = main(["train", "--output-dir", str(run), "--resume", "--steps", "3"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert (
        "step-2: its trainer_state.json is not a trainer state (no step); move it aside to resume from step-1"
        in err
    )


def test_a_checkpoint_whose_model_directory_is_gone_is_named_as_damaged(tmp_path, capsys):
    """Without model/ a checkpoint was called "another architecture" (nothing loaded, so every
    weight was missing), which sent the user to the wrong options."""
    from axiom_rl.cli import main

    run = tmp_path / "run"
    train(small(tmp_path, steps=2, save_every=1))
    shutil.rmtree(run / "checkpoints" / "step-2" / "model")
    for listed in (True, False):  # with its checksums, and as a checkpoint written before them
        if not listed:
            (run / "checkpoints" / "step-2" / CHECKSUMS).unlink()
        assert main(["train", "--output-dir", str(run), "--resume", "--steps", "3"]) == 2
        err = capsys.readouterr().err
        assert "step-2: its model/ is missing; move it aside to resume from step-1" in err, err
        assert "architecture" not in err and len(err.strip().splitlines()) == 1


def test_a_file_in_a_checkpoint_s_place_is_refused_before_a_step_is_trained(tmp_path, capsys):
    """It was refused only when the resumed run came to save that step, after retraining from the
    older checkpoint and rewriting the metrics."""
    from axiom_rl.cli import main

    run = tmp_path / "run"
    train(small(tmp_path, steps=2, save_every=1))
    shutil.rmtree(run / "checkpoints" / "step-2")
    (run / "checkpoints" / "step-2").write_text("not a checkpoint")
    before = files_in(run)
    assert main(["train", "--output-dir", str(run), "--resume", "--steps", "3"]) == 2
    assert (
        "checkpoints/step-2 is not a checkpoint directory; move it aside to resume" in capsys.readouterr().err
    )
    assert files_in(run) == before


def test_a_resume_with_only_the_final_model_to_write_says_so(tmp_path, capsys):
    """A run killed while writing its final model resumes to write just that: the summary said
    "last reward nan, accuracy nan", and the checkpoint it had loaded was written again."""
    from axiom_rl.cli import main

    run = tmp_path / "run"
    train(small(tmp_path, steps=2, save_every=1))
    shutil.rmtree(run / "final_model")
    saved = (run / "checkpoints" / "step-2" / "trainer_state.json").stat().st_mtime_ns
    assert main(["train", "--output-dir", str(run), "--resume"]) == 0
    err = capsys.readouterr().err
    assert "done: all 2 steps were trained before; wrote the final model" in err and "nan" not in err, err
    assert (run / "final_model" / "model.safetensors").exists()
    assert (run / "checkpoints" / "step-2" / "trainer_state.json").stat().st_mtime_ns == saved


@pytest.mark.parametrize("command", ["train", "sft"])
def test_a_stop_right_after_a_periodic_save_writes_that_checkpoint_once(tmp_path, command):
    """Ctrl-C during the step that a periodic save ends wrote the same checkpoint twice (a 1.7B
    model's takes minutes)."""

    def interrupt_at_step_2(step, total, row):
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, handled by the run's StopRequest

    if command == "train":
        result = train(small(tmp_path, steps=4, save_every=2), progress=interrupt_at_step_2)
        assert result.stopped_early and result.steps == 2
    else:
        cfg = SFTConfig(model="tiny", tiny_size="nano", tasks=["countdown"], steps=4, batch_size=2, save_every=2,
                        output_dir=str(tmp_path / "run"))  # fmt: skip
        with pytest.raises(KeyboardInterrupt):  # SFTStopped
            sft(cfg, progress=interrupt_at_step_2)
    log = (tmp_path / "run" / "train.log").read_text()
    assert log.count("checkpoint at step 2") == 1, log
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-2"]


def test_a_run_killed_before_it_wrote_its_config_is_started_again_without_resume(tmp_path, capsys):
    """Killed while it loaded (before its directory held a config), --resume has nothing to read:
    it says to start the run again, and that command is accepted there."""
    from axiom_rl.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").touch()  # what a process killed right after taking the directory leaves
    assert main(["train", "--resume", "--output-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "no run began there; start it with the run's own options, without --resume" in err, err
    assert main(["train", *KILLABLE, "--steps", "1", "--output-dir", str(run)]) == 0  # the last --steps wins
    assert _rows(run)[-1]["step"] == 1
