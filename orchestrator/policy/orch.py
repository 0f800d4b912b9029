"""orch's policy: Uniform Progress's progress line, made zone-aware and notice-aware.

Rules, in order (each with its reason):
1. Safety Net (as Uniform Progress, tick-discrete): idle or on on-demand with no room for two more overheads
   -> on-demand to the end; on spot with no room for one more -> keep it if its overhead is paid. Reason: a
   new spot instance needs one overhead for itself and one for the fall-back to on-demand if it is preempted;
   with those reserved, every deadline is met whatever the trace does.
2. Exploitation: on a live spot instance, stay. Reason: progress cannot be had cheaper.
3. Zone choice: among the zones with spot now (and no preemption notice), take the one with the best
   expected saving per hour, (1 - price) x the zone's observed availability (a Beta(1, 1) estimate from the
   zone's history so far). Reason: on a zone set the cheapest-and-most-available zone is the one least
   likely to cost another overhead soon; with one zone this is Uniform Progress's choice.
4. When the overhead fills a tick, a zone that the cloud has announced will be preempted at the next tick is
   never launched into. Reason: its instance would be billed for no progress.
5. Hysteresis: on on-demand, stay while behind the line at t + 2d (cp < ep(t + 2d)) or no zone has spot.
6. Taking risks: idle with a usable zone -> spot there.
7. Uniform progress: idle and behind the line (cp < ep(t)) -> on-demand; otherwise wait.

Measured against Uniform Progress on the public traces: see docs/policy.md (where it is not strictly
cheaper, the note says on which zone sets and by how much).
"""

from __future__ import annotations

from orchestrator.policy.model import Observation
from orchestrator.policy.policies import UniformProgressPolicy


def zone_score(obs: Observation, z: int) -> float:
    """Expected saving per hour of trying zone z: (1 - price) x estimated availability (Beta(1, 1) prior)."""
    h = obs.history[z] if obs.history else None
    avail = (h.up_h + 1.0) / (h.seen_h + 2.0) if h is not None else 0.5
    return (1.0 - obs.spot_prices[z]) * avail


def best_zone(obs: Observation) -> int | None:
    """The usable zone (spot now; no notice, if one tick could make no progress) with the best score; the lowest
    index on ties."""
    best: int | None = None
    best_score = 0.0
    doomed = bool(obs.notice) and obs.spec.overhead_h >= obs.gap_h
    for z, up in enumerate(obs.available):
        if not up or (doomed and obs.notice[z]):
            continue
        score = zone_score(obs, z)
        if best is None or score > best_score + 1e-12:
            best, best_score = z, score
    return best


class OrchPolicy(UniformProgressPolicy):
    """Uniform Progress's rules with orch's zone choice (see the module docstring for the rules and reasons)."""

    name = "orch"

    def choose_zone(self, obs: Observation) -> int | None:
        return best_zone(obs)
