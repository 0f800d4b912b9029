"""``orch catalog refresh`` against recorded sources on 127.0.0.1 (tests/support/recorded_sources.py) and moto:
what each provider's rows become, and that a failing source never costs a provider its previous rows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from providers.base import Market
from providers.catalog.fileformat import MAGIC, read_offers
from providers.catalog.loader import user_catalog_file
from providers.catalog.refresh import AwsSpotSettings, Outcome, RefreshSettings, refresh
from tests.fakes.aws import FAKE_ENV, FakeAws, SpotPrice
from tests.support.recorded_sources import RecordedSources

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
PUBLISHED = datetime(2026, 12, 2, 1, 42, 10, tzinfo=UTC)     # the fixture server's Last-Modified
LAMBDA_KEY = "lambda-test-key-not-a-secret-3f9a"


@pytest.fixture
def sources() -> Iterator[RecordedSources]:
    s = RecordedSources()
    yield s
    s.close()


@pytest.fixture(scope="module")
def aws() -> Iterator[FakeAws]:
    fake = FakeAws()
    yield fake
    fake.close()


def settings_for(s: RecordedSources, **changes: object) -> RefreshSettings:
    values: dict[str, object] = dict(
        gpuhunt_url=f"{s.base}/gpuhunt", azure_prices_url=f"{s.base}/azure/prices", vast_url=f"{s.base}/vast",
        runpod_url=f"{s.base}/runpod/graphql", lambda_url=f"{s.base}/lambda", lambda_api_key=LAMBDA_KEY,
        http_timeout_s=30.0, provider_timeout_s=60.0)     # hang guards only: no source here is slow
    values.update(changes)
    return RefreshSettings(**values)  # type: ignore[arg-type]


def rows_of(directory: Path, provider: str) -> list:
    return read_offers(user_catalog_file(provider, directory))


def test_refresh_from_the_recorded_sources(sources: RecordedSources, tmp_path: Path) -> None:
    report = refresh([], settings_for(sources), directory=tmp_path, clock=lambda: NOW)
    assert not report.failed
    counts = {p.provider: p.rows for p in report.providers}
    # Rows per provider from the recorded sources (the numbers the docs quote).
    assert counts == {"aws": 27, "gcp": 26, "azure": 18, "runpod": 10, "vastai": 13, "lambda": 14}
    for provider in counts:
        assert user_catalog_file(provider, tmp_path).read_bytes().startswith(MAGIC)

    aws = rows_of(tmp_path, "aws")
    p4d = [o for o in aws if o.instance_type == "p4d.24xlarge" and o.region == "us-east-1"]
    assert {(o.market, o.price_hr) for o in p4d} == {(Market.ON_DEMAND, 32.7726), (Market.SPOT, 13.2571)}
    assert all(o.captured_at == PUBLISHED and not o.price_as_of_approximate for o in aws)
    assert all(o.price_source == "gpuhunt aws 20261202-8841" for o in aws)
    assert not [o for o in aws if o.region == "eu-west-1" and o.market is Market.SPOT]   # spot >= on-demand
    assert {o.gpu for o in aws} == {"A100-40G", "A100-80G", "H100-80G", "A10G-24G", "L4-24G", "T4-16G"}

    gcp = {(o.instance_type, o.zone, o.market): o for o in rows_of(tmp_path, "gcp")}
    assert gcp[("n1-standard-4+1xT4", "us-central1-a", Market.ON_DEMAND)].region == "us-central1"
    a3 = [o for o in gcp.values() if o.instance_type == "a3-highgpu-8g" and o.market is Market.ON_DEMAND]
    assert [o.price_hr for o in a3] == [88.2504]             # the DWS calendar-mode row is left out

    azure = {(o.instance_type, o.region, o.market): o for o in rows_of(tmp_path, "azure")}
    nd = {k: o.price_hr for k, o in azure.items() if k[0] == "Standard_ND96isr_H100_v5"}
    assert nd == {("Standard_ND96isr_H100_v5", "eastus", Market.ON_DEMAND): 98.32,
                  ("Standard_ND96isr_H100_v5", "eastus", Market.SPOT): 39.328,
                  ("Standard_ND96isr_H100_v5", "westeurope", Market.ON_DEMAND): 108.15,
                  ("Standard_ND96isr_H100_v5", "westeurope", Market.SPOT): 43.26,
                  ("Standard_ND96isr_H100_v5", "southcentralus", Market.ON_DEMAND): 98.32}
    assert azure[("Standard_ND96isr_H100_v5", "eastus", Market.SPOT)].captured_at == NOW
    assert sources.requests.count(("GET", "/azure/prices")) == 2           # page 1, then its NextPageLink

    runpod = {(o.instance_type, o.region): o for o in rows_of(tmp_path, "runpod")}
    a100x4 = runpod[("4x_NVIDIA A100 80GB PCIe_SECURE", "US-KS-2")]
    assert a100x4.price_hr == pytest.approx(4 * 1.39) and a100x4.captured_at == NOW and a100x4.zone == "US-KS-2"
    assert runpod[("1x_NVIDIA GeForce RTX 4090_COMMUNITY", "US")].price_hr == pytest.approx(0.34)
    assert all(o.market is Market.ON_DEMAND for o in runpod.values())

    vast = {(o.instance_type, o.region, o.market): o for o in rows_of(tmp_path, "vastai")}
    texas = vast[("1x-RTX_4090", "Texas, US", Market.ON_DEMAND)]
    assert texas.price_hr == pytest.approx(0.35 + 100 * 0.1 / 720)          # the cheaper of two asks, with disk
    assert (texas.vcpus, texas.memory_gb) == (8.0, 31.4)                      # its share, not the host's 32/125 GB
    h100x8 = vast[("8x-H100_SXM", "Vietnam, VN", Market.SPOT)]
    assert (h100x8.vcpus, h100x8.gpu_count, h100x8.interconnect.value) == (192.0, 8, "nvlink")
    assert not [k for k in vast if "Imaginary" in k[0]]

    lam = {(o.instance_type, o.region): o for o in rows_of(tmp_path, "lambda")}
    assert lam[("gpu_8x_h100_sxm5", "us-west-1")].price_hr == 23.92
    assert lam[("gpu_1x_a100_sxm4", "us-east-1")].price_hr == 1.39            # repriced live (gpuhunt: 1.29)
    assert lam[("gpu_8x_h100_sxm5", "us-south-1")].captured_at == NOW         # a region with capacity, added
    assert lam[("gpu_1x_h100_pcie", "us-east-1")].captured_at == PUBLISHED    # no live price: gpuhunt's row
    for path in tmp_path.iterdir():
        assert LAMBDA_KEY.encode() not in path.read_bytes()


def test_aws_zone_spot_from_describe_spot_price_history(sources: RecordedSources, aws: FakeAws, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in FAKE_ENV.items():
        monkeypatch.setenv(k, v)
    aws.reset()
    aws.plant_spot_prices([
        SpotPrice("p4d.24xlarge", "us-east-1a", "use1-az6", 11.5, datetime(2026, 12, 2, 9, 0, tzinfo=UTC)),
        SpotPrice("p4d.24xlarge", "us-east-1a", "use1-az6", 12.1, datetime(2026, 12, 1, 9, 0, tzinfo=UTC)),
        SpotPrice("p4d.24xlarge", "us-east-1c", "use1-az2", 14.25, datetime(2026, 12, 2, 8, 0, tzinfo=UTC)),
        SpotPrice("g5.xlarge", "us-east-1b", "use1-az1", 0.41, datetime(2026, 12, 2, 8, 0, tzinfo=UTC))])
    spot = AwsSpotSettings(("us-east-1",), endpoint_url=aws.endpoint_url)
    report = refresh(["aws"], settings_for(sources, aws_spot=spot), directory=tmp_path, clock=lambda: NOW)
    assert not report.failed, report.providers[0].error
    rows = [o for o in rows_of(tmp_path, "aws") if o.region == "us-east-1" and o.market is Market.SPOT]
    by = {(o.instance_type, o.zone): o for o in rows}
    assert by[("p4d.24xlarge", "use1-az6")].price_hr == 11.5                  # the newest entry of that zone
    assert by[("p4d.24xlarge", "use1-az2")].price_hr == 14.25
    assert by[("g5.xlarge", "use1-az1")].price_hr == 0.41
    assert ("p4d.24xlarge", None) not in by                                   # gpuhunt's region row replaced
    assert ("p5.48xlarge", None) in by                                        # no zone price: region row kept
    assert by[("p4d.24xlarge", "use1-az6")].price_source == "aws spot price history"
    assert by[("p4d.24xlarge", "use1-az6")].vcpus == 96                       # shaped after the on-demand row
    assert aws.sent["DescribeSpotPriceHistory"]["ProductDescription.1"] == "Linux/UNIX"


def test_aws_zone_spot_is_skipped_without_aws_in_the_config(sources: RecordedSources, tmp_path: Path) -> None:
    report = refresh(["aws"], settings_for(sources), directory=tmp_path, clock=lambda: NOW)
    assert report.providers[0].outcome is Outcome.REFRESHED
    assert any("aws is not in orch's config" in n for n in report.providers[0].notes)


@pytest.mark.parametrize(("route", "how", "provider", "reason"), [
    ("/gpuhunt/gcp/", "500", "gcp", "HTTP 500"),
    ("/gpuhunt/runpod/20261202-8841/catalog.zip", "garbage", "runpod", "not a catalog archive"),
    ("/azure/prices", "garbage", "azure", "not JSON"),
    ("/lambda/instance-types", "500", "lambda", "HTTP 500"),
])
def test_a_failing_source_leaves_that_providers_rows_byte_identical(
        sources: RecordedSources, tmp_path: Path, route: str, how: str, provider: str, reason: str) -> None:
    first = refresh([], settings_for(sources), directory=tmp_path, clock=lambda: NOW)
    assert not first.failed
    before = {p: user_catalog_file(p, tmp_path).read_bytes() for p in ("aws", "gcp", "azure", "runpod", "vastai",
                                                                        "lambda")}
    sources.break_route(route, how)
    later = datetime(2026, 12, 2, 18, 0, tzinfo=UTC)
    report = refresh([], settings_for(sources), directory=tmp_path, clock=lambda: later)
    assert [p.provider for p in report.failed] == [provider]
    failed = report.failed[0]
    assert reason in (failed.error or "") and failed.previous_rows == len(read_offers(
        user_catalog_file(provider, tmp_path)))
    assert user_catalog_file(provider, tmp_path).read_bytes() == before[provider]
    for other in before.keys() - {provider}:        # the others were rewritten with the new capture time
        assert user_catalog_file(other, tmp_path).read_bytes() != before[other] or other in ("aws", "gcp")
    state = json.loads((tmp_path / "refresh.json").read_text())
    assert state[provider]["outcome"] == "failed" and state[provider]["last_success"] == NOW.isoformat()


def test_a_source_that_never_answers_times_out_and_leaves_the_rows(sources: RecordedSources, tmp_path: Path) -> None:
    """The hanging route answers nothing until the server closes, so the read timeout is the only way out:
    it decides how long this takes, never what happens. Vast alone is refreshed: a short timeout shared by
    the other five providers' healthy requests would fail them too whenever this machine is slow."""
    refresh(["vastai"], settings_for(sources), directory=tmp_path, clock=lambda: NOW)
    before = user_catalog_file("vastai", tmp_path).read_bytes()
    sources.break_route("/vast/bundles", "hang")
    later = datetime(2026, 12, 2, 18, 0, tzinfo=UTC)
    report = refresh(["vastai"], settings_for(sources, http_timeout_s=0.2), directory=tmp_path, clock=lambda: later)
    assert [p.provider for p in report.failed] == ["vastai"]
    assert "ReadTimeout" in (report.failed[0].error or "")
    assert sources.requests.count(("POST", "/vast/bundles/")) == 3     # two answered the first time, one held
    assert user_catalog_file("vastai", tmp_path).read_bytes() == before
    state = json.loads((tmp_path / "refresh.json").read_text())
    assert state["vastai"]["outcome"] == "failed" and state["vastai"]["last_success"] == NOW.isoformat()


