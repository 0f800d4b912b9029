"""The issue's own case, on AWS (moto server) and GCP (the GCE fake) through their real adapters: an AWS spot
instance is reclaimed while GCP is the cheapest eligible offer left; the replacement starts on GCP from the
last checkpoint, and the reclaimed AWS zone is not chosen again within the cool-down (it stays the
cheapest offer on paper)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import Service, ServiceSettings, build_service
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.store import open_store
from providers.base import Market
from tests.daemon_world import OWNER, Clock, add_job

pytest.importorskip("moto")
pytest.importorskip("google.cloud.compute")


@pytest.fixture
def clouds() -> Iterator[tuple[object, object]]:
    from tests.contract.harness_aws import AwsHarness
    from tests.contract.harness_gcp import GcpHarness

    aws, gcp = AwsHarness(), GcpHarness()
    try:
        yield aws, gcp
    finally:
        aws.close()
        gcp.close()


def live(provider) -> list:  # type: ignore[no-untyped-def]
    return [i for i in provider.list_instances(OWNER) if not i.state.is_gone]


def test_aws_spot_reclaimed_relaunches_on_cheaper_gcp_from_the_checkpoint(clouds, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.contract import harness_aws, harness_gcp

    aws_h, gcp_h = clouds
    aws_spot = replace(harness_aws.catalog_offer(Market.SPOT), price_hr=2.50)          # cheapest: chosen first
    gcp_spot = replace(harness_gcp.catalog_offer(Market.SPOT, "g2-standard-96"), price_hr=3.19)
    aws_other = replace(aws_spot, zone="use1-az9", price_hr=3.90)                      # pricier than GCP
    catalog = [aws_spot, gcp_spot, aws_other]
    clock = Clock()
    providers = {"aws": aws_h.provider(), "gcp": gcp_h.provider()}
    service: Service = build_service(
        config=OrchConfig(owner=OWNER), store=open_store(f"sqlite:///{tmp_path / 'orch.db'}"), providers=providers,
        catalog=catalog, clock=clock, lease_owner=None, settings=ServiceSettings(orphan_grace=timedelta(0)))
    try:
        # 8 GPUs: g5.48xlarge (8x A10G) on AWS, g2-standard-96 (8x L4) on GCP
        job = add_job(service.store, "train", gpus=["A10G-24G", "L4-24G"], count=8, market="spot", cooldown="30m")
        for _ in range(6):
            clock.advance(seconds=30)
            if service.reconciler.tick().quiet and service.engine_store.job(job).status is JobStatus.RUNNING:
                break
        [first] = live(providers["aws"])
        assert live(providers["gcp"]) == []
        first_attempt = service.engine_store.attempts_for_job(job)[-1]
        assert first_attempt.offer.zone == "use1-az1"
        service.engine_store.record_checkpoint(job, first_attempt.id, "s3://ckpt/train/step-900", 900, clock())

        aws_h.preempt(first.instance_id)
        clock.advance(seconds=30)
        report = service.reconciler.tick()
        assert report.preempted == 1 and report.relaunched == 1, report
        [second] = live(providers["gcp"])
        history = service.engine_store.attempts_for_job(job)
        assert [a.state for a in history] == [AttemptState.PREEMPTED, AttemptState.LAUNCHED]
        assert history[-1].offer.provider == "gcp" and history[-1].launch_id == second.launch_id
        assert history[-1].checkpoint_restored == "s3://ckpt/train/step-900"
        assert live(providers["aws"]) == []
    finally:
        service.close()
