"""Deadline-aware spot policies, the trace-driven simulator that replays them, and the offline optimum.

Modules: model (the problem's values), base (the SpotPolicy interface), policies (on-demand, greedy,
Uniform Progress), orch (orch's own policy), registry (names -> policies), traces (trace files and zone sets),
simulator, optimum (the DP floor), evaluate (many jobs over many traces, for the CLI and the benchmark).
"""
