"""Evaluation: generate, verify, store every attempt in SQLite, summarise (pass@k, failures)."""
