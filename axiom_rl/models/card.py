"""The README.md beside every saved model: what it is, the prompt it was trained on, how to load
and prompt it with plain transformers, and what produced it. axiom_rl.json holds the same facts
for axiom-rl to read back (load.py: read_model_card)."""

from __future__ import annotations

from typing import Any

from ..provenance import provenance

_METHODS = {"grpo": "reinforcement learning (GRPO) from verified execution", "sft": "supervised fine-tuning"}


def example_prompt(card: dict[str, Any], tokenizer: Any) -> str | None:
    """The exact text the model was trained to continue, for a held-out problem of its first task
    and lowest difficulty (None for a task without a generator: an imported benchmark's)."""
    from ..errors import UserError
    from ..tasks import generate_problems
    from ..tasks.prompts import format_prompt

    tasks, difficulties = card.get("tasks") or [], card.get("difficulties") or []
    if not tasks or not difficulties:
        return None
    try:
        problem = generate_problems(tasks[0], min(difficulties), 1, seed=0, split="eval")[0]
        return format_prompt(
            problem, tokenizer, card.get("prompt_style", "full"), card.get("chat_template", "auto")
        )
    except (UserError, KeyError, ValueError):
        return None


def _fence(text: str) -> str:
    """A fenced block that no run of backticks inside `text` can close."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}text\n{text}\n{ticks}"


def model_card_markdown(card: dict[str, Any], model: Any, tokenizer: Any) -> str:
    made = provenance()
    method = _METHODS.get(str(card.get("method", "")), "axiom-rl")
    tasks = ", ".join(map(str, card.get("tasks") or [])) or "(not recorded)"
    difficulties = card.get("difficulties") or []
    low, high = (min(difficulties), max(difficulties)) if difficulties else (None, None)
    levels = "(not recorded)" if low is None else str(low) if low == high else f"{low}-{high}"
    config = getattr(model, "config", None)
    architecture = ", ".join(getattr(config, "architectures", None) or []) or type(model).__name__
    parameters = sum(p.numel() for p in model.parameters()) if hasattr(model, "parameters") else 0
    commit = made["commit"] or "not from a git checkout"
    if made["modified"]:
        commit += " (with uncommitted changes)"
    lines = [
        "# A model trained by axiom-rl",
        "",
        f"- **What it is**: a {architecture} causal language model of {parameters:,} parameters, trained by {method}"
        + (f" from `{card['base']}`" if card.get("base") else "")
        + (" (the built-in model, randomly initialised)" if card.get("base") == "tiny" else "")
        + (f" ({card['sft_steps']} SFT steps)" if card.get("sft_steps") else "")
        + ".",
        f"- **What it learnt**: the tasks {tasks}, difficulty {levels} (`axiom-rl problems list` describes each).",
        f"- **Its prompt**: the `{card.get('prompt_style', 'full')}` prompt style"
        f"{', through the tokenizer chat template' if card.get('chat_template') == 'on' else ''}. The model "
        "continues the prompt with its answer; prompt it the same way.",
        f"- **Made by**: axiom-rl {made['version']}, commit {commit}.",
        "",
    ]
    prompt = example_prompt(card, tokenizer)
    if prompt is not None:
        lines += ["A prompt of the kind it was trained on (a held-out problem):", "", _fence(prompt), ""]
    lines += [
        "## Load and prompt it",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        'model = AutoModelForCausalLM.from_pretrained("THIS_DIRECTORY")',
        'tokenizer = AutoTokenizer.from_pretrained("THIS_DIRECTORY")',
        'ids = tokenizer(prompt, return_tensors="pt").input_ids  # prompt: as above',
        "out = model.generate(ids, max_new_tokens=64, do_sample=True, temperature=1.0)",
        "print(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))",
        "```",
        "",
        "or evaluate it on held-out problems, every attempt verified:",
        "",
        "```bash",
        f"axiom-rl eval --model THIS_DIRECTORY --task {','.join(map(str, card.get('tasks') or ['TASK']))}"
        + (f" --difficulty {levels}" if difficulties else "")
        + " --db results.db",
        "```",
        "",
    ]
    return "\n".join(lines)
