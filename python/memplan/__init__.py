"""memplan: plan the memory of a deep-learning training step (Python package)."""
