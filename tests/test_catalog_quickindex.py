"""The quote's prebuilt catalog index (providers/catalog/quickindex.py): the same answers as the full read, and
never a stale one."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from providers.catalog import loader, quickindex
from providers.catalog.fileformat import render, write_atomic
from providers.catalog.loader import _load_sources, load_catalog, user_catalog_dir, user_catalog_file
from providers.gpus import GPU_MODELS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCH_CATALOG_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "d"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "k"))
    load_catalog.cache_clear()
    yield
    load_catalog.cache_clear()


def _full_read_forbidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(wanted: object) -> None:
        raise AssertionError("read the catalog files although the index is fresh")

    monkeypatch.setattr(loader, "_load_sources", refuse)


def test_every_indexed_query_equals_the_full_read_on_the_shipped_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    assert loader.rebuild_index()
    queries = [None, *(frozenset({m.name}) for m in GPU_MODELS)]
    expected = {q: _load_sources(q) for q in queries}
    _full_read_forbidden(monkeypatch)
    for q in queries:
        found = quickindex.lookup(q, user_catalog_dir())
        assert found.snapshot == expected[q], q
        assert not found.rebuild
    assert load_catalog(("A100-80G",)) == expected[frozenset({"A100-80G"})]


def test_several_gpus_are_not_indexed_and_read_in_full() -> None:
    assert loader.rebuild_index()
    assert quickindex.lookup(frozenset({"H100-80G", "A100-80G"}), user_catalog_dir()) == quickindex.Lookup(None, False)
    assert load_catalog(("A100-80G", "H100-80G")) == _load_sources(frozenset({"A100-80G", "H100-80G"}))


def _refreshed(provider: str, factor: float) -> None:
    """A user catalog file for ``provider``: the shipped rows at ``factor`` times their price."""
    stamp = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    rows = [replace(o, price_hr=round(o.price_hr * factor, 4), captured_at=stamp, price_as_of=stamp.date(),
                    price_as_of_approximate=False, price_source="test")
            for o in _load_sources(None).offers if o.provider == provider]
    write_atomic(user_catalog_file(provider), render(rows))


def test_a_changed_user_file_makes_the_index_stale_and_the_answer_is_the_new_files(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _refreshed("lambda", 2.0)
    assert loader.rebuild_index()
    old = quickindex.lookup(frozenset({"H100-80G"}), user_catalog_dir()).snapshot
    assert old is not None and "lambda" in old.refreshed and any(o.provider == "lambda" for o in old.offers)
    _refreshed("lambda", 3.0)                                      # new prices, the same shape
    stale = quickindex.lookup(frozenset({"H100-80G"}), user_catalog_dir())
    assert stale == quickindex.Lookup(None, True)
    assert load_catalog(("H100-80G",)) == _load_sources(frozenset({"H100-80G"}))   # answered in full
    assert quickindex.lookup(frozenset({"H100-80G"}), user_catalog_dir()).rebuild  # (only the quote builds)
    fresh = load_catalog(("H100-80G",), build_index=True)          # answered in full, and the index rebuilt
    assert fresh == _load_sources(frozenset({"H100-80G"})) != old
    assert quickindex.lookup(frozenset({"H100-80G"}), user_catalog_dir()) == quickindex.Lookup(fresh, False)


def test_a_user_file_added_or_removed_makes_the_index_stale() -> None:
    assert loader.rebuild_index()
    _refreshed("runpod", 1.5)
    assert quickindex.lookup(None, user_catalog_dir()) == quickindex.Lookup(None, True)
    assert loader.rebuild_index()
    user_catalog_file("runpod").unlink()
    assert quickindex.lookup(None, user_catalog_dir()) == quickindex.Lookup(None, True)
    assert load_catalog() == _load_sources(None)


def test_a_touched_file_with_the_same_bytes_is_fresh_by_its_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    _refreshed("lambda", 2.0)
    assert loader.rebuild_index()
    path = user_catalog_file("lambda")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))     # as an install or a copy leaves it
    found = quickindex.lookup(frozenset({"H100-80G"}), user_catalog_dir())
    assert found.snapshot == _load_sources(frozenset({"H100-80G"})) and found.rebuild
    load_catalog(("H100-80G",), build_index=True)                  # rewrites the stat signature
    assert not quickindex.lookup(frozenset({"H100-80G"}), user_catalog_dir()).rebuild


def test_a_damaged_index_is_ignored() -> None:
    assert loader.rebuild_index()
    path = quickindex.index_path()
    path.write_bytes(path.read_bytes()[:300])
    assert quickindex.lookup(frozenset({"H100-80G"}), user_catalog_dir()).snapshot is None
    assert load_catalog(("H100-80G",)) == _load_sources(frozenset({"H100-80G"}))


def test_a_pinned_catalog_is_never_indexed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_CATALOG_DIR", str(loader.SHIPPED_DIR))
    assert not loader.rebuild_index()
    load_catalog(("H100-80G",), build_index=True)
    assert not quickindex.index_path().exists()


QUOTE = ("import sys, datetime as dt; sys.argv[0] = 'orch'\n"
         "import orchestrator.cli.quote_run as q\n"
         "class Fixed(dt.datetime):\n"
         "    @classmethod\n"
         "    def now(cls, tz=None): return dt.datetime(2026, 12, 6, 12, 0, tzinfo=tz)\n"
         "q.datetime = Fixed\n"
         "from orchestrator.cli.entry import run; run()")


@pytest.mark.parametrize("args", [["--gpu", "A100-80G", "--count", "4"],
                                  ["--gpu", "A100-80G", "--count", "4", "--json"], ["--json"], ["--gpu", "H100", "-w"]])
def test_the_quote_prints_the_same_bytes_from_the_index_as_from_the_files(tmp_path: Path, args: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "c"),
           "XDG_DATA_HOME": str(tmp_path / "d"), "XDG_CACHE_HOME": str(tmp_path / "k"), "COLUMNS": "100"}
    env.pop("ORCH_CATALOG_DIR", None)

    def quote() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", QUOTE, "quote", *args], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=60)

    index = tmp_path / "k" / "orch" / quickindex.index_path().name
    from_files = quote()                                            # no index yet: the full read, then the build
    assert index.exists()
    built = index.stat().st_mtime_ns
    from_index = quote()
    assert index.stat().st_mtime_ns == built                        # fresh: used, not rebuilt
    assert from_files.returncode == from_index.returncode == 0
    assert from_index.stdout == from_files.stdout and from_index.stderr == from_files.stderr
    assert from_index.stdout
