"""The daemon's facts as the policy's history: per place, ZoneStats built from the spot machines it recorded.

What the store knows of a place's spot is what machines met there (``SpotRun``s: started, and ended by a
preemption or not): the job's own, and, fed by the daemon, every other job's of the fleet (same owner, same
GPU models, the last days: orchestrator/engine/recovery_facts.py). Machines of many jobs overlap, so:

* a place is available while ANY machine runs there: overlapping machines (of one job or of many) make one
  available span, from the first one's start to the end of the last one still running;
* that span ended by a preemption (an ended available run: a spot lifetime) only when the machine ending it
  last was preempted (or noticed): a preemption while another machine there survives it ends no
  availability; several machines preempted together end one span (one outage starts). A span whose last
  machine ended for another reason (finished, moved, stopped) is available time with no end seen;
* after a span ended by a preemption the place had no spot until the next machine started there (of any
  job): that gap is an ended outage; with no later machine there, the outage is in progress (the place is
  out) until the cool-down has passed, after which nothing is known of it (not counted). A machine starting
  at the very instant of the preemption leaves an outage of 0 h, not a continued span;
* "some place has spot" (the set's history): the same rules over the machines of all the given places.

Nothing else is invented: time before a place's first machine, and after a span no preemption ended, is not
observed. With one job's machines (which never overlap but for a move) this is what the job alone met. The
simulator builds the same values from its trace ticks (simulator.py); the policies read both alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.engine.recovery_policy import SpotRun
from orchestrator.policy.model import ZoneStats


def _hours(delta: timedelta) -> float:
    return max(delta.total_seconds() / 3600, 0.0)


@dataclass(frozen=True, slots=True)
class _Span:
    start: datetime
    end: datetime
    up: bool
    ended: bool      # the span's end was seen (a preemption ended an up span; a relaunch ended a down span)


def _blocks(runs: Sequence[SpotRun], now: datetime) -> list[tuple[datetime, datetime, bool]]:
    """The runs as available spans (start, end, ended by a preemption), oldest first: overlapping machines
    merged; the span ends with the last machine, and was ended by a preemption if that machine was."""
    blocks: list[tuple[datetime, datetime, bool]] = []
    for run in sorted(runs, key=lambda r: r.started_at):
        end = run.ended_at or now
        preempted = run.preempted and run.ended_at is not None
        if blocks:
            start, last_end, last_preempted = blocks[-1]
            # Overlapping: one span. Starting just as the span's last machine was preempted: a new span
            # after an outage of 0 h (the machine did not survive the preemption, it followed it).
            if run.started_at < last_end or (run.started_at == last_end and not last_preempted):
                if end > last_end:
                    blocks[-1] = (start, end, preempted)
                elif end == last_end:     # ended together: a preemption among them ends the span
                    blocks[-1] = (start, end, last_preempted or preempted)
                continue
        blocks.append((run.started_at, end, preempted))
    return blocks


def _spans(runs: Sequence[SpotRun], now: datetime, cooldown: timedelta) -> list[_Span]:
    """One place's (or the merged set's) runs as available / out spans, oldest first."""
    spans: list[_Span] = []
    blocks = _blocks(runs, now)
    for i, (start, end, preempted) in enumerate(blocks):
        spans.append(_Span(start, end, True, preempted))
        if not preempted:
            continue
        if i + 1 < len(blocks):
            spans.append(_Span(end, blocks[i + 1][0], False, True))
        else:
            # Out since the preemption; known only for the cool-down the daemon keeps the place out for.
            spans.append(_Span(end, min(now, end + cooldown), False, False))
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
    """Per place in ``places`` (in that order) its ZoneStats, and the set's ("some place has spot"). A machine
    given twice (the job's own record and the fleet's) counts once."""
    unique = list(dict.fromkeys(runs))
    by_place: dict[str, list[SpotRun]] = {}
    for run in unique:
        by_place.setdefault(run.place, []).append(run)
    per_place = tuple(stats_from(by_place.get(p, []), now, cooldown) for p in places)
    return per_place, stats_from(unique, now, cooldown)


class SharedHistory:
    """The fleet's history, built once per tick per (places, fleet runs) and shared by every job whose own
    machines are all among those runs: its history is then the fleet's alone (a machine given twice counts
    once). A job whose own record holds more (a machine older than the fleet's window, or ended since the
    fleet's read this tick) gets its own. The shared ZoneStats are read-only, as an Observation's are."""

    def __init__(self) -> None:
        self._now: datetime | None = None
        self._built: dict[tuple[tuple[str, ...], timedelta, int], _Built] = {}

    def history(self, places: Sequence[str], own: Sequence[SpotRun], fleet: tuple[SpotRun, ...], now: datetime,
                cooldown: timedelta) -> tuple[tuple[ZoneStats, ...], ZoneStats]:
        if not fleet:
            return place_history(places, own, now, cooldown)
        if now != self._now:
            self._built.clear()
            self._now = now
        key = (tuple(places), cooldown, id(fleet))
        built = self._built.get(key)
        if built is None or built.runs is not fleet:     # an id may be reused once its tuple is gone
            built = self._built[key] = _Built(fleet, frozenset(fleet), place_history(places, fleet, now, cooldown))
        if all(run in built.members for run in own):
            return built.history
        return place_history(places, (*own, *fleet), now, cooldown)


@dataclass(frozen=True, slots=True)
class _Built:
    runs: tuple[SpotRun, ...]
    members: frozenset[SpotRun]
    history: tuple[tuple[ZoneStats, ...], ZoneStats]
