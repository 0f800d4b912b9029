"""Structured JSON logs and the daemon's Prometheus metrics (served on localhost only).

Log lines never carry a credential: both formats pass through ``orchestrator.redaction.redact``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from orchestrator.redaction import redact


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, plus any ``extra={"fields": {...}}``."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            doc.update(fields)
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        return redact(json.dumps(doc, default=str))


class RedactingFormatter(logging.Formatter):
    """The text log format, with every secret-looking value redacted (as the JSON one). The structured fields
    the JSON format carries (``extra={"fields": {...}}``: provider, outcome, error, counts) follow the message
    as ``key=value`` (a value with a space, quote or ``=`` is JSON-quoted), so both formats say the same."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
        return redact(line)


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(text) if not text or any(c in text for c in ' "=\n\t') else text


def configure_json_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("orch")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


@dataclass
class DaemonMetrics:
    """Every metric the daemon exports; one registry per daemon so tests can read their own."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.jobs = Gauge("orch_jobs", "Jobs by state", ["state"], registry=r)
        self.instances = Gauge("orch_instances", "Live instances by provider and market", ["provider", "market"],
                               registry=r)
        self.burn_usd_per_hour = Gauge("orch_burn_usd_per_hour", "Sum of $/h of live instances", registry=r)
        self.preemptions = Counter("orch_preemptions", "Preemptions seen", ["provider"], registry=r)
        self.relaunch_latency = Histogram(
            "orch_relaunch_latency_seconds", "Preemption noticed -> replacement launch accepted",
            buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600), registry=r)
        self.idle_shutdowns = Counter("orch_idle_shutdowns", "Instances stopped or terminated as idle",
                                      ["action"], registry=r)
        self.orphans_terminated = Counter("orch_orphans_terminated", "Tagged instances unknown to the store, "
                                          "terminated after the grace period", ["provider"], registry=r)
        self.ticks = Counter("orch_ticks", "Scheduler job runs", ["job", "outcome"], registry=r)

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Expose /metrics on localhost (never on a public interface by default)."""
        from prometheus_client import start_http_server

        start_http_server(port, addr=host, registry=self.registry)
