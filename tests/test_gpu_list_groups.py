"""The GPU list from offer groups (providers/catalog/groups.py): the catalog's groups kept in the quote index,
merged with your own machines', list exactly what grouping every offer lists."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from orchestrator.cli import quote_gpus
from orchestrator.offers import sources
from orchestrator.offers.gpu_list import gpu_summaries
from providers.catalog import loader, quickindex
from providers.catalog.fileformat import render, write_atomic
from providers.catalog.groups import catalog_groups, group_offers, merge_groups
from providers.catalog.loader import _load_sources, load_catalog, user_catalog_dir, user_catalog_file
from providers.gpus import Interconnect
from providers.offer import GpuRequest, Market, Offer, OfferOrigin


def _offer(provider: str, name: str, gpu: str, count: int, price: float, market: Market = Market.ON_DEMAND) -> Offer:
    return Offer(provider, name, "r1", None, gpu, count, 80.0, None, None, Interconnect.PCIE, market, price,
                 date(2026, 12, 1))


def _reference(offers: list[Offer]) -> list[tuple[object, ...]]:
    """The GPU list as it was computed before groups: per GPU, ``min`` over every offer in order."""
    out = []
    for gpu in {o.gpu for o in offers}:
        found = [o for o in offers if o.gpu == gpu]
        best = min(found, key=lambda o: (o.price_per_gpu_hr, o.price_hr))
        out.append((gpu, best, tuple(sorted({o.provider for o in found})), len(found),
                    tuple(sorted({o.gpu_count for o in found}))))
    return sorted(out, key=lambda r: (r[1].price_per_gpu_hr, r[0]))  # type: ignore[attr-defined]


def _summaries(groups: list) -> list[tuple[object, ...]]:  # type: ignore[type-arg]
    return [(s.gpu, s.cheapest, s.providers, s.offers, s.counts) for s in gpu_summaries(groups)]


def test_groups_and_merged_groups_list_what_every_offer_lists() -> None:
    """Seeded random offer lists with many price ties (within a count the first cheapest wins, as ``min`` does):
    grouping all, and merging the groups of a split into two parts with no offer in both, give the same list."""
    rng = random.Random(7)
    for _ in range(300):
        offers = [_offer(rng.choice("abc"), f"t{i}", rng.choice(["A100-80G", "H100-80G", "T4-16G"]),
                         rng.choice([1, 2, 4]), rng.choice([1.0, 2.0, 4.0, 8.0]))
                  for i in range(rng.randint(1, 25))]
        cut = rng.randint(0, len(offers))
        assert _summaries(group_offers(offers)) == _reference(offers)
        assert _summaries(merge_groups(group_offers(offers[:cut]), group_offers(offers[cut:]))) == _reference(offers)


def test_a_tie_within_a_count_keeps_the_first_offer_and_counts_every_one() -> None:
    first, second = _offer("aws", "p4", "A100-80G", 4, 8.0), _offer("gcp", "a2", "A100-80G", 4, 8.0)
    [group] = merge_groups(group_offers([first]), group_offers([second]))
    assert group.cheapest is first and group.providers == {"aws", "gcp"} and group.offers == 2
    [group] = merge_groups(group_offers([first]), group_offers([replace(second, price_hr=7.99)]))
    assert group.cheapest.provider == "gcp"


@pytest.fixture()
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("ORCH_CATALOG_DIR", raising=False)
    for var, sub in (("XDG_DATA_HOME", "d"), ("XDG_CACHE_HOME", "k"), ("XDG_CONFIG_HOME", "c")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("HOME", str(tmp_path))
    config = tmp_path / "config.yaml"
    config.write_text("providers:\n  ssh:\n    hosts:\n"
                      "      - {name: box, address: 10.0.0.5, gpu: A100-80G, gpu_count: 2, price_hr: 0.01}\n"
                      "      - {name: big, address: 10.0.0.6, gpu: H100-80G, gpu_count: 8}\n")
    monkeypatch.setenv("ORCH_CONFIG", str(config))
    stamp = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    rows = [replace(o, price_hr=round(o.price_hr * 0.9, 4), captured_at=stamp, price_as_of=stamp.date(),
                    price_as_of_approximate=False, price_source="test")
            for o in _load_sources(None).offers if o.provider == "lambda"]
    write_atomic(user_catalog_file("lambda"), render(rows))
    load_catalog.cache_clear()
    assert loader.rebuild_index()
    yield tmp_path
    load_catalog.cache_clear()


def test_the_index_groups_and_own_machines_list_what_every_offer_lists(homes: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    req = GpuRequest()
    expected_groups, expected_refreshed = _full_list(req, monkeypatch)
    assert ("A100-80G", 2) in {(g.gpu, g.count) for g in expected_groups}

    def refuse(wanted: object) -> None:
        raise AssertionError("decoded the whole catalog although the index keeps its groups")

    monkeypatch.setattr(loader, "_load_sources", refuse)
    monkeypatch.setattr(quickindex, "_decode_snapshot", refuse)
    groups, refreshed = quote_gpus.gpu_list(req, None, False)
    assert refreshed == expected_refreshed == ("lambda",)
    assert _summaries(groups) == _summaries(expected_groups)
    own = [s for s in gpu_summaries(groups) if s.cheapest.source == OfferOrigin.OWN]
    assert [(s.gpu, s.cheapest.instance_type) for s in own] == [("H100-80G", "big"), ("A100-80G", "box")]


def _full_list(req: GpuRequest, monkeypatch: pytest.MonkeyPatch) -> tuple[list, tuple[str, ...]]:  # type: ignore[type-arg]
    """The GPU list read from every offer: as if the index kept no groups."""
    with monkeypatch.context() as m:
        m.setattr(loader, "load_catalog_groups", lambda: None)
        return quote_gpus.gpu_list(req, None, False)


def test_an_own_offer_of_a_catalog_provider_is_listed_from_every_offer(homes: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An own offer with a catalog row's key replaces that row, which the groups cannot see: that list is read
    from every offer."""
    row = next(o for o in load_catalog().offers
               if o.provider == "aws" and o.gpu_count == 8 and o.gpu not in ("A100-80G", "H100-80G"))
    cheaper = replace(row, price_hr=0.001, source=OfferOrigin.OWN)
    real = sources._configured_machines

    class Colliding:
        def offers(self, req: GpuRequest) -> list[Offer]:
            return [cheaper] if req.count == 8 else []

    monkeypatch.setattr(sources, "_configured_machines", lambda config, skip: [*real(config, skip), Colliding()])
    groups, _ = quote_gpus.gpu_list(GpuRequest(), None, False)
    [line] = [s for s in gpu_summaries(groups) if s.gpu == row.gpu]
    assert line.cheapest == cheaper
    expected, _ = _full_list(GpuRequest(), monkeypatch)
    assert _summaries(groups) == _summaries(expected)
    [expected_line] = [s for s in gpu_summaries(expected) if s.gpu == row.gpu]
    assert line.offers == expected_line.offers      # replaced, not added: the merged groups would say one more


