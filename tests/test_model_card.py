"""Every saved model says what it is, how it was prompted and how to load it (README.md beside
the weights), and every run what produced it (config.json and axiom_rl.json: version, commit)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import axiom_rl
from axiom_rl.config import TrainConfig
from axiom_rl.tasks import generate_problems
from axiom_rl.tasks.prompts import format_prompt
from axiom_rl.train.grpo import train

ROOT = Path(__file__).resolve().parents[1]


def test_a_final_model_has_a_card_that_plain_transformers_can_follow(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = TrainConfig(model="tiny", tiny_size="nano", tasks=["countdown"], difficulty="2-3", steps=1,
                      prompts_per_step=2, num_generations=2, max_completion_length=4, save_every=0,
                      output_dir=str(tmp_path / "run"))  # fmt: skip
    train(cfg, say=lambda _: None)
    final = tmp_path / "run" / "final_model"
    card = (final / "README.md").read_text()
    assert "trained by reinforcement learning (GRPO) from verified execution from `tiny`" in card
    assert "the tasks countdown, difficulty 2-3" in card and "the `compact` prompt style" in card
    assert "axiom-rl eval --model THIS_DIRECTORY --task countdown --difficulty 2-3" in card
    # the example is the exact text the model was trained to continue, for a held-out problem
    shown = re.search(r"```+text\n(.*?)\n```+", card, re.S).group(1)  # type: ignore[union-attr]
    tokenizer = AutoTokenizer.from_pretrained(final)
    problem = generate_problems("countdown", 2, 1, seed=0, split="eval")[0]
    assert shown == format_prompt(problem, tokenizer, "compact", "auto")
    # and plain transformers loads and prompts the model as the card says
    model = AutoModelForCausalLM.from_pretrained(final)
    ids = tokenizer(shown, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=4, do_sample=True, temperature=1.0)
    assert out.shape[1] > ids.shape[1] and isinstance(tokenizer.decode(out[0, ids.shape[1] :]), str)
    parameters = sum(p.numel() for p in model.parameters())
    assert f"of {parameters:,} parameters" in card

    # what produced it: the version, and the checkout's commit where there is one
    made = json.loads((tmp_path / "run" / "config.json").read_text())["axiom_rl"]
    assert made == json.loads((final / "axiom_rl.json").read_text())["axiom_rl"]
    assert made["version"] == axiom_rl.__version__
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    in_checkout = head.returncode == 0 and Path(axiom_rl.__file__).resolve().is_relative_to(ROOT)
    assert made["commit"] == (head.stdout.strip() if in_checkout else None)
    assert f"axiom-rl {axiom_rl.__version__}, commit " in card


def test_a_resumed_run_sets_the_provenance_aside(tmp_path):
    """config.json's `axiom_rl` entry is no option: --resume reads the file back without it."""
    from axiom_rl.cli import main

    args = ["train", "--model", "tiny", "--tiny-size", "nano", "--task", "countdown", "--prompts-per-step", "2",
            "--num-generations", "2", "--max-completion-length", "4", "--save-every", "1",
            "--output-dir", str(tmp_path / "run")]  # fmt: skip
    assert main([*args, "--steps", "1"]) == 0
    assert "axiom_rl" in json.loads((tmp_path / "run" / "config.json").read_text())
    assert main([*args, "--steps", "2", "--resume"]) == 0
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 2
