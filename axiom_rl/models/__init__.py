"""Models: loading hub/local models with LoRA, and the built-in tiny model."""
