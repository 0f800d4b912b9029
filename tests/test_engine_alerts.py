"""The engine as built by ``build_service`` sends alerts: a preemption and its relaunch reach a local
webhook receiver, a receiver that hangs never slows a tick, and a webhook URL that cannot be read stops
the build with the webhook's name (never its URL)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from orchestrator.alerts.redact import WebhookUrl
from orchestrator.app.jobs import apply, load
from orchestrator.config.alerts import AlertSettings, UrlSource, Webhook
from orchestrator.config.errors import ConfigError
from orchestrator.config.file import OrchConfig
from orchestrator.daemon.alerts import AlertDispatcher
from orchestrator.daemon.assembly import Service, build_service
from providers.base import Interconnect, Market, Offer
from tests._webhook_receiver import Receiver, start_receiver
from tests.fakes.memory_provider import MemoryProvider

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SPOT = Offer("aws", "p4d.24xlarge", "us-east-1", "use1-az1", "A100-80G", 8, 80, 96, 1152, Interconnect.NVLINK,
             Market.SPOT, 10.0, date(2026, 12, 1), True)
# A preempted zone cools down (policies.preempted_zone_cooldown): each relaunch goes to the next zone.
SPOTS = [replace(SPOT, zone=f"use1-az{i}", price_hr=10.0 + i / 10) for i in range(1, 6)]
MANIFEST = """\
apiVersion: orch/v1
kind: Job
name: train
project: nlp
resources: {gpu: A100-80G, count: 8}
market: spot
run: {launcher: command, command: nvidia-smi}
"""


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = start_receiver()
    try:
        yield r
    finally:
        r.close()


def service(tmp_path: Path, receiver: Receiver, provider: MemoryProvider, **alerts: object) -> Service:
    settings = replace(AlertSettings((Webhook("ops", UrlSource(url=WebhookUrl(f"{receiver.base}/hook/SECRET"))),)),
                       **alerts)  # type: ignore[arg-type]
    svc = build_service(config=OrchConfig(owner="tester", alerts=settings), store_url=f"sqlite:///{tmp_path / 'o.db'}",
                        providers={"aws": provider}, catalog=SPOTS, lease_owner=None, clock=lambda: T0)
    path = tmp_path / "train.yaml"
    path.write_text(MANIFEST)
    apply(svc.store, load([path]), now=T0)
    return svc


def test_a_preemption_and_its_relaunch_reach_the_webhook(tmp_path: Path, receiver: Receiver) -> None:
    aws = MemoryProvider("aws", SPOTS)
    svc = service(tmp_path, receiver, aws)
    try:
        assert svc.reconciler.tick().launched == 1
        [first] = aws.live()
        aws.preempt(first.instance_id)
        report = svc.reconciler.tick()
        assert report.preempted == 1 and report.launched == 1
        assert receiver.wait_for(lambda r: len(r.received) == 2)
    finally:
        svc.close()
    [second] = aws.live()
    preempted, relaunched = (r.body for r in receiver.received)
    assert (preempted["kind"], preempted["job"], preempted["provider"]) == ("preempted", "train", "aws")
    assert first.instance_id in preempted["message"]
    assert (relaunched["kind"], relaunched["job"], relaunched["provider"]) == ("relaunched", "train", "aws")
    assert second.instance_id in relaunched["message"]


def test_a_hanging_receiver_never_slows_a_tick(tmp_path: Path, receiver: Receiver) -> None:
    receiver.hang = threading.Event()
    receiver.hang.set()
    aws = MemoryProvider("aws", SPOTS)
    svc = service(tmp_path, receiver, aws, timeout_s=120.0)
    try:
        svc.reconciler.tick()
        aws.preempt(aws.live()[0].instance_id)
        svc.reconciler.tick()
        assert receiver.hanging.wait(30)          # the first alert's POST is held by the receiver
        for _ in range(3):                        # ... and the engine keeps ticking meanwhile
            aws.preempt(aws.live()[0].instance_id)
            assert svc.reconciler.tick().preempted == 1
        [dispatcher] = [x for x in svc.store.feed.listeners if isinstance(x, AlertDispatcher)]
        assert dispatcher.stats()[0].queued >= 1
    finally:
        receiver.release.set()
        svc.close()


def test_an_unset_webhook_variable_stops_the_build_with_its_name(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCH_TEST_WEBHOOK", raising=False)
    settings = AlertSettings((Webhook("ops", UrlSource(env="ORCH_TEST_WEBHOOK"), where="config.yaml: alerts.ops"),))
    with pytest.raises(ConfigError, match=r"alerts\.ops: url_env: \$ORCH_TEST_WEBHOOK is not set"):
        build_service(config=OrchConfig(owner="tester", alerts=settings), store_url=f"sqlite:///{tmp_path / 'o.db'}",
                      providers={}, catalog=[], lease_owner=None)


def test_a_boot_timeout_from_the_liveness_step_reaches_the_webhook(tmp_path: Path, receiver: Receiver) -> None:
    """The real liveness step ends a node whose agent never reported (a store channel that stays empty): its
    ``boot-timeout`` event is a ``boot-failed`` alert (the mapping used to listen for a kind nothing wrote)."""
    from datetime import timedelta

    from tests.test_engine import ScriptedMonitor

    now = [T0]
    aws = MemoryProvider("aws", SPOTS)
    settings = AlertSettings((Webhook("ops", UrlSource(url=WebhookUrl(f"{receiver.base}/hook/SECRET"))),))
    svc = build_service(config=OrchConfig(owner="tester", alerts=settings), store_url=f"sqlite:///{tmp_path / 'o.db'}",
                        providers={"aws": aws}, catalog=SPOTS, lease_owner=None, clock=lambda: now[0],
                        monitor=ScriptedMonitor())
    path = tmp_path / "train.yaml"
    path.write_text(MANIFEST)
    apply(svc.store, load([path]), now=T0)
    try:
        svc.reconciler.tick()
        [first] = aws.live()
        for _ in range(21):                      # the default boot timeout: 20 minutes
            now[0] += timedelta(minutes=1)
            svc.reconciler.tick()
        assert first.instance_id not in {i.instance_id for i in aws.live()}
        assert receiver.wait_for(lambda r: any(x.body["kind"] == "boot-failed" for x in r.received))
    finally:
        svc.close()
    [boot] = [r.body for r in receiver.received if r.body["kind"] == "boot-failed"]
    assert boot["job"] == "train" and first.instance_id in boot["message"]
