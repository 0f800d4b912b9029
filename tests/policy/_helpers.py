"""Small synthetic traces and a scripted policy, for the policy tests."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.policy.model import Action, Observation, ProblemSpec
from orchestrator.policy.simulator import SimResult
from orchestrator.policy.traces import Trace, ZoneSet


def zones(*rows: str, gap_s: float = 3600.0, prices: Sequence[Sequence[float] | None] | None = None) -> ZoneSet:
    """A zone set from strings of '1' (spot available) and '0', one string per zone."""
    traces = tuple(
        Trace(f"z{i}", gap_s, tuple(c == "1" for c in row),
              tuple(prices[i]) if prices is not None and prices[i] is not None else None)  # type: ignore[arg-type]
        for i, row in enumerate(rows)
    )
    return ZoneSet("test", traces)


def action_letters(res: SimResult) -> str:
    """The run's actions, one letter a tick (s: spot, o: on-demand, i: idle), from its kept log."""
    return "".join(r.action[0] for r in res.log or ())


class Scripted:
    """Plays a fixed list of actions (then repeats the last one); records what it was shown."""

    name = "scripted"

    def __init__(self, actions: Sequence[Action]) -> None:
        self.actions = list(actions)
        self.seen: list[Observation] = []
        self.history_seen: list[tuple[float, float]] = []

    def reset(self, spec: ProblemSpec, zones: int) -> None:
        self.seen = []
        self.history_seen = []

    def decide(self, obs: Observation) -> Action:
        self.seen.append(obs)
        # The history is a live view, valid during decide(): copy what the test looks at.
        self.history_seen.append((obs.history[0].seen_h, obs.history[0].up_h))
        return self.actions[min(obs.tick, len(self.actions) - 1)]
