"""Sizing GPUs from the model: a training memory model (memory.py), the per-GPU search (search.py), the
planner hooks (planning.py) and software checks (compat.py). docs/fit.md has the formulas and sources."""
