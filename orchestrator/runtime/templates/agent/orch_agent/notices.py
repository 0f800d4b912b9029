"""The cloud's preemption notices, polled from its metadata service: AWS IMDSv2 (spot interruption, rebalance
recommendation), GCP metadata (preempted, maintenance event), Azure Scheduled Events. Other clouds have none."""

from __future__ import annotations

import json
from typing import Any

DEFAULT_METADATA = {"aws": "http://169.254.169.254", "gcp": "http://metadata.google.internal",
                    "azure": "http://169.254.169.254"}


def _http(method: str, url: str, headers: dict[str, str], timeout: float) -> tuple[int, str]:
    # Imported here, not at the top: urllib.request (http.client, email) is a good part of the agent's own start,
    # which a start waits for, and an agent on a machine without notices never needs it.
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace") if exc.fp else ""


#: Notice kinds that ask for a checkpoint but never drain the job (orchestrator/runtime/status.py NoticeKind).
ADVISORY_KINDS = frozenset({"rebalance-recommendation", "maintenance-event"})


class NoticePoller:
    """Returns the notices the cloud shows now: a list of {cloud, kind, key, detail}. Errors are raised."""

    def __init__(self, cloud: str, base_urls: dict[str, str], timeout: float = 2.0) -> None:
        self.cloud = cloud
        self.base = (base_urls.get(cloud) or DEFAULT_METADATA.get(cloud, "")).rstrip("/")
        self.timeout = timeout

    def poll(self) -> list[dict[str, Any]]:
        if self.cloud == "aws":
            return self._aws()
        if self.cloud == "gcp":
            return self._gcp()
        if self.cloud == "azure":
            return self._azure()
        return []  # Vast, RunPod, Lambda, own machines: no notice to poll

    def _aws(self) -> list[dict[str, Any]]:
        code, token = _http("PUT", f"{self.base}/latest/api/token",
                            {"X-aws-ec2-metadata-token-ttl-seconds": "21600"}, self.timeout)
        if code != 200:
            raise OSError(f"IMDSv2 token: HTTP {code}")
        hdr = {"X-aws-ec2-metadata-token": token}
        found = []
        code, body = _http("GET", f"{self.base}/latest/meta-data/spot/instance-action", hdr, self.timeout)
        if code == 200:
            detail = json.loads(body)
            found.append({"cloud": "aws", "kind": "spot-interruption",
                          "key": f"aws:instance-action:{detail.get('action')}:{detail.get('time')}", "detail": detail})
        elif code != 404:
            raise OSError(f"spot/instance-action: HTTP {code}")
        code, body = _http("GET", f"{self.base}/latest/meta-data/events/recommendations/rebalance", hdr,
                           self.timeout)
        if code == 200:
            detail = json.loads(body)
            found.append({"cloud": "aws", "kind": "rebalance-recommendation",
                          "key": f"aws:rebalance:{detail.get('noticeTime')}", "detail": detail})
        elif code != 404:
            raise OSError(f"events/recommendations/rebalance: HTTP {code}")
        return found

    def _gcp(self) -> list[dict[str, Any]]:
        code, body = _http("GET", f"{self.base}/computeMetadata/v1/instance/preempted",
                           {"Metadata-Flavor": "Google"}, self.timeout)
        if code != 200:
            raise OSError(f"instance/preempted: HTTP {code}")
        found = []
        if body.strip().upper() == "TRUE":
            found.append({"cloud": "gcp", "kind": "preempted", "key": "gcp:preempted",
                          "detail": {"preempted": True}})
        # NONE, or MIGRATE_ON_HOST_MAINTENANCE / TERMINATE_ON_HOST_MAINTENANCE up to 60 min ahead on GPU VMs.
        code, body = _http("GET", f"{self.base}/computeMetadata/v1/instance/maintenance-event",
                           {"Metadata-Flavor": "Google"}, self.timeout)
        if code != 200:
            if found:      # never lose a preemption to a failed advisory poll
                return found
            raise OSError(f"instance/maintenance-event: HTTP {code}")
        event = body.strip()
        if event and event.upper() != "NONE":
            found.append({"cloud": "gcp", "kind": "maintenance-event", "key": f"gcp:maintenance:{event}",
                          "detail": {"maintenance-event": event}})
        return found

    def _azure(self) -> list[dict[str, Any]]:
        code, body = _http("GET", f"{self.base}/metadata/scheduledevents?api-version=2020-07-01",
                           {"Metadata": "true"}, self.timeout)
        if code != 200:
            raise OSError(f"scheduledevents: HTTP {code}")
        doc = json.loads(body)
        found = []
        for ev in doc.get("Events", []):
            if ev.get("EventType") in ("Preempt", "Terminate"):
                kind = "preempt" if ev.get("EventType") == "Preempt" else "terminate"
                found.append({"cloud": "azure", "kind": kind, "key": f"azure:{ev.get('EventId')}", "detail": ev})
        return found
