"""The or_debug task: infeasible optimization models to diagnose and repair (task.py says how
they are made and scored; docs/problems.md gives the answer format and rewards)."""

from .task import ORDebug

__all__ = ["ORDebug"]
