"""TRL's GRPOTrainer on axiom-rl's problems, with axiom-rl's verifier and rewards.

    python examples/trl_grpo.py --max-steps 2                        # the built-in model, on a CPU
    python examples/trl_grpo.py --model Qwen/Qwen2.5-0.5B-Instruct --tasks countdown,edit_distance \\
        --max-steps 200 --max-completion-length 512                  # a hub model, on a GPU

The problems are a `datasets.Dataset` (`to_dataset`, or `axiom-rl problems export --format hf`
and `datasets.load_from_disk`); the reward function is `VerifiedReward`, whose rewards are those
`axiom-rl verify` gives, code run in axiom-rl's sandbox (one pool for the whole run). TRL logs
them as rewards/axiom_rl/mean, with axiom_rl/pass_rate beside.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from axiom_rl.integrations.hf_datasets import to_dataset
from axiom_rl.integrations.trl import VerifiedReward
from axiom_rl.models.tiny import build_tiny_model
from axiom_rl.tasks import generate_problems, parse_task_list


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default="tiny", help="'tiny' (the built-in model), a hub name or a local path"
    )
    parser.add_argument("--tasks", default="countdown,edit_distance", help="comma-separated task names")
    parser.add_argument("--difficulty", type=int, default=1)
    parser.add_argument("--count", type=int, default=64, help="problems per task")
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=64)
    parser.add_argument("--rewards", default=None, help="a --rewards spec, e.g. code_execution:1,format:0.1")
    parser.add_argument("--output-dir", default="runs/trl-grpo")
    args = parser.parse_args()

    model, style = args.model, "full"
    if model == "tiny":  # TRL loads a model by name or path: the built-in one, saved
        model, style = str(Path(args.output_dir) / "tiny-model"), "compact"
        net, tokenizer = build_tiny_model("micro")
        net.save_pretrained(model)
        tokenizer.save_pretrained(model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    problems = [
        p
        for task in parse_task_list(args.tasks)
        for p in generate_problems(task, args.difficulty, args.count)
    ]
    # a chat model gets the prompt as a user message, through its chat template
    dataset = to_dataset(problems, style=style, conversational=bool(tokenizer.chat_template))
    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.num_generations,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
    )
    with VerifiedReward(args.rewards) as reward:
        trainer = GRPOTrainer(
            model=model, reward_funcs=[reward], args=config, train_dataset=dataset, processing_class=tokenizer
        )
        trainer.train()
    rewards = [h["rewards/axiom_rl/mean"] for h in trainer.state.log_history if "rewards/axiom_rl/mean" in h]
    print(f"{len(rewards)} steps; mean reward per step: {', '.join(f'{r:.3f}' for r in rewards)}")


if __name__ == "__main__":
    main()
