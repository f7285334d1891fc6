"""The GRPO family as pure tensor functions (DESIGN.md's API; docs/algorithms.md for the math).

    from axiom_rl.algorithms import ADVANTAGES, LOSSES, compute_advantages, policy_loss

Each registry maps a name to one function with one signature, so adding a variant is one
decorated function and one test, and the trainer never branches on a name.
"""

from .advantages import (
    ADVANTAGES,
    AdvantageResult,
    Estimator,
    Groups,
    KalmanBaseline,
    compute_advantages,
    register_advantage,
    step_advantages,
    zero_variance_groups,
)
from .aggregate import AGGREGATIONS, register_aggregation
from .kl import KL_ESTIMATORS, register_kl
from .losses import (
    LOSSES,
    clipped_surrogate_loss,
    decoupled_regularised_loss,
    entropy_from_logits,
    loss_options,
    policy_loss,
    register_loss,
    regroupable,
)

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "LOSSES",
    "AdvantageResult",
    "Estimator",
    "Groups",
    "KalmanBaseline",
    "clipped_surrogate_loss",
    "compute_advantages",
    "decoupled_regularised_loss",
    "entropy_from_logits",
    "loss_options",
    "policy_loss",
    "register_advantage",
    "register_aggregation",
    "register_kl",
    "register_loss",
    "regroupable",
    "step_advantages",
    "zero_variance_groups",
]