def test_an_empty_or_unusable_answer_never_replaces_rows(sources: RecordedSources, tmp_path: Path) -> None:
    refresh(["vastai"], settings_for(sources), directory=tmp_path, clock=lambda: NOW)
    before = user_catalog_file("vastai", tmp_path).read_bytes()
    sources.overrides["/vast/bundles/"] = b'{"offers": []}'
    report = refresh(["vastai"], settings_for(sources), directory=tmp_path, clock=lambda: NOW)
    assert report.failed and "no ask orch can sell" in (report.failed[0].error or "")
    sources.overrides["/vast/bundles/"] = b'{"offers": "not a list"}'
    report = refresh(["vastai"], settings_for(sources), directory=tmp_path, clock=lambda: NOW)
    assert report.failed and "no 'offers' list" in (report.failed[0].error or "")
    assert user_catalog_file("vastai", tmp_path).read_bytes() == before


def test_history_keeps_only_what_changed(sources: RecordedSources, tmp_path: Path) -> None:
    from providers.catalog.history import HISTORY_FILE, trend

    refresh(["vastai"], settings_for(sources), directory=tmp_path, clock=lambda: NOW)
    first = (tmp_path / HISTORY_FILE).read_text().splitlines()
    assert len(first) == 1 + 13                                       # header + every row, the first time
    refresh(["vastai"], settings_for(sources), directory=tmp_path, clock=lambda: NOW.replace(hour=18))
    assert (tmp_path / HISTORY_FILE).read_text().splitlines() == first   # nothing moved: nothing kept
    answer = json.loads((Path(__file__).parent / "fixtures" / "vast-bundles" / "bundles-on-demand.json").read_text())
    for ask in answer["offers"]:
        if ask["id"] == 4101:
            ask["dph_base"] = 0.29                                     # the Texas 4090 got cheaper
    sources.overrides["/vast/bundles/"] = json.dumps(answer).encode()
    refresh(["vastai"], settings_for(sources), directory=tmp_path, clock=lambda: NOW.replace(day=3))
    lines = (tmp_path / HISTORY_FILE).read_text().splitlines()
    added = lines[len(first):]
    assert len(added) > 0 and any("Texas, US" in line and "on-demand" in line for line in added)
    assert all(line.startswith("2026-12-03T12:00:00.000000Z,") for line in added)
    series = {(t.provider, t.market): t for t in trend(tmp_path, "RTX4090-24G", 1)}
    od = series[("vastai", "on-demand")]
    assert [round(p.price_per_gpu_hr, 4) for p in od.points] == [round(0.31 + 100 * 0.1 / 720, 4),
                                                                 round(0.29 + 100 * 0.1 / 720, 4)]
