"""Errors that are the user's to fix.

A `UserError` reaches the CLI as one line on stderr and exit code 2 (DESIGN.md: "Exit 0 on
success, 2 on a user error, 1 on an internal error"). Anything else is a bug of ours: exit 1
with a traceback.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable


class UserError(Exception):
    """A mistake in the user's input: unknown name, value out of range, unreadable file."""


def choose(kind: str, name: str, allowed: Iterable[str]) -> str:
    """Return `name` if it is one of `allowed`, else raise a UserError listing what exists."""
    allowed = sorted(allowed)
    if name not in allowed:
        raise UserError(f"unknown {kind} {name!r}; choose from: {', '.join(allowed)}")
    return name


def env_choice(variable: str, allowed: Iterable[str]) -> str:
    """The value of an environment variable that picks one of `allowed` (case and surrounding
    spaces ignored), "" where it is unset or empty, else a one-line UserError."""
    allowed = tuple(allowed)
    chosen = os.environ.get(variable, "").strip().lower()
    if chosen and chosen not in allowed:
        raise UserError(f"{variable}={chosen!r}: use one of {', '.join(allowed)}")
    return chosen


def at_least(*checks: tuple[str, float, float]) -> None:
    """Each (name, value, lowest allowed): a finite number no lower, else a one-line UserError
    (written so that NaN fails too: every comparison with NaN is False)."""
    for name, value, low in checks:
        if not (math.isfinite(value) and value >= low):
            raise UserError(f"{name} must be >= {low:g}, got {value}")


def positive(*checks: tuple[str, float]) -> None:
    """Each (name, value): a finite number above 0, else a one-line UserError."""
    for name, value in checks:
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"{name} must be > 0, got {value}")
