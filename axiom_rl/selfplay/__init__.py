"""Self-play in rounds: evaluate, find the weaknesses, make targeted problems (debug problems
with injected bugs among them), train, repeat (rounds.py); each round's report and the plot
across rounds (report.py)."""

from .rounds import SelfPlayConfig, run_selfplay

__all__ = ["SelfPlayConfig", "run_selfplay"]
