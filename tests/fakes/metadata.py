"""A fake cloud instance-metadata server on 127.0.0.1 for the agent's preemption-notice polling.

Models: AWS IMDSv2 (PUT /latest/api/token with X-aws-ec2-metadata-token-ttl-seconds; GETs without a
valid X-aws-ec2-metadata-token get 401; /latest/meta-data/spot/instance-action and
/latest/meta-data/events/recommendations/rebalance are 404 until raised, then 200 JSON), GCP
(/computeMetadata/v1/instance/preempted: FALSE/TRUE; .../instance/maintenance-event: NONE or the event;
403 without Metadata-Flavor: Google), Azure
Scheduled Events (/metadata/scheduledevents?api-version=...: {"DocumentIncarnation", "Events"}; 400
without Metadata: true). Not modelled: token TTL expiry, GCP wait_for_change long-polling, Azure
event acknowledgement (POST StartRequests), IMDS hop limits.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class MetadataState:
    """Switches. Mutate them from the test; the server reads them per request."""

    spot_action: dict[str, str] | None = None
    rebalance: dict[str, str] | None = None
    gcp_preempted: bool = False
    gcp_maintenance: str = "NONE"      # instance/maintenance-event: NONE, MIGRATE_ON_/TERMINATE_ON_HOST_MAINTENANCE
    azure_events: list[dict[str, Any]] = field(default_factory=list)
    azure_incarnation: int = 1
    tokens: set[str] = field(default_factory=set)
    requests: list[str] = field(default_factory=list)

    def raise_aws_spot(self, action: str = "terminate", time: str = "2026-12-02T12:00:00Z") -> None:
        self.spot_action = {"action": action, "time": time}

    def raise_aws_rebalance(self, notice_time: str = "2026-12-02T11:58:00Z") -> None:
        self.rebalance = {"noticeTime": notice_time}

    def raise_gcp_maintenance(self, event: str = "TERMINATE_ON_HOST_MAINTENANCE") -> None:
        self.gcp_maintenance = event

    def raise_gcp_preempted(self) -> None:
        self.gcp_preempted = True

    def raise_azure_preempt(self, event_id: str = "A123BC45-1234-5678-AB90-ABCDEF123456",
                            resource: str = "vm-orch-0") -> None:
        self.azure_events.append({
            "EventId": event_id, "EventStatus": "Scheduled", "EventType": "Preempt",
            "ResourceType": "VirtualMachine", "Resources": [resource], "NotBefore": "Wed, 02 Dec 2026 12:00:30 GMT",
            "Description": "", "EventSource": "Platform", "DurationInSeconds": -1,
        })
        self.azure_incarnation += 1


def _handler(state: MetadataState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def _send(self, code: int, body: str | bytes, ctype: str = "text/plain") -> None:
            data = body.encode() if isinstance(body, str) else body
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:
            state.requests.append(f"PUT {self.path}")
            if urlsplit(self.path).path != "/latest/api/token":
                return self._send(404, "not found")
            if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return self._send(400, "missing ttl")
            token = secrets.token_urlsafe(16)
            state.tokens.add(token)
            return self._send(200, token)

        def do_GET(self) -> None:
            state.requests.append(f"GET {self.path}")
            url = urlsplit(self.path)
            if url.path.startswith("/latest/"):
                if self.headers.get("X-aws-ec2-metadata-token") not in state.tokens:
                    return self._send(401, "")
                doc = {"/latest/meta-data/spot/instance-action": state.spot_action,
                       "/latest/meta-data/events/recommendations/rebalance": state.rebalance}.get(url.path)
                if doc is None:
                    return self._send(404, "Not Found")
                return self._send(200, json.dumps(doc), "application/json")
            if url.path == "/computeMetadata/v1/instance/preempted":
                if self.headers.get("Metadata-Flavor") != "Google":
                    return self._send(403, "Missing Metadata-Flavor:Google header.")
                return self._send(200, "TRUE" if state.gcp_preempted else "FALSE", "application/text")
            if url.path == "/computeMetadata/v1/instance/maintenance-event":
                if self.headers.get("Metadata-Flavor") != "Google":
                    return self._send(403, "Missing Metadata-Flavor:Google header.")
                return self._send(200, state.gcp_maintenance, "application/text")
            if url.path == "/metadata/scheduledevents":
                if self.headers.get("Metadata") != "true":
                    return self._send(400, json.dumps({"error": "Bad request. Required metadata header not specified"}))
                if "api-version" not in parse_qs(url.query):
                    return self._send(400, json.dumps({"error": "Bad request. api-version was not specified"}))
                return self._send(200, json.dumps({"DocumentIncarnation": state.azure_incarnation,
                                                   "Events": state.azure_events}), "application/json")
            return self._send(404, "not found")

    return Handler


@contextmanager
def metadata_server() -> Iterator[tuple[str, MetadataState]]:
    """Yield (base_url, state) for a server on an ephemeral 127.0.0.1 port; shut down on exit."""
    state = MetadataState()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
