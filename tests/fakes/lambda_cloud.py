"""A small, faithful fake of the Lambda Cloud REST API v1 (the parts orch uses).

Shapes come from Lambda's published OpenAPI 1.8.3 (copied in tests/fakes/schemas/, see PROVENANCE.md);
tests/test_fake_specs_lambda_runpod.py validates every answer against it. Paths are the spec's,
under ``/api/v1``. Success bodies are ``{"data": ...}``, failures ``{"error": {"code", "message", "suggestion"}}``.

Modelled: instance types with per-region capacity, launch (one instance per call), get, list, terminate,
SSH keys (list/add), Bearer auth, the launch rate limit (429 when launches come faster than
``launch_interval_s``), booting -> active after the instance is read once, terminating -> terminated -> gone.
Switches (``faults.arm(name, times)``; times=-1: until cleared): ``capacity`` and ``quota`` (launch
only), ``throttle`` (429), ``auth`` (401), ``server_error`` (500), ``slow`` (an answer held until the next
request arrives, at most ``slow_s``). Not modelled: filesystems, images, firewall rules, restart, tags,
user_data execution, the general 1 request/s limit, Basic auth.

Run standalone: ``python -m tests.fakes.lambda_cloud --port 8088`` (API key ``test-key``).
"""

from __future__ import annotations

import itertools
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.lr_base import FakeServer, Faults, Recorded, Reply, bearer_ok, serve_forever_cli
from tests.fakes.spec_check import spec_errors

API = "/api/v1"
SPEC = "lambda-cloud-openapi-1.8.3.json"
#: InstanceLaunchRequest.user_data: "The user data string must be plain text and cannot exceed 1MB in size."
USER_DATA_MAX = 1_000_000

# The region codes and names the spec's PublicRegionCode enum allows (a subset, with Lambda's descriptions).
REGIONS = {
    "us-east-1": "Virginia, USA",
    "us-west-1": "California, USA",
    "us-west-2": "Arizona, USA",
    "us-south-1": "Texas, USA",
    "europe-central-1": "Frankfurt, Germany",
    "asia-northeast-1": "Tokyo, Japan",
}

# The routes this fake serves (method, spec path template).
ROUTES = (
    ("get", f"{API}/instance-types"),
    ("get", f"{API}/instances"),
    ("get", f"{API}/instances/{{id}}"),
    ("post", f"{API}/instance-operations/launch"),
    ("post", f"{API}/instance-operations/terminate"),
    ("get", f"{API}/ssh-keys"),
    ("post", f"{API}/ssh-keys"),
)

# Lambda's own launch-request fields (InstanceLaunchRequest.properties); anything else is refused.
LAUNCH_FIELDS = frozenset({
    "region_name", "instance_type_name", "ssh_key_names", "file_system_names", "file_system_mounts",
    "hostname", "name", "image", "user_data", "tags", "firewall_rulesets",
})


@dataclass(frozen=True, slots=True)
class FakeType:
    name: str
    description: str
    gpu_description: str
    price_cents_per_hour: int
    vcpus: int
    memory_gib: int
    storage_gib: int
    gpus: int

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "description": self.description, "gpu_description": self.gpu_description,
            "price_cents_per_hour": self.price_cents_per_hour,
            "specs": {"vcpus": self.vcpus, "memory_gib": self.memory_gib, "storage_gib": self.storage_gib,
                      "gpus": self.gpus},
        }


DEFAULT_TYPES = (
    FakeType("gpu_1x_a10", "1x A10 (24 GB PCIe)", "A10 (24 GB PCIe)", 75, 30, 200, 1400, 1),
    FakeType("gpu_1x_a100_sxm4", "1x A100 (40 GB SXM4)", "A100 (40 GB SXM4)", 129, 30, 200, 512, 1),
    FakeType("gpu_8x_a100_80gb_sxm4", "8x A100 (80 GB SXM4)", "A100 (80 GB SXM4)", 1432, 240, 1800, 20480, 8),
    FakeType("gpu_8x_h100_sxm5", "8x H100 (80 GB SXM5)", "H100 (80 GB SXM5)", 2392, 208, 1800, 22528, 8),
)

