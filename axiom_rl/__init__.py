"""axiom-rl: teach small language models new skills by RL from verified execution."""

__version__ = "0.1.0"
