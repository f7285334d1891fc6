"""Giving a model's modules forwards of axiom-rl's own, one module at a time.

The speed-ups of the training passes (cpu_matmul, activation_memory, rms_norm, rotary) each
replace the forward of the modules they know, on the model instance only: its class, and every
other model in the process, stay as transformers and peft wrote them.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any


def give_forwards(model: Any, forward_for: Callable[[Any], Callable[..., Any] | None]) -> int:
    """Bind `forward_for(module)` as the forward of each module of `model` it returns a function
    for (None: leave the module as it is); returns how many changed. A module that already has a
    forward of its own (an accelerate hook, a user's patch, an earlier call) keeps it, so calling
    this twice changes nothing the second time."""
    changed = 0
    for module in model.modules():
        if "forward" in vars(module):
            continue
        if (forward := forward_for(module)) is not None:
            module.forward = types.MethodType(forward, module)
            changed += 1
    return changed
