"""The original experiments as one-command recipes (`axiom-rl experiment NAME`).

    loop-validation     a few GRPO steps, each stage of the loop checked, the run directory listed
    hard-problems       SFT without edit distance and coin change, GRPO on them, forgetting, the
                        distillation arm and the more-SFT control
    token-budget-sweep  GRPO, Dr. GRPO and the hybrid across three completion budgets on Countdown,
                        with the correct / partial / failed counts, and graduated rewards

Each writes OUT/results.json (a stopped recipe resumes at its first unfinished arm), its runs,
and OUT/report.md with the tables it prints.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import UserError

if TYPE_CHECKING:  # the command line reads RECIPES at start-up: the recipes load when one runs
    from .common import RecipeOptions, Say

RECIPES = {
    "loop-validation": "loop_validation",
    "hard-problems": "hard_problems",
    "token-budget-sweep": "token_budget",
}


def run_recipe(name: str, opts: RecipeOptions, say: Say) -> tuple[str, bool]:
    """Run (or resume) a recipe: its tables as markdown, and whether its own checks passed."""
    if name not in RECIPES:
        raise UserError(f"unknown experiment {name!r}; choose from: {', '.join(RECIPES)}")
    opts.check()
    module = importlib.import_module(f".{RECIPES[name]}", __name__)
    runner: Callable[[RecipeOptions, Say], tuple[str, bool]] = module.run
    return runner(opts, say)


__all__ = ["RECIPES", "run_recipe"]
