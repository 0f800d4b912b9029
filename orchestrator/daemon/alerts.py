"""Sending alerts without ever making a tick wait: one background worker per webhook.

The store hands committed events to ``AlertDispatcher`` on the writer's thread (an engine tick, a CLI
command); it maps them to alerts (orchestrator.daemon.alert_events) and puts each on the queue of every webhook
that wants its kind, WITHOUT blocking: a full queue drops the alert and counts it (logged at the first
drop and every 100th). Each webhook's worker thread posts its queue in order, retrying connection
failures, timeouts, 429 and 5xx with exponential backoff (tenacity); other 4xx answers are not retried.
A receiver that hangs holds up its own worker only. Logs name a webhook by its scheme and host, never
its path or query (where the secret is).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.alerts.model import Alert, AlertKind
from orchestrator.alerts.redact import WebhookUrl
from orchestrator.config.alerts import AlertSettings, Webhook, WebhookFormat
from orchestrator.daemon.alert_events import EVENT_KINDS, AlertMapper
from orchestrator.store.listen import CommittedEvent
from orchestrator.words import plural

if TYPE_CHECKING:
    import httpx

    from orchestrator.store.db import Store

log = logging.getLogger("orch.alerts")

_STOP = object()
_DROP_LOG_EVERY = 100


class _Retryable(Exception):
    """The receiver may take it later: connection failure, timeout, 429, 5xx."""


class _Rejected(Exception):
    """The receiver refused it for good (4xx): retrying would not help."""


@dataclass(frozen=True, slots=True)
class SinkStats:
    name: str
    host: str
    sent: int
    failed: int
    dropped: int
    queued: int


class SinkWorker:
    """One webhook: a bounded queue and the thread that posts it."""

    def __init__(self, hook: Webhook, url: WebhookUrl, settings: AlertSettings, *, backoff_s: float = 1.0,
                 max_backoff_s: float = 60.0, client: Callable[[float], httpx.Client] | None = None) -> None:
        self.hook = hook
        self.url = url
        self._settings = settings
        self._backoff = (backoff_s, max_backoff_s)
        self._client = client or _default_client
        self._queue: queue.Queue[object] = queue.Queue(maxsize=settings.queue_size)
        self._closing = threading.Event()
        self._counts = {"sent": 0, "failed": 0, "dropped": 0}
        self._count_lock = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"orch-alerts-{hook.name}", daemon=True)
        self._thread.start()

    def offer(self, alert: Alert) -> bool:
        """Queue ``alert`` if there is room; never blocks."""
        if self._closing.is_set():
            return False
        try:
            self._queue.put_nowait(alert)
            return True
        except queue.Full:
            dropped = self._count("dropped")
            if dropped == 1 or dropped % _DROP_LOG_EVERY == 0:
                log.warning("alerts to %s (%s): queue full (%d), %s dropped so far", self.hook.name,
                            self.url.host_only, self._settings.queue_size, plural(dropped, "alert"))
            return False

    def stats(self) -> SinkStats:
        with self._count_lock:
            c = dict(self._counts)
        return SinkStats(self.hook.name, self.url.host_only, c["sent"], c["failed"], c["dropped"], self._queue.qsize())

    def wait_until(self, done: Callable[[SinkStats], bool], timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until ``done(stats)``: for tests and for an orderly exit."""
        with self._count_lock:
            return self._count_lock.wait_for(lambda: done(self.stats()), timeout_s)

    def begin_close(self) -> None:
        """Stop taking alerts and stop retrying: what is queued gets one try each."""
        self._closing.set()
        try:
            self._queue.put_nowait(_STOP)
        except queue.Full:
            pass  # the worker drains the queue, one try each, and the deadline abandons the rest

    def finish_close(self, deadline: float) -> None:
        """Wait for the worker until ``deadline`` (time.monotonic()), then leave it (a daemon thread)."""
        import time

        self._thread.join(max(deadline - time.monotonic(), 0.0))
        if self._thread.is_alive():
            log.warning("alerts to %s (%s): gave up on %s at exit", self.hook.name,
                        self.url.host_only, plural(self._queue.qsize(), "queued alert"))

    # --- the worker thread ---------------------------------------------------------------------------
    def _count(self, key: str) -> int:
        with self._count_lock:
            self._counts[key] += 1
            self._count_lock.notify_all()
            return self._counts[key]

    def _run(self) -> None:
        with self._client(self._settings.timeout_s) as client:
            while True:
                item = self._queue.get()
                if item is _STOP:
                    return
                if isinstance(item, Alert):
                    self._deliver(client, item)

    def _deliver(self, client: httpx.Client, alert: Alert) -> None:
        from tenacity import (
            Retrying,
            retry_if_exception_type,
            stop_after_attempt,
            stop_when_event_set,
            wait_exponential,
        )

        body: dict[str, str | None] | dict[str, str] = \
            alert.slack() if self.hook.format is WebhookFormat.SLACK else alert.to_json()
        retrying = Retrying(stop=stop_after_attempt(self._settings.attempts) | stop_when_event_set(self._closing),
                            wait=wait_exponential(multiplier=self._backoff[0], max=self._backoff[1]),
                            retry=retry_if_exception_type(_Retryable), sleep=self._closing.wait, reraise=True)
        try:
            for attempt in retrying:
                with attempt:
                    self._post(client, body)
        except (_Retryable, _Rejected) as exc:
            self._count("failed")
            log.warning("alert %s for %s to %s (%s) not delivered: %s", alert.kind.value, alert.job or "-",
                        self.hook.name, self.url.host_only, exc)
            return
        except Exception as exc:  # a bug must not kill the worker: the next alert still goes
            self._count("failed")
            log.error("alert %s to %s (%s) failed: %s", alert.kind.value, self.hook.name, self.url.host_only,
                      type(exc).__name__)
            return
        self._count("sent")

    def _post(self, client: httpx.Client, body: dict[str, str | None] | dict[str, str]) -> None:
        import httpx

        try:
            response = client.post(self.url.reveal(), json=body)
        except httpx.HTTPError as exc:
            # The exception's text may quote the URL: only its type is kept.
            raise _Retryable(type(exc).__name__) from None
        if response.status_code == 429 or response.status_code >= 500:
            raise _Retryable(f"HTTP {response.status_code}")
        if response.status_code >= 300:
            # Redirects are not followed (a webhook URL carries its secret; a redirect could send the alert
            # elsewhere), so a 3xx delivered nothing: a failure, logged, never counted as sent.
            what = " (a redirect: not followed; give the webhook's final URL)" if response.status_code < 400 else ""
            raise _Rejected(f"HTTP {response.status_code}{what} (not retried)")


