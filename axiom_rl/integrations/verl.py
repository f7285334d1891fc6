"""axiom-rl's verifier as verl's custom reward function.

Export problems as verl reads them, then point verl's config at this file:

    axiom-rl problems export --task countdown --difficulty 1-3 --count 1000 --format verl --out train.parquet
    # verl's config (ppo_trainer.yaml and the like):
    data.train_files=train.parquet
    custom_reward_function.path=<site-packages>/axiom_rl/integrations/verl.py
    custom_reward_function.name=compute_score

`compute_score` reads the problem back from `ground_truth` (the problem's JSON, which the export
writes in `reward_model.ground_truth`) and scores `solution_str`, the decoded response, as
`axiom-rl verify` would. Each verl reward worker process keeps one sandbox, started when its first
code problem arrives and closed at exit.
"""

from __future__ import annotations

# Absolute imports only: verl loads this file by its path (custom_reward_function.path), as a
# module outside any package.
from typing import Any

from axiom_rl.integrations.scoring import problem_from_json, process_scorer
from axiom_rl.types import PASSED


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None, **_: Any
) -> dict[str, Any]:
    """verl's custom reward function: {"score": the reward, "acc": 1.0 if every test passed,
    "passed", "total"}; verl logs the keys besides "score" as reward_extra_info."""
    problem = problem_from_json(ground_truth)
    scored = process_scorer().score([problem], [solution_str])[0]
    return {
        "score": scored.reward,
        "acc": float(scored.verdict.status == PASSED),
        "passed": scored.verdict.passed,
        "total": scored.verdict.total,
    }
