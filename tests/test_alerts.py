"""Alerts: the config section, the event->alert mapping, webhook delivery to a local receiver (formats,
retries, a receiver that hangs or is down, a full queue), secrets in URLs, and the store's listener."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.alerts.model import Alert, AlertKind
from orchestrator.alerts.redact import WebhookUrl, host_only
from orchestrator.config.alerts import AlertSettings, UrlSource, Webhook, WebhookFormat, parse_alerts
from orchestrator.config.errors import ConfigError, ConfigLines
from orchestrator.config.file import load_config
from orchestrator.daemon.alert_events import EVENT_KINDS, AlertMapper
from orchestrator.daemon.alerts import AlertDispatcher, SinkWorker, attach_alerts, start_alerts
from orchestrator.engine.events import EventKind
from orchestrator.store import repo
from orchestrator.store.db import Store, open_store
from orchestrator.store.listen import CommittedEvent
from orchestrator.store.models import InstanceRow, Job
from tests._webhook_receiver import Receiver, start_receiver

T0 = datetime(2025, 7, 15, 12, 0, tzinfo=UTC)
TOKEN = "XyZzY-s3cret-t0ken"


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = start_receiver()
    try:
        yield r
    finally:
        r.close()


def settings(*hooks: Webhook, queue_size: int = 100, attempts: int = 4, timeout_s: float = 10.0) -> AlertSettings:
    return AlertSettings(tuple(hooks), queue_size=queue_size, timeout_s=timeout_s, attempts=attempts)


def hook(
    url: str,
    fmt: WebhookFormat = WebhookFormat.JSON,
    name: str = "test",
    kinds: frozenset[AlertKind] = frozenset(AlertKind),
) -> Webhook:
    return Webhook(name, UrlSource(url=WebhookUrl(url)), fmt, kinds)


def alert(kind: AlertKind = AlertKind.PREEMPTED, job: str = "train") -> Alert:
    return Alert(kind, job, "aws", "aws i-123 preempted (Server.SpotInstanceTermination)", T0)


def worker(h: Webhook, s: AlertSettings) -> SinkWorker:
    return SinkWorker(h, h.source.resolve("test"), s, backoff_s=0.0, max_backoff_s=0.0)


def stop(w: SinkWorker) -> None:
    w.begin_close()
    w.finish_close(time.monotonic() + 60)


# -- config ---------------------------------------------------------------------------------------------


def test_parse_alerts_reads_webhooks(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = parse_alerts(
        {
            "webhooks": [
                {
                    "name": "ops",
                    "url": f"https://hooks.slack.com/services/T0/B0/{TOKEN}",
                    "format": "slack",
                    "events": ["preempted", "budget-threshold"],
                },
                {"url_env": "ORCH_TEST_HOOK"},
            ],
            "queue_size": 5,
            "timeout_s": 2,
            "attempts": 3,
        },
        ConfigLines("config.yaml"),
    )
    ops, env = parsed.webhooks
    assert ops.format is WebhookFormat.SLACK and ops.kinds == {AlertKind.PREEMPTED, AlertKind.BUDGET_THRESHOLD}
    assert env.name == "$ORCH_TEST_HOOK" and env.format is WebhookFormat.JSON and env.kinds == set(AlertKind)
    assert (parsed.queue_size, parsed.timeout_s, parsed.attempts) == (5, 2.0, 3)
    assert TOKEN not in repr(parsed)  # a WebhookUrl prints its host only
    with pytest.raises(ConfigError, match=r"alerts\.webhooks\[1\]: url_env: \$ORCH_TEST_HOOK is not set"):
        env.source.resolve(env.where)
    monkeypatch.setenv("ORCH_TEST_HOOK", f"https://example.com/hook?token={TOKEN}")
    assert env.source.resolve(env.where).reveal().endswith(TOKEN)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"webhooks": [{"name": "a"}]}, "alerts.webhooks.a: give url or url_env"),
        ({"webhooks": [{"url": "https://x", "url_env": "Y"}]}, "alerts.webhooks[0]: give url or url_env"),
        (
            {"webhooks": [{"name": "a", "url": "https://x", "format": "teams"}]},
            "alerts.webhooks.a.format: 'teams': choose slack or json",
        ),
        (
            {"webhooks": [{"name": "a", "url": "https://x", "events": ["coffee"]}]},
            "alerts.webhooks.a.events[0]: 'coffee': not an alert",
        ),
        ({"webhooks": [{"url": f"ftp://u:{TOKEN}@x/"}]}, "alerts.webhooks[0].url: not an http(s) URL"),
        ({"webhooks": [{"url": "https://x", "retry": 1}]}, "alerts.webhooks[0].retry: unknown key"),
        ({"queue_size": 0}, "alerts.queue_size: must be a whole number >= 1"),
        ({"timeout_s": "soon"}, "alerts.timeout_s: must be a number"),
        ({"sinks": []}, "alerts.sinks: unknown key"),
    ],
)
def test_parse_alerts_names_the_bad_key_and_never_echoes_a_url(raw: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_alerts(raw, ConfigLines("config.yaml"))
    assert message in str(err.value) and TOKEN not in str(err.value), str(err.value)


def test_load_config_reads_the_alerts_section(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("owner: tester\nalerts:\n  webhooks:\n    - {url: 'https://example.com/h', format: slack}\n")
    config = load_config(path)
    assert config.alerts is not None and config.alerts.webhooks[0].format is WebhookFormat.SLACK
    path.write_text("owner: tester\n")
    assert load_config(path).alerts is None


# -- secrets in URLs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        f"https://hooks.slack.com/services/T0/B0/{TOKEN}",
        f"https://example.com/hook?token={TOKEN}",
        f"https://user:{TOKEN}@example.com/hook",
    ],
)
def test_a_webhook_url_shows_its_host_only(url: str) -> None:
    shown = WebhookUrl(url)
    assert TOKEN not in str(shown) + repr(shown) + shown.host_only
    assert shown.host_only in ("https://hooks.slack.com", "https://example.com")
    assert host_only("http://[::1]:8080/x") == "http://[::1]:8080" and host_only("nonsense").startswith("<")


# -- mapping --------------------------------------------------------------------------------------------


def committed(kind: str, job_id: int | None = 1, data: dict[str, object] | None = None) -> CommittedEvent:
    return CommittedEvent(1, T0, EventKind(kind), job_id, "train" if job_id else None, "gcp", f"{kind} happened",
                          data or {})


def test_a_committed_events_kind_is_a_member_never_its_text() -> None:
    """Alerts are decided on the kind: the store hands it over typed, and text (even a member's) is refused."""
    with pytest.raises(TypeError, match="must be an EventKind"):
        CommittedEvent(1, T0, "preempted", 1, "train", "gcp", "m")  # type: ignore[arg-type]
    assert all(type(k) is EventKind for k in EVENT_KINDS)


def test_events_map_to_alerts_in_one_place() -> None:
    m = AlertMapper()
    kinds = {
        k: (a.kind if (a := m.alert_for(committed(k))) else None)
        for k in (
            "preempted",
            "idle-shutdown",
            "boot-timeout",
            "node-silent",
            "node-unreachable",
            "relaunch-cap",
            "budget-stop",
            "budget-threshold",
            "budget-cap-stop",
            "apply",
            "checkpoint",
        )
    }
    assert kinds == {
        "preempted": AlertKind.PREEMPTED,
        "idle-shutdown": AlertKind.IDLE_STOPPED,
        "boot-timeout": AlertKind.BOOT_FAILED,
        "node-silent": AlertKind.NODE_SILENT,
        "node-unreachable": AlertKind.NODE_UNREACHABLE,
        "relaunch-cap": AlertKind.RELAUNCH_CAP,
        "budget-stop": AlertKind.BUDGET_STOP,
        "budget-threshold": AlertKind.BUDGET_THRESHOLD,
        "budget-cap-stop": AlertKind.BUDGET_CAP_STOP,
        "apply": None,
        "checkpoint": None,
    }
    done = m.alert_for(committed("job.status", data={"from": "running", "to": "succeeded"}))
    failed = m.alert_for(committed("job.status", data={"from": "running", "to": "failed"}))
    assert done is not None and done.kind is AlertKind.JOB_FINISHED and done.job == "train"
    assert failed is not None and failed.kind is AlertKind.JOB_FAILED
    assert m.alert_for(committed("job.status", data={"to": "running"})) is None
    assert m.alert_for(committed("job.status", data={"to": "bogus"})) is None
    assert {"preempted", "recovering", "launched", "job.status"} <= EVENT_KINDS


def test_a_relaunch_alerts_once_on_the_launch_after_a_recovery() -> None:
    m = AlertMapper()
    assert m.alert_for(committed("launched")) is None  # a first launch is no relaunch
    assert m.alert_for(committed("recovering")) is None
    assert m.alert_for(committed("launched", job_id=2)) is None  # another job's launch
    relaunched = m.alert_for(committed("launched"))
    assert relaunched is not None and relaunched.kind is AlertKind.RELAUNCHED and relaunched.provider == "gcp"
    assert m.alert_for(committed("launched")) is None  # node 1 of the same gang: no second alert


# -- delivery -------------------------------------------------------------------------------------------


def test_slack_and_json_bodies_reach_the_receiver_at_the_full_url(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    s = settings()
    slack = hook(f"{receiver.base}/services/T0/B0/{TOKEN}", WebhookFormat.SLACK, "slack")
    generic = hook(
        f"{receiver.base}/hook?token={TOKEN}", WebhookFormat.JSON, "generic", kinds=frozenset({AlertKind.JOB_FAILED})
    )
    dispatcher = start_alerts(settings(slack, generic, queue_size=s.queue_size))
    assert dispatcher is not None
    try:
        dispatcher.submit(alert(AlertKind.PREEMPTED))
        dispatcher.submit(alert(AlertKind.JOB_FAILED))
        assert receiver.wait_for(lambda r: len(r.received) == 3)
    finally:
        dispatcher.close()
    by_path = {}
    for got in receiver.received:
        by_path.setdefault(got.path, []).append(got.body)
    assert by_path[f"/services/T0/B0/{TOKEN}"] == [
        {"text": "orch preempted train on aws: aws i-123 preempted (Server.SpotInstanceTermination)"},
        {"text": "orch job-failed train on aws: aws i-123 preempted (Server.SpotInstanceTermination)"},
    ]
    assert by_path[f"/hook?token={TOKEN}"] == [
        {"kind": "job-failed", "job": "train", "provider": "aws", "message": alert().message, "time": T0.isoformat()}
    ]
    assert TOKEN not in caplog.text  # httpx logs each request's URL: the webhook's is cut to its host


def test_a_failing_receiver_is_retried_with_backoff_until_it_takes_the_alert(receiver: Receiver) -> None:
    receiver.fail_first = 2
    w = worker(hook(f"{receiver.base}/h"), settings(attempts=4))
    try:
        assert w.offer(alert())
        assert w.wait_until(lambda s: s.sent == 1, 30)
    finally:
        stop(w)
    assert receiver.requests == 3 and len(receiver.received) == 1
    assert (w.stats().failed, w.stats().dropped) == (0, 0)


def test_a_refusing_receiver_is_not_retried_and_the_failure_is_logged_without_the_secret(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="orch.alerts")
    receiver.status = 404
    w = worker(hook(f"{receiver.base}/services/{TOKEN}"), settings(attempts=5))
    try:
        w.offer(alert())
        assert w.wait_until(lambda s: s.failed == 1, 30)
    finally:
        stop(w)
    assert receiver.requests == 1
    assert "HTTP 404" in caplog.text and receiver.base in caplog.text and TOKEN not in caplog.text


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_receiver_that_is_down_delays_nothing_and_fails_after_its_attempts(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="orch.alerts")
    url = f"http://127.0.0.1:{_closed_port()}/services/{TOKEN}"
    w = worker(hook(url), settings(attempts=3))
    try:
        for _ in range(5):
            assert w.offer(alert())  # returns at once: nothing waits for the dead receiver
        assert w.wait_until(lambda s: s.failed == 5, 60)
    finally:
        stop(w)
    assert "ConnectError" in caplog.text and TOKEN not in caplog.text


def test_a_hanging_receiver_blocks_no_caller_and_a_full_queue_drops_and_counts(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="orch.alerts")
    receiver.hang = threading.Event()
    receiver.hang.set()
    w = worker(hook(f"{receiver.base}/h"), settings(queue_size=2, timeout_s=60))
    try:
        assert w.offer(alert(job="first"))
        assert receiver.hanging.wait(30)  # the worker is stuck in the first POST
        accepted = [w.offer(alert(job=f"job-{i}")) for i in range(10)]  # none of these may block
        assert accepted == [True, True] + [False] * 8
        assert w.stats().dropped == 8 and w.stats().queued == 2
        assert "queue full (2), 1 alert dropped so far" in caplog.text
        receiver.release.set()
        assert receiver.wait_for(lambda r: len(r.received) == 3)
    finally:
        receiver.release.set()
        stop(w)
    assert [r.body["job"] for r in receiver.received] == ["first", "job-0", "job-1"]


def test_closing_gives_up_on_a_hanging_receiver_at_its_deadline(receiver: Receiver) -> None:
    receiver.hang = threading.Event()
    receiver.hang.set()
    dispatcher = start_alerts(settings(hook(f"{receiver.base}/h"), timeout_s=120))
    assert dispatcher is not None
    dispatcher.submit(alert())
    assert receiver.hanging.wait(30)
    dispatcher.close(within_s=0.1)  # returns at its deadline, though the POST still hangs
    assert dispatcher.workers[0]._thread.is_alive()
    receiver.release.set()


# -- the store's listener -----------------------------------------------------------------------------------


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'orch.db'}")
    try:
        yield s
    finally:
        s.close()


def add_job(store: Store, name: str, project: str | None = None, provider: str | None = None) -> int:
    manifest: dict[str, object] = {"apiVersion": "orch/v1", "kind": "Job", "name": name}
    if project:
        manifest["project"] = project
    with store.transaction() as tx:
        job = Job(name=name, manifest=manifest, manifest_hash=name, created_at=T0, updated_at=T0, applied_at=T0)
        tx.add(job)
        tx.flush()
        if provider:
            tx.add(
                InstanceRow(
                    provider=provider,
                    launch_id=f"l-{name}",
                    owner="t",
                    job_id=job.id,
                    instance_id=f"i-{name}",
                    state="running",
                    price_hr=2.0,
                    market="spot",
                    created_at=T0,
                    updated_at=T0,
                )
            )
        assert job.id is not None
        return job.id


class Recorder:
    kinds = frozenset({"preempted", "job.status"})

    def __init__(self) -> None:
        self.got: list[CommittedEvent] = []
        self.closed = False

    def __call__(self, events: object) -> None:
        self.got.extend(events)  # type: ignore[arg-type]

    def close(self) -> None:
        self.closed = True


def test_listeners_hear_committed_events_of_their_kinds_with_job_and_provider(store: Store) -> None:
    job = add_job(store, "train", provider="vastai")
    rec = Recorder()
    store.add_event_listener(rec)
    with store.transaction() as tx:
        repo.record_event(tx, EventKind.PREEMPTED, "vastai 1 outbid", job_id=job, ts=T0)
        repo.record_event(tx, EventKind.CHECKPOINT, "not wanted", job_id=job, ts=T0)
        assert rec.got == []  # nothing before the commit
    with pytest.raises(RuntimeError), store.transaction() as tx:
        repo.record_event(tx, EventKind.PREEMPTED, "rolled back", job_id=job, ts=T0)
        raise RuntimeError("boom")
    with store.transaction() as tx:
        repo.set_job_status(tx, job, repo.JobStatus.FAILED, now=T0)
    assert [(e.kind, e.job, e.provider, e.message) for e in rec.got] == [
        ("preempted", "train", "vastai", "vastai 1 outbid"),
        ("job.status", "train", "vastai", "job train: pending -> failed"),
    ]
    assert rec.got[1].data["to"] == "failed"
    store.close()
    assert rec.closed


def test_a_broken_listener_never_fails_the_writer(store: Store) -> None:
    class Broken(Recorder):
        def __call__(self, events: object) -> None:
            raise RuntimeError("listener bug")

    store.add_event_listener(Broken())
    with store.transaction() as tx:
        repo.record_event(tx, EventKind.PREEMPTED, "x", ts=T0)
    with store.transaction() as tx:
        assert [e.kind for e in repo.list_events(tx)] == ["preempted"]


def test_engine_events_become_alerts_and_a_hanging_receiver_never_holds_the_writer(
    store: Store, receiver: Receiver
) -> None:
    job = add_job(store, "train", provider="gcp")
    receiver.hang = threading.Event()
    receiver.hang.set()
    config = settings(hook(f"{receiver.base}/h"), queue_size=10, timeout_s=60)
    dispatcher = attach_alerts(store, config)
    assert isinstance(dispatcher, AlertDispatcher) and attach_alerts(store, config) is dispatcher  # once per store
    with store.transaction() as tx:
        repo.record_event(tx, EventKind.PREEMPTED, "gcp vm-1 preempted", job_id=job, ts=T0)
    assert receiver.hanging.wait(30)
    for n in range(3):  # the writer goes on while the receiver holds the first alert
        with store.transaction() as tx:
            repo.record_event(tx, EventKind.RECOVERING, "relaunching", job_id=job, ts=T0)
            repo.record_event(tx, EventKind.LAUNCHED, f"gcp vm-{n + 2}", job_id=job, ts=T0)
    receiver.release.set()
    assert receiver.wait_for(lambda r: len(r.received) == 4)
    assert [(r.body["kind"], r.body["job"], r.body["provider"]) for r in receiver.received] == [
        ("preempted", "train", "gcp")
    ] + [("relaunched", "train", "gcp")] * 3
