"""axiom-rl: teach small language models new skills by RL from verified execution.

The Python API is the command line's own functions and configs (docs/python-api.md):

    from axiom_rl import TrainConfig, register_reward, train_grpo

    @register_reward("short")
    def short(problem, completion, verdict):
        return (verdict.status == "passed") * (1.0 if len(completion) < 200 else 0.5)

    result = train_grpo(TrainConfig(model="runs/sft/final_model", rewards="short", steps=50))

Names are imported when first used, so `import axiom_rl` loads neither torch nor transformers.
(`train_grpo` and `train_sft` are `axiom_rl.train.grpo.train` and `axiom_rl.train.sft.sft`:
`axiom_rl.train` is the package that holds them.)
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> (the module that defines it, its name there)
_API = {
    "TrainConfig": ("axiom_rl.config", "TrainConfig"),
    "SFTConfig": ("axiom_rl.config", "SFTConfig"),
    "EvalConfig": ("axiom_rl.config", "EvalConfig"),
    "train_grpo": ("axiom_rl.train.grpo", "train"),
    "train_sft": ("axiom_rl.train.sft", "sft"),
    "evaluate": ("axiom_rl.eval.evaluate", "evaluate"),
    "verify_files": ("axiom_rl.verify_files", "verify_files"),
    "generate_problems": ("axiom_rl.tasks", "generate_problems"),
    "register_reward": ("axiom_rl.rewards", "register_reward"),
    "register_component": ("axiom_rl.reward_stage", "register_component"),
    "register_source": ("axiom_rl.sources", "register_source"),
    "Problem": ("axiom_rl.types", "Problem"),
    "Verdict": ("axiom_rl.types", "Verdict"),
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'axiom_rl' has no attribute {name!r}")
    module, attribute = _API[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
