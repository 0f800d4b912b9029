"""Budgets and spend arithmetic: pure values and decisions, no I/O."""
