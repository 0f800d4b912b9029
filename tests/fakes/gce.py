"""A small, faithful Google Compute Engine REST fake (compute/v1) for the instances orch manages.

Serves what google-cloud-compute sends for instances.insert/get/delete/stop/aggregatedList and
zoneOperations.get/wait/list, in GCE's JSON shapes (camelCase, int64 as strings, Operation
RUNNING -> DONE, errors as ``{"error": {"code", "message", "errors": [{"reason", "message"}]}}``, an
operation's error as ``{"error": {"errors": [{"code": ...}]}, "httpErrorStatusCode": ...}``).
Switches: capacity / quota (operation errors), throttle (429), auth (401), server error (503), a delay,
and ``preempt(zone, name)`` (status TERMINATED + a ``compute.instances.preempted`` system operation).

    python -m tests.fakes.gce --port 8089
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BASE = "https://www.googleapis.com/compute/v1"
_PATH = re.compile(r"^/compute/v1/projects/(?P<project>[^/]+)/(?P<rest>.*)$")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class GceState:
    instances: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)   # (zone, name) -> Instance
    operations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (zone, op) -> Operation
    request_ids: dict[str, tuple[str, str]] = field(default_factory=dict)
    faults: list[list[Any]] = field(default_factory=list)      # [fault, remaining]
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    delay_s: float = 0.0


class GceFake:
    def __init__(self, project: str = "orch-test") -> None:
        self.project = project
        self.state = GceState()
        self.lock = threading.Lock()
        self._ids = itertools.count(1000)
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # --- switches ------------------------------------------------------------------------------------
    def inject(self, fault: str, times: int = 1) -> None:
        """The next ``times`` instance inserts fail with ``fault`` (capacity, quota, throttle, auth,
        server-error); ``times=-1`` until reset."""
        with self.lock:
            self.state.faults.append([fault, times])

    def slow(self, seconds: float) -> None:
        self.state.delay_s = seconds

    def preempt(self, zone: str, name: str) -> None:
        with self.lock:
            inst = self.state.instances[(zone, name)]
            inst["status"] = "TERMINATED"
            op = self._operation(zone, "compute.instances.preempted", inst["selfLink"], done=True, user="system")
            op["statusMessage"] = "Instance was preempted."

    def reset(self) -> None:
        with self.lock:
            self.state = GceState()

    # --- model ---------------------------------------------------------------------------------------
    def _operation(self, zone: str, kind: str, target: str, *, done: bool = False, user: str = "orch@test",
                   error: dict[str, Any] | None = None, http_status: int | None = None) -> dict[str, Any]:
        n = next(self._ids)
        op: dict[str, Any] = {
            "kind": "compute#operation", "id": str(n), "name": f"operation-{n}",
            "operationType": kind, "targetLink": target, "targetId": str(n), "user": user,
            "status": "DONE" if done else "RUNNING", "progress": 100 if done else 0, "insertTime": _now(),
            "zone": f"{BASE}/projects/{self.project}/zones/{zone}",
            "selfLink": f"{BASE}/projects/{self.project}/zones/{zone}/operations/operation-{n}",
        }
        if error is not None:
            op["error"] = error
            op["httpErrorStatusCode"] = http_status or 400
        self.state.operations[(zone, op["name"])] = op
        return op

    def _take_fault(self) -> str | None:
        for entry in self.state.faults:
            if entry[1] != 0:
                if entry[1] > 0:
                    entry[1] -= 1
                return str(entry[0])
        return None

    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        m = _PATH.match(path)
        if not m:
            return 404, _error(404, "notFound", f"no such path {path}")
        rest = m.group("rest")
        with self.lock:
            self.state.requests.append((method, path, body))
            if rest == "aggregated/instances" and method == "GET":
                return 200, self._aggregated(query.get("filter", ""))
            zm = re.match(r"^zones/(?P<zone>[^/]+)/(?P<tail>.*)$", rest)
            if not zm:
                return 404, _error(404, "notFound", f"no such path {path}")
            zone, tail = zm.group("zone"), zm.group("tail")
            if tail == "instances" and method == "POST":
                return self._insert(zone, query.get("requestId"), body)
            if tail == "instances" and method == "GET":
                items = [i for (z, _), i in self.state.instances.items() if z == zone
                         and _matches(i, query.get("filter", ""))]
                return 200, {"kind": "compute#instanceList", "id": f"projects/{self.project}/zones/{zone}/instances",
                             "items": items}
            im = re.match(r"^instances/(?P<name>[^/]+)(?P<action>/stop)?$", tail)
            if im:
                name = im.group("name")
                inst = self.state.instances.get((zone, name))
                if inst is None:
                    return 404, _error(404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}/"
                                       f"instances/{name}' was not found")
                if method == "GET" and not im.group("action"):
                    if inst["status"] in ("PROVISIONING", "STAGING"):
                        inst["status"] = "RUNNING"      # boots between polls
                        return 200, {**inst, "status": "STAGING"}
                    return 200, inst
                if method == "DELETE":
                    del self.state.instances[(zone, name)]
                    return 200, self._operation(zone, "delete", inst["selfLink"])
                if method == "POST" and im.group("action"):
                    inst["status"] = "TERMINATED"
                    return 200, self._operation(zone, "stop", inst["selfLink"])
            om = re.match(r"^operations/(?P<op>[^/]+)(?P<wait>/wait)?$", tail)
            if om:
                op = self.state.operations.get((zone, om.group("op")))
                if op is None:
                    return 404, _error(404, "notFound", "no such operation")
                if om.group("wait") or method == "GET":
                    op["status"] = "DONE"
                    op["progress"] = 100
                return 200, op
            if tail == "operations" and method == "GET":
                items = [o for (z, _), o in self.state.operations.items() if z == zone
                         and _matches(o, query.get("filter", ""))]
                return 200, {"kind": "compute#operationList", "id": f"projects/{self.project}/zones/{zone}/operations",
                             "items": items}
        return 404, _error(404, "notFound", f"no such path {path}")

    def _insert(self, zone: str, request_id: str | None, body: dict[str, Any]) -> tuple[int, Any]:
        if request_id and request_id in self.state.request_ids:
            return 200, self.state.operations[self.state.request_ids[request_id]]
        fault = self._take_fault()
        name = body.get("name", "")
        link = f"{BASE}/projects/{self.project}/zones/{zone}/instances/{name}"
        if fault == "throttle":
            return 429, _error(429, "rateLimitExceeded", "Rate Limit Exceeded")
        if fault == "auth":
            return 401, _error(401, "authError", "Request had invalid authentication credentials.")
        if fault == "server-error":
            return 503, _error(503, "backendError", "Backend Error")
        if fault in ("capacity", "quota"):
            code = "ZONE_RESOURCE_POOL_EXHAUSTED" if fault == "capacity" else "QUOTA_EXCEEDED"
            message = ("The zone does not have enough resources available to fulfill the request." if fault ==
                       "capacity" else "Quota 'NVIDIA_A100_80GB_GPUS' exceeded.")
            op = self._operation(zone, "insert", link, done=True,
                                 error={"errors": [{"code": code, "message": message}]},
                                 http_status=503 if fault == "capacity" else 403)
            return 200, op
        if (zone, name) in self.state.instances:
            return 409, _error(409, "alreadyExists", f"The resource '{link}' already exists")
        n = next(self._ids)
        inst = {
            "kind": "compute#instance", "id": str(n), "name": name,
            "zone": f"{BASE}/projects/{self.project}/zones/{zone}",
            "machineType": body.get("machineType", ""), "status": "PROVISIONING", "selfLink": link,
            "creationTimestamp": _now(), "labels": body.get("labels", {}), "scheduling": body.get("scheduling", {}),
            "guestAccelerators": body.get("guestAccelerators", []), "metadata": body.get("metadata", {}),
            "disks": body.get("disks", []),
            "networkInterfaces": [{"name": "nic0", "networkIP": "10.128.0.2",
                                   "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT",
                                                      "natIP": "127.0.0.1"}]}],
        }
        self.state.instances[(zone, name)] = inst
        op = self._operation(zone, "insert", link)
        if request_id:
            self.state.request_ids[request_id] = (zone, op["name"])
        return 200, op

    def _aggregated(self, flt: str) -> dict[str, Any]:
        items: dict[str, Any] = {}
        for (zone, _), inst in self.state.instances.items():
            if _matches(inst, flt):
                items.setdefault(f"zones/{zone}", {"instances": []})["instances"].append(inst)
        return {"kind": "compute#instanceAggregatedList", "id": f"projects/{self.project}/aggregated/instances",
                "items": items}

    # --- server --------------------------------------------------------------------------------------
    def start(self, port: int = 0) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                query = {k: v[0] for k, v in urllib.parse.parse_qs(parsed.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                if fake.state.delay_s:
                    time.sleep(fake.state.delay_s)
                status, doc = fake.handle(self.command, parsed.path, query, body)
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _error(code: int, reason: str, message: str) -> dict[str, Any]:
    status = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
              409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}.get(code, "UNKNOWN")
    return {"error": {"code": code, "message": message, "errors": [{"message": message, "domain": "global",
                                                                   "reason": reason}], "status": status}}


_TERM = re.compile(r'\(?\s*(?P<key>[\w.\-]+)\s*(?P<op>=|!=|eq|ne)\s*"?(?P<value>[^")\s]*)"?\s*\)?')


def _matches(doc: dict[str, Any], flt: str) -> bool:
    """GCE list filters as orch sends them: ``labels.k = "v"``, ``operationType = "x"``, ANDed."""
    for term in _TERM.finditer(flt or ""):
        value: Any = doc
        for part in term.group("key").split("."):
            value = value.get(part) if isinstance(value, dict) else None
        equal = str(value) == term.group("value") if value is not None else False
        if term.group("op") in ("=", "eq") and not equal:
            return False
        if term.group("op") in ("!=", "ne") and equal:
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description="a fake GCE compute/v1 API")
    parser.add_argument("--port", type=int, default=8089)
    args = parser.parse_args()
    fake = GceFake()
    print(f"serving on {fake.start(args.port)}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
