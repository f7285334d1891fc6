"""Algorithmic code tasks, one module per family."""
