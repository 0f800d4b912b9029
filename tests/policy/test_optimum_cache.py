"""The optimum's disk cache (orchestrator/policy/optimum_cache.py): keyed by the traces' contents, reused,
and never trusted when unreadable."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.policy import optimum_cache
from orchestrator.policy.evaluate import run_case
from orchestrator.policy.model import ProblemSpec
from orchestrator.policy.optimum import DEFAULT_MAX_LEVELS, optimum
from orchestrator.policy.traces import ZoneSet
from tests.policy._helpers import zones

SPEC = ProblemSpec(work_h=2, deadline_h=4, overhead_h=0.5, spot_price=0.3)
ROWS = ("11001111", "01111100")


def key(zs: ZoneSet, spec: ProblemSpec = SPEC, starts: tuple[int, ...] = (0, 1)) -> str:
    return optimum_cache.key(spec, zs, starts, DEFAULT_MAX_LEVELS)


def test_the_key_follows_the_contents_not_the_name() -> None:
    base = zones(*ROWS, gap_s=1800)
    renamed = ZoneSet("another name", base.zones)
    assert key(base) == key(renamed)
    assert key(base) != key(zones("11001110", ROWS[1], gap_s=1800))          # one tick
    assert key(base) != key(zones(*ROWS, gap_s=900))                         # the gap
    assert key(base) != key(zones(*ROWS, gap_s=1800, prices=[[0.2] * 8, None]))  # a price series
    assert key(base) != key(base, ProblemSpec(2, 4, 0.25, 0.3))              # the overhead
    assert key(base) != key(base, starts=(0, 2))                             # a start


def test_run_case_stores_the_optimum_and_reads_it_back(tmp_path: Path) -> None:
    zs = zones(*ROWS, gap_s=1800)
    solved = [r.normalized_cost for r in optimum(SPEC, zs, [0, 1])]
    first = run_case(SPEC, zs, (), (0, 1), optimum_cache=str(tmp_path))
    assert list(first.optimum or ()) == pytest.approx(solved)
    entry = tmp_path / f"{key(zs)}.json"
    assert entry.exists()
    # What the cache holds is what is returned (a planted value proves the DP was not run again).
    entry.write_text("[0.123, null]")
    again = run_case(SPEC, zs, (), (0, 1), optimum_cache=str(tmp_path))
    assert again.optimum == (0.123, None)


@pytest.mark.parametrize("text", ["not json", "[0.1]", "{\"a\": 1}", "[\"x\", 0.2]"])
def test_an_unreadable_entry_is_solved_again_and_replaced(tmp_path: Path, text: str) -> None:
    zs = zones(*ROWS, gap_s=1800)
    (tmp_path / f"{key(zs)}.json").write_text(text)
    result = run_case(SPEC, zs, (), (0, 1), optimum_cache=str(tmp_path))
    assert list(result.optimum or ()) == pytest.approx([r.normalized_cost for r in optimum(SPEC, zs, [0, 1])])
    assert optimum_cache.load(tmp_path, key(zs), 2) == list(result.optimum or ())


def test_without_a_cache_directory_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_CACHE_DIR", str(tmp_path))
    run_case(SPEC, zones(*ROWS, gap_s=1800), (), (0, 1))
    assert list(tmp_path.iterdir()) == []
    assert optimum_cache.default_dir() == tmp_path / "optimum"
