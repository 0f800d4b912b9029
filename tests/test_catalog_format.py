"""The catalog file format: a refreshed file round-trips, a one-GPU read touches only that GPU's bytes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from providers.base import Market, Offer
from providers.catalog.fileformat import CatalogFileError, read_offers, render, write_atomic
from providers.gpus import Interconnect

WHEN = datetime(2026, 12, 2, 10, 15, 30, tzinfo=UTC)


def offer(gpu: str, itype: str, price: float, region: str = "Texas, US", **changes: object) -> Offer:
    o = Offer("vastai", itype, region, None, gpu, 2, 24.0, 16.0, 64.0, Interconnect.PCIE, Market.ON_DEMAND, price,
              WHEN.date(), False, captured_at=WHEN, price_source="vast bundles")
    return replace(o, **changes)  # type: ignore[arg-type]


OFFERS = [
    offer("RTX4090-24G", "2x-RTX_4090", 0.71234567),
    offer("A100-80G", "2x-A100_SXM4", 2.5, region="Oregon, US", vcpus=None, memory_gb=None),
    offer("RTX4090-24G", "2x-RTX_4090", 0.9, region="Quebec, CA", market=Market.SPOT),
    offer("H100-80G", "2x-H100_SXM", 4.2, captured_at=None, price_as_of=date(2025, 12, 1),
          price_as_of_approximate=True, zone="z1"),
]


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "offers-vastai.csv"
    write_atomic(path, render(OFFERS))
    back = read_offers(path)
    assert sorted(back, key=lambda o: (o.gpu, o.region)) == sorted(
        [replace(o, price_hr=round(o.price_hr, 6)) for o in OFFERS], key=lambda o: (o.gpu, o.region))
    assert render(reversed(OFFERS)) == path.read_bytes()                 # deterministic whatever the order
    assert not [p for p in tmp_path.iterdir() if p.name != "offers-vastai.csv"]   # no temp file left


def test_a_one_gpu_read_touches_only_that_gpus_rows(tmp_path: Path) -> None:
    path = tmp_path / "offers-vastai.csv"
    data = render(OFFERS)
    # Spoil the A100 rows: a read of RTX4090 alone must not notice, a full read must.
    spoiled = data.replace(b",2.5,", b",zz,", 1)                        # the A100 row's price
    assert spoiled != data
    path.write_bytes(spoiled)
    rtx = read_offers(path, frozenset({"RTX4090-24G"}))
    assert sorted(o.price_hr for o in rtx) == [0.712346, 0.9]
    assert read_offers(path, frozenset({"B200-180G"})) == []
    with pytest.raises(CatalogFileError, match="row"):
        read_offers(path)


def test_the_shipped_shape_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "offers.csv"
    path.write_text("provider,instance_type,region,zone,gpu,gpu_count,vram_gb,vcpus,memory_gb,interconnect,market,"
                    "price_hr,price_as_of,price_as_of_approximate\n"
                    "lambda,gpu_1x_a10,us-east-1,,A10-24G,1,24,30,200,pcie,on-demand,0.75,2025-12-01,true\n"
                    "vastai,1x-H200,\"France, FR, EU\",,H200-141G,1,140,,,pcie,on-demand,2.65,2025-12-01,true\n")
    lam, vast = read_offers(path, default_source="shipped")
    assert lam.price_as_of == date(2025, 12, 1) and lam.captured_at is None and lam.price_source == "shipped"
    assert vast.vcpus is None and vast.memory_gb is None and vast.region == "France, FR, EU"


@pytest.mark.parametrize("text", [
    "#orch-catalog 2 {broken\n",
    "provider,instance_type\naws,x\n",
    "provider,instance_type,region,zone,gpu,gpu_count,vram_gb,vcpus,memory_gb,interconnect,market,price_hr,"
    "price_as_of,price_as_of_approximate\naws,x,r,,T4-16G,1,16,4,16,pcie,on-demand,nan,2025-12-01,true\n",
    "provider,instance_type,region,zone,gpu,gpu_count,vram_gb,vcpus,memory_gb,interconnect,market,price_hr,"
    "price_as_of,price_as_of_approximate\naws,x,r,,T4-16G,1,16,4,16,pcie,sometimes,1.0,2025-12-01,true\n",
])
def test_garbage_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "offers-aws.csv"
    path.write_text(text)
    with pytest.raises(CatalogFileError):
        read_offers(path)