def _default_client(timeout_s: float) -> httpx.Client:
    import httpx

    return httpx.Client(timeout=timeout_s, follow_redirects=False)


class AlertDispatcher:
    """The store's alert listener (orchestrator.store.listen.EventListener): events in, queued alerts out."""

    kinds = EVENT_KINDS

    def __init__(self, workers: Sequence[SinkWorker], settings: AlertSettings) -> None:
        self.workers = tuple(workers)
        self._settings = settings
        self._mapper = AlertMapper()

    def __call__(self, events: Sequence[CommittedEvent]) -> None:
        for event in events:
            alert = self._mapper.alert_for(event)
            if alert is not None:
                self.submit(alert)

    def submit(self, alert: Alert) -> None:
        """Queue ``alert`` for every webhook that wants its kind; returns at once."""
        for worker in self.workers:
            if alert.kind in worker.hook.kinds:
                worker.offer(alert)

    def stats(self) -> tuple[SinkStats, ...]:
        return tuple(w.stats() for w in self.workers)

    def close(self, within_s: float | None = None) -> None:
        """Give queued alerts one try each, for at most ``within_s`` in all (default ``timeout_s``: a CLI's
        exit waits that long at most for a receiver that hangs), then leave the rest."""
        import time

        deadline = time.monotonic() + (self._settings.timeout_s if within_s is None else within_s)
        for worker in self.workers:
            worker.begin_close()
        for worker in self.workers:
            worker.finish_close(deadline)


def wants(settings: AlertSettings) -> frozenset[AlertKind]:
    """Every alert kind some webhook wants."""
    return frozenset().union(*(h.kinds for h in settings.webhooks)) if settings.webhooks else frozenset()


class _RedactUrls(logging.Filter):
    """httpx logs each request's full URL at INFO: for webhook URLs, keep the host only."""

    def __init__(self) -> None:
        super().__init__()
        self.secret: dict[str, str] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secret and isinstance(record.args, tuple):
            record.args = tuple(self.secret.get(str(a), a) if not isinstance(a, int | float) else a
                                for a in record.args)
        return True


_REDACT = _RedactUrls()


def start_alerts(settings: AlertSettings, *, backoff_s: float = 1.0, max_backoff_s: float = 60.0,
                 client: Callable[[float], httpx.Client] | None = None) -> AlertDispatcher | None:
    """Workers for the configured webhooks (None when there are none). Resolves ``url_env`` now: a
    variable that is not set is a ConfigError naming the webhook, not a silent loss of alerts."""
    if not settings.webhooks:
        return None
    urls = [hook.source.resolve(hook.where) for hook in settings.webhooks]
    if _REDACT not in logging.getLogger("httpx").filters:
        logging.getLogger("httpx").addFilter(_REDACT)
    for url in urls:
        _REDACT.secret[url.reveal()] = url.host_only
    workers = [SinkWorker(hook, url, settings, backoff_s=backoff_s, max_backoff_s=max_backoff_s, client=client)
               for hook, url in zip(settings.webhooks, urls, strict=True)]
    return AlertDispatcher(workers, settings)


def attach_alerts(store: Store, settings: AlertSettings | None) -> AlertDispatcher | None:
    """Make ``store`` send the alerts of its committed events (once per store: a second call finds the first)."""
    for listener in store.feed.listeners:
        if isinstance(listener, AlertDispatcher):
            return listener
    dispatcher = start_alerts(settings) if settings is not None else None
    if dispatcher is not None:
        store.add_event_listener(dispatcher)
    return dispatcher