DEFAULT_CAPACITY = {
    "gpu_1x_a10": ("us-east-1", "us-west-1"),
    "gpu_1x_a100_sxm4": ("us-west-2",),
    "gpu_8x_a100_80gb_sxm4": (),
    "gpu_8x_h100_sxm5": ("us-east-1", "us-south-1"),
}


@dataclass
class _Inst:
    id: str
    name: str
    type: FakeType
    region: str
    ssh_key_names: list[str]
    status: str = "booting"
    ip: str = ""
    private_ip: str = ""
    reads: int = 0


def _error(status: int, code: str, message: str, suggestion: str | None = None) -> Reply:
    err: dict[str, str] = {"code": code, "message": message}
    if suggestion is not None:
        err["suggestion"] = suggestion
    return Reply(status, {"error": err})


def _unauthorized() -> Reply:
    return _error(401, "global/invalid-api-key", "API key was invalid, expired, or deleted.",
                  "Check your API key or create a new one, then try again.")


@dataclass
class LambdaFake:
    """The cloud's state plus the request handler. Thread-safe; ``reset`` empties it."""

    api_key: str = "test-key"
    launch_interval_s: float = 0.0
    slow_s: float = 0.0
    clock: Callable[[], float] = time.monotonic
    types: tuple[FakeType, ...] = DEFAULT_TYPES
    capacity: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))
    faults: Faults = field(default_factory=Faults)
    requests: list[Recorded] = field(default_factory=list)
    instances: dict[str, _Inst] = field(default_factory=dict)
    ssh_keys: list[dict[str, str]] = field(default_factory=list)
    validated: int = 0                                   # launch bodies checked against the vendored spec
    refusals: list[str] = field(default_factory=list)    # each launch the spec (or its user data limit) refused
    _last_launch: float | None = None
    _ips: itertools.count = field(default_factory=lambda: itertools.count(2))  # type: ignore[type-arg]
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _held: threading.Event | None = None                 # the slow answer waiting for the next request

    def reset(self) -> None:
        with self._lock:
            if self._held is not None:
                self._held.set()
                self._held = None
            self.faults.clear()
            self.requests.clear()
            self.instances.clear()
            self.ssh_keys.clear()
            self.validated = 0
            self.refusals.clear()
            self.capacity = dict(DEFAULT_CAPACITY)
            self._last_launch = None

    def launches(self) -> list[Recorded]:
        return [r for r in self.requests if r.path == f"{API}/instance-operations/launch"]

    # -- request handling --------------------------------------------------------------------------

    def handle(self, method: str, path: str, body: Any, headers: dict[str, str]) -> Reply:
        path = path.split("?", 1)[0]
        authorized = bearer_ok(headers, self.api_key)
        with self._lock:
            held, self._held = self._held, None
            reply = self._dispatch(method, path, body, authorized)
            self.requests.append(Recorded(method, path, body, authorized, reply.status, reply.body, self.clock()))
        if held is not None:
            held.set()   # the client gave up on the slow answer and asked again: it may go now
        if self.slow_s and self.faults.take("slow"):
            # A slow server: the answer waits until the next request arrives (the client timed out and
            # retried), at most ``slow_s``; an event, so a loaded machine cannot make it too fast or too slow.
            wait = threading.Event()
            with self._lock:
                self._held = wait
            wait.wait(self.slow_s)
        return reply

    def _dispatch(self, method: str, path: str, body: Any, authorized: bool) -> Reply:
        if not authorized or self.faults.take("auth"):
            return _unauthorized()
        if self.faults.take("throttle"):
            return _error(429, "global/too-many-requests", "Too many requests.", "Slow down and try again.")
        if self.faults.take("server_error"):
            return _error(500, "global/internal-error", "An internal server error occurred.",
                          "Try again later. Contact Support if the problem persists.")
        route = (method, path)
        if route == ("GET", f"{API}/instance-types"):
            return self._instance_types()
        if route == ("GET", f"{API}/instances"):
            return Reply(200, {"data": [self._read(i) for i in list(self.instances.values())]})
        m = re.fullmatch(rf"{API}/instances/([^/]+)", path)
        if m and method == "GET":
            inst = self.instances.get(m.group(1))
            if inst is None:
                return _error(404, "global/object-does-not-exist", "Specified instance does not exist.")
            return Reply(200, {"data": self._read(inst)})
        if route == ("POST", f"{API}/instance-operations/launch"):
            return self._launch(body)
        if route == ("POST", f"{API}/instance-operations/terminate"):
            return self._terminate(body)
        if route == ("GET", f"{API}/ssh-keys"):
            return Reply(200, {"data": list(self.ssh_keys)})
        if route == ("POST", f"{API}/ssh-keys"):
            return self._add_key(body)
        return _error(404, "global/object-does-not-exist", f"No route {method} {path}.", "Check the URL.")

    def _instance_types(self) -> Reply:
        data = {
            t.name: {
                "instance_type": t.as_json(),
                "regions_with_capacity_available": [
                    {"name": r, "description": REGIONS[r]} for r in self.capacity.get(t.name, ())
                ],
            }
            for t in self.types
        }
        return Reply(200, {"data": data})

    def _invalid(self, message: str) -> Reply:
        return _error(400, "global/invalid-parameters", message, "Check the request and try again.")

    def _launch(self, body: Any) -> Reply:
        now = self.clock()
        if self._last_launch is not None and now - self._last_launch < self.launch_interval_s:
            return _error(429, "global/too-many-requests", "Launch rate limit exceeded.",
                          f"Wait {self.launch_interval_s:g} s between launches.")
        self._last_launch = now
        if not isinstance(body, dict):
            return self._invalid("Request body must be a JSON object.")
        unknown = set(body) - LAUNCH_FIELDS
        if unknown:
            return self._invalid(f"Unknown fields: {', '.join(sorted(unknown))}.")
        # The spec's InstanceLaunchRequest (types, enums, lengths, the image's id/family forms) and its 1 MB user data.
        self.validated += 1
        wrong = spec_errors(SPEC, "#/components/schemas/InstanceLaunchRequest", body)
        if wrong:
            self.refusals.append(wrong[0])
            return self._invalid(f"Invalid request data: {wrong[0]}")
        if len(str(body.get("user_data", "")).encode()) > USER_DATA_MAX:
            self.refusals.append("user_data")
            return self._invalid("The user data string must be plain text and cannot exceed 1MB in size.")
        for key in ("region_name", "instance_type_name", "ssh_key_names"):
            if key not in body:
                return self._invalid(f"Missing field {key}.")
        region, type_name, keys = body["region_name"], body["instance_type_name"], body["ssh_key_names"]
        name = body.get("name", "")
        if region not in REGIONS:
            return self._invalid(f"Unknown region {region!r}.")
        if not isinstance(keys, list) or len(keys) != 1:
            return self._invalid("Exactly one SSH key must be specified.")
        if not isinstance(name, str) or len(name) > 64:
            return self._invalid("name must be a string of 64 characters or fewer.")
        itype = next((t for t in self.types if t.name == type_name), None)
        if itype is None:
            return _error(404, "global/object-does-not-exist", f"Instance type {type_name!r} does not exist.",
                          "List instance types and choose one.")
        if keys[0] not in {k["name"] for k in self.ssh_keys}:
            return _error(404, "global/object-does-not-exist", f"SSH key {keys[0]!r} does not exist.",
                          "Add the SSH key first.")
        if self.faults.take("quota"):
            return _error(400, "global/quota-exceeded", "Quota exceeded.", "Contact Support to increase your quota.")
        if self.faults.take("capacity") or region not in self.capacity.get(type_name, ()):
            return _error(400, "instance-operations/launch/insufficient-capacity",
                          "Not enough capacity to fulfill launch request.", "Try another region or type.")
        inst = _Inst(uuid.uuid4().hex, name, itype, region, list(keys))
        self.instances[inst.id] = inst
        return Reply(200, {"data": {"instance_ids": [inst.id]}})

    def _terminate(self, body: Any) -> Reply:
        wrong = spec_errors(SPEC, "#/components/schemas/InstanceTerminateRequest", body)
        if wrong:
            self.refusals.append(wrong[0])
            return self._invalid(f"Invalid request data: {wrong[0]}")
        ids = body.get("instance_ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            return self._invalid("instance_ids must be a list of strings.")
        missing = [i for i in ids if i not in self.instances]
        if missing:
            return _error(404, "global/object-does-not-exist", "Specified instance does not exist.")
        done = []
        for i in ids:
            inst = self.instances[i]
            if inst.status not in ("terminating", "terminated"):
                inst.status = "terminating"
            done.append(self._as_json(inst))
        return Reply(200, {"data": {"terminated_instances": done}})

    def _add_key(self, body: Any) -> Reply:
        # The spec's AddSSHKeyRequest: name 1-64 characters (required), public_key at most 4096.
        wrong = spec_errors(SPEC, "#/components/schemas/AddSSHKeyRequest", body)
        if wrong:
            self.refusals.append(wrong[0])
            return self._invalid(f"Invalid request data: {wrong[0]}")
        if not isinstance(body, dict) or not isinstance(body.get("name"), str) or not body["name"]:
            return self._invalid("name is required.")
        if any(k["name"] == body["name"] for k in self.ssh_keys):
            return self._invalid(f"An SSH key named {body['name']!r} already exists.")
        public_key = body.get("public_key")
        if not isinstance(public_key, str) or not public_key:
            return self._invalid("This fake does not generate key pairs: give public_key.")
        key = {"id": uuid.uuid4().hex, "name": body["name"], "public_key": public_key}
        self.ssh_keys.append(key)
        return Reply(200, {"data": key})

    # -- lifecycle ---------------------------------------------------------------------------------

    def _read(self, inst: _Inst) -> dict[str, Any]:
        """Answer with the current state, then move the instance on (booting -> active, terminating -> ...)."""
        shown = self._as_json(inst)
        inst.reads += 1
        if inst.status == "booting":
            inst.status = "active"
            n = next(self._ips)
            inst.ip, inst.private_ip = f"198.51.100.{n}", f"10.0.2.{n}"
        elif inst.status == "terminating":
            inst.status = "terminated"
        elif inst.status == "terminated":
            del self.instances[inst.id]  # Lambda drops terminated instances from its listings
        return shown

    def _as_json(self, inst: _Inst) -> dict[str, Any]:
        running = inst.status in ("active", "unhealthy")
        reason = "vm-has-not-launched" if inst.status == "booting" else "vm-is-terminating"
        action = {"available": running} if running else {
            "available": False, "reason_code": reason,
            "reason_description": f"The instance is {inst.status}.",
        }
        out: dict[str, Any] = {
            "id": inst.id,
            "name": inst.name,
            "status": inst.status,
            "ssh_key_names": inst.ssh_key_names,
            "file_system_names": [],
            "region": {"name": inst.region, "description": REGIONS[inst.region]},
            "instance_type": inst.type.as_json(),
            "actions": {k: dict(action) for k in ("migrate", "rebuild", "restart", "cold_reboot", "terminate")},
        }
        out["actions"]["terminate"] = {"available": inst.status not in ("terminating", "terminated")}
        if inst.ip:
            out.update(ip=inst.ip, private_ip=inst.private_ip, hostname=inst.ip.replace(".", "-"))
        return out


def start_lambda_fake(port: int = 0, **kwargs: Any) -> tuple[LambdaFake, FakeServer]:
    fake = LambdaFake(**kwargs)
    return fake, FakeServer(fake.handle, port).start()


if __name__ == "__main__":
    serve_forever_cli("lambda_cloud", lambda port: FakeServer(LambdaFake().handle, port))
