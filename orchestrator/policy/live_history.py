"""The daemon's facts as the policy's history: per place, ZoneStats built from the spot machines it recorded.

What the store knows of a place's spot is what the job's machines met there (``SpotRun``s: started, and ended
by a preemption or not):

* a machine's life is available time; one ended by a preemption (or its notice) is an ended available run of
  that length; one ended for another reason (finished, moved, stopped) is available time with no end seen;
* after a preemption the place had no spot for the job until its next machine there started: that gap is an
  ended outage; with no later machine there, the outage is in progress (the place is out) until the job's
  cool-down has passed, after which nothing is known of it (not counted);
* "some place has spot" (the set's history): the job had spot from a machine's start to its end; after a
  preemption, the set was out until the job's next spot machine started anywhere.

Nothing else is invented: time before a place's first machine is not observed. The simulator builds the same
values from its trace ticks (simulator.py); the policies read both alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.policy.model import ZoneStats
from orchestrator.recovery import SpotRun


def _hours(delta: timedelta) -> float:
    return max(delta.total_seconds() / 3600, 0.0)


@dataclass(frozen=True, slots=True)
class _Span:
    start: datetime
    end: datetime
    up: bool
    ended: bool      # the span's end was seen (a preemption ended an up span; a relaunch ended a down span)


def _spans(runs: Sequence[SpotRun], now: datetime, cooldown: timedelta) -> list[_Span]:
    """One place's (or the merged set's) runs as alternating available / out spans, oldest first."""
    spans: list[_Span] = []
    ordered = sorted(runs, key=lambda r: r.started_at)
    for i, run in enumerate(ordered):
        end = run.ended_at or now
        if spans and spans[-1].up and run.started_at <= spans[-1].end:
            # Overlapping machines (a gang, or a relaunch before the old one's end): one available span.
            last = spans.pop()
            spans.append(_Span(last.start, max(last.end, end), True, run.preempted and run.ended_at is not None))
        else:
            spans.append(_Span(run.started_at, end, True, run.preempted and run.ended_at is not None))
        if run.ended_at is None or not run.preempted:
            continue
        nxt = next((r.started_at for r in ordered[i + 1:] if r.started_at >= run.ended_at), None)
        if nxt is not None:
            spans.append(_Span(run.ended_at, nxt, False, True))
        else:
            # Out since the preemption; known only for the cool-down the daemon keeps the place out for.
            spans.append(_Span(run.ended_at, min(now, run.ended_at + cooldown), False, False))
    return spans


def stats_from(runs: Sequence[SpotRun], now: datetime, cooldown: timedelta) -> ZoneStats:
    """ZoneStats of one place (or, given every place's runs, of the set) from its recorded spot machines."""
    stats = ZoneStats()
    spans = _spans(runs, now, cooldown)
    for span in spans:
        hours = _hours(span.end - span.start)
        stats.seen_h += hours
        if span.up:
            stats.up_h += hours
        if span.ended:
            if span.up:
                stats.ended_up_runs += 1
                stats.ended_up_h += hours
            stats.record_run(span.up, hours)
    if spans:
        last = spans[-1]
        current = last.end >= now
        stats.available = last.up if current else True
        stats.streak_h = _hours(now - last.start) if current else 0.0
    return stats


def place_history(places: Sequence[str], runs: Sequence[SpotRun], now: datetime, cooldown: timedelta,
                  ) -> tuple[tuple[ZoneStats, ...], ZoneStats]:
    """Per place in ``places`` (in that order) its ZoneStats, and the set's ("some place has spot")."""
    per_place = tuple(stats_from([r for r in runs if r.place == p], now, cooldown) for p in places)
    return per_place, stats_from(list(runs), now, cooldown)
