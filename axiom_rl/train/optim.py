"""The optimizer and learning-rate schedule of every training run (GRPO and SFT)."""

from __future__ import annotations

from typing import Any

import torch

from .master_weights import MasterWeightOptimizer, needs_master_weights


def make_optimizer(params: list[torch.nn.Parameter], lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW, fused into one kernel where the parameters' device and dtype allow it (3x faster
    than the per-tensor loop PyTorch picks on a CPU: 4.7 vs 14.9 ms for 7M parameters). Over
    float32 master copies when the parameters are bf16 or fp16 (see master_weights.py)."""
    if needs_master_weights(params):
        return MasterWeightOptimizer(params, lambda masters: make_optimizer(masters, lr, weight_decay))
    try:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    except RuntimeError:  # a device or dtype without the fused kernel
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def make_scheduler(cfg: Any, optimizer: torch.optim.Optimizer) -> Any:
    """cfg.lr_schedule with cfg.warmup_steps of linear warm-up over cfg.steps (train's or sft's)."""
    from transformers import get_scheduler

    return get_scheduler(
        cfg.lr_schedule, optimizer, num_warmup_steps=cfg.warmup_steps, num_training_steps=cfg.steps
    )