def test_a_filtered_list_is_read_from_every_offer(homes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index keeps the groups of a list with no filter only."""
    calls: list[str] = []
    monkeypatch.setattr(loader, "load_catalog_groups", lambda: calls.append("index"))
    # --nodes 2 filters too: only providers where orch launches several machines (as `--gpu G --nodes 2`).
    for req, count in ((GpuRequest(markets=frozenset({Market.SPOT})), None), (GpuRequest(regions=("us-*",)), None),
                       (GpuRequest(count=8), 8), (GpuRequest(nodes=2), None)):
        quote_gpus.gpu_list(req, count, False)
    assert calls == []
    quote_gpus.gpu_list(GpuRequest(), None, False)
    assert calls == ["index"]


def test_an_index_of_a_catalog_with_a_repeated_key_keeps_no_groups() -> None:
    offers = [_offer("aws", "p4", "A100-80G", 8, 30.0), _offer("aws", "p4", "A100-80G", 8, 32.0)]
    assert catalog_groups(offers) is None
    assert catalog_groups(offers[:1]) == group_offers(offers[:1])


def test_a_stale_index_gives_no_groups(homes: Path) -> None:
    assert loader.load_catalog_groups() is not None
    path = user_catalog_file("lambda")
    write_atomic(path, path.read_bytes().replace(b",test", b",tset"))   # another price source: changed
    assert loader.load_catalog_groups() is None
    assert quickindex.lookup_groups(user_catalog_dir()).rebuild
