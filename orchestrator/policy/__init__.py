"""Deadline-aware spot policies, the trace-driven simulator that replays them, and the offline optimum.

Modules: model (the problem's values), base (the SpotPolicy interface), policies (on-demand, greedy,
Uniform Progress), orch (orch's forecast policy), forecast (lifetimes and outages from run lengths), orch_v1
(the previous orch: UP with two provably cheaper edits), registry (names -> policies, policy files, entry
points), traces (trace files and zone sets), simulator, optimum (the DP floor), evaluate (many jobs over many
traces, for the CLI and the benchmark), recovery (the daemon's seam), live_history (the daemon's record as
the policies' history).
"""
