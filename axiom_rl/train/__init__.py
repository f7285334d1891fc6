"""Training: the GRPO loop (grpo.py), SFT (sft.py), and what they share."""
