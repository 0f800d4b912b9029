"""RunTables' cache never hands one ZoneStats's run table to another (orchestrator/policy/forecast.py)."""

from __future__ import annotations

import gc

from orchestrator.policy.forecast import RunTables
from orchestrator.policy.model import ZoneStats


def one_run(hours: float) -> ZoneStats:
    stats = ZoneStats()
    stats.record_run(True, hours)
    return stats


def test_a_new_zone_stats_never_gets_a_freed_ones_table() -> None:
    """Every tick the daemon builds new ZoneStats; CPython reuses a freed object's id at once, and these
    all have the same run counts, so a cache keyed by id and counts alone would answer 1.0 h for each."""
    tables = RunTables()
    for i in range(1, 60):
        assert tables.table(one_run(float(i)), True).sorted_h == (float(i),)


def test_the_same_stats_is_served_from_the_cache_until_its_runs_change_and_forgotten_when_it_goes() -> None:
    tables = RunTables()
    stats = one_run(2.0)
    first = tables.table(stats, True)
    assert tables.table(stats, True) is first
    stats.record_run(True, 5.0)
    assert tables.table(stats, True).sorted_h == (2.0, 5.0)
    del stats
    gc.collect()
    assert tables._cache == {}
