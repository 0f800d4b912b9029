"""A small, faithful fake of the Google Compute Engine REST API (compute/v1), for the calls orch makes.

Routes (``/compute/v1/projects/P/...``): zones/Z/instances (POST insert with ?requestId=, GET list with
``filter``), zones/Z/instances/NAME (GET, DELETE), zones/Z/instances/NAME/stop (POST),
aggregated/instances (GET with ``filter``), zones/Z/operations (GET list with ``filter``),
zones/Z/operations/OP (GET) and zones/Z/operations/OP/wait (POST); global/firewalls (POST insert with
?requestId=, GET list), global/firewalls/NAME (GET, PATCH, DELETE), global/operations/OP (GET) and
global/operations/OP/wait (POST); regions/R/resourcePolicies (POST insert with ?requestId=, GET list),
regions/R/resourcePolicies/NAME (GET, DELETE), aggregated/resourcePolicies (GET), regions/R/operations/OP
(GET) and regions/R/operations/OP/wait (POST); global/images/NAME and global/images/family/FAMILY (GET) for the
images the fake holds (``IMAGES``, ``add_image``; an image it does not hold answers notFound). A boot disk smaller
than its image (``initializeParams.diskSizeGb`` under the image's ``diskSizeGb``) is refused 400 ``invalid``
"Invalid value for field 'resource.disks[0].initializeParams.diskSizeGb': '10'. Requested disk size cannot be
smaller than the image size (50 GB)" as GCE refuses it (its words as reported, e.g. digio/terraform-google-gitlab-
runner#3, BasedHardware/omi#7155); a sourceImage the fake does not hold is taken as before. Firewall and resource
policy changes finish at once (their operation is DONE when returned), as GCE's usually do within a wait; a rule
mixing IPv4 and IPv6 source ranges is refused, as GCE does. An instance naming a resource policy that does not
exist (or is in another region) is refused; deleting a policy an instance still names answers
``resourceInUseByAnotherResource``.

Reachability is evaluated, not assumed: ``reachable(src, dst, port)`` applies the VPC firewall as GCE does
(the implied deny-all ingress, then the enabled INGRESS allow rules of the network both NICs are on, matched
by target tags, source tags or source ranges, protocol and port). Every network here is a custom VPC with no
rules of its own (no ``default-allow-internal``): what admits traffic is what orch created.

Shapes follow the discovery document (camelCase, int64 as strings, selfLink/zone as full URLs); the
contract test validates them against it. Errors use Google's JSON error format; failed operations carry
``error.errors[].code`` and ``httpErrorStatusCode``. A repeated insert with a known requestId returns the
first insert's operation (GCE's dedupe). Time does not pass on its own: every read of an operation or
instance moves it one step on (Operation RUNNING -> DONE; instance PROVISIONING -> STAGING -> RUNNING;
STOPPING -> TERMINATED after stop, -> gone after delete), so tests observe transitions without sleeping.

Switches (``GceFake.inject``) apply to instance inserts: capacity and quota fail the operation,
throttle (429), auth (401) and server-error (503) fail the HTTP call. ``delay_s`` slows every response;
``preempt(zone, name)`` does what GCE does to a spot VM. Every insert body is first held to GCE's contract
(tests/fakes/gce_contract.py: the Discovery document's Instance schema, sourceImage form, metadata limits).

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

from tests.fakes.gce_contract import GceRefusal, check_instance_insert, check_resource_policy_insert, check_tags

BASE = "https://www.googleapis.com/compute/v1"
FAULTS = ("capacity", "quota", "throttle", "auth", "server-error")
_PATH = re.compile(r"^/compute/v1/projects/(?P<project>[^/]+)/(?P<rest>.*)$")
_TERM = re.compile(r'\(?\s*(?P<field>[A-Za-z0-9_.\-]+)\s*(?P<op>=|!=|eq|ne)\s*"?(?P<value>[^"()\s]*)"?\s*\)?')


#: The images the fake holds: (image project, "family/F" or the image's name) -> diskSizeGb. The sizes are the
#: fake's own (a test assumption, not Google's figures); orch's default image family is among them.
IMAGES: dict[tuple[str, str], int] = {
    ("deeplearning-platform-release", "family/common-cu124-debian-11-py310"): 50,
    ("debian-cloud", "family/debian-12"): 10,
}
_IMAGE_REF = re.compile(r"^(?:https://(?:www|compute)\.googleapis\.com/compute/(?:v1|beta|alpha)/)?"
                        r"(?:projects/(?P<project>[^/]+)/)?global/images/(?P<key>(?:family/)?[^/]+)$")


def image_key(ref: str, project: str) -> tuple[str, str] | None:
    """(image project, "family/F" or name) of a sourceImage reference; its project defaults to ``project``."""
    m = _IMAGE_REF.match(ref)
    return (m.group("project") or project, m.group("key")) if m else None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class _State:
    instances: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)   # (zone, name) -> Instance
    operations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (zone, op) -> Operation
    request_ids: dict[str, tuple[str, str]] = field(default_factory=dict)            # requestId -> (zone, op)
    firewalls: dict[str, dict[str, Any]] = field(default_factory=dict)               # name -> Firewall
    global_operations: dict[str, dict[str, Any]] = field(default_factory=dict)       # op name -> Operation
    policies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)    # (region, name) -> policy
    region_operations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (region, op) -> Op
    pending: dict[tuple[str, str], str] = field(default_factory=dict)                # (zone, name) -> "stop"|"delete"
    faults: dict[str, int] = field(default_factory=dict)
    requests: list[RecordedRequest] = field(default_factory=list)
    images: dict[tuple[str, str], int] = field(default_factory=lambda: dict(IMAGES))   # see IMAGES


def _tags(inst: dict[str, Any]) -> set[str]:
    return set((inst.get("tags") or {}).get("items") or [])


def _port_in(port: int, ports: list[str] | None) -> bool:
    if not ports:
        return True
    for spec in ports:
        low, _, high = spec.partition("-")
        if int(low) <= port <= int(high or low):
            return True
    return False


def _region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def _policy_key(url: str) -> tuple[str, str] | None:
    parts = url.rstrip("/").split("/")
    if "resourcePolicies" not in parts or "regions" not in parts:
        return None
    return parts[parts.index("regions") + 1], parts[parts.index("resourcePolicies") + 1]


def _error(code: int, status: str, reason: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status,
                      "errors": [{"reason": reason, "domain": "global", "message": message}]}}


def matches_filter(resource: dict[str, Any], expr: str) -> bool:
    """GCE list filters, the subset orch sends: ``a = "b"`` terms joined by AND or juxtaposed."""
    expr = re.sub(r"\bAND\b", " ", expr)
    for m in _TERM.finditer(expr):
        value: Any = resource
        for part in m.group("field").split("."):
            value = value.get(part) if isinstance(value, dict) else None
        equal = str(value) == m.group("value") if value is not None else False
        if equal != (m.group("op") in ("=", "eq")):
            return False
    return True


class GceFake:
    """The fake's state and logic, separate from HTTP so tests can reach in (``preempt``, ``inject``)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self._lock = threading.RLock()
        self._state = _State()
        self._ids = itertools.count(1000)
        self.validated = 0   # instance inserts checked against the Discovery document
        self.refusals: list[GceRefusal] = []   # each insert GCE would have refused (schema or limits)

    # --- switches ------------------------------------------------------------------------------------
    def inject(self, fault: str, times: int = 1) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {FAULTS}")
        with self._lock:
            self._state.faults[fault] = times

    def add_image(self, project: str, name: str, disk_size_gb: int) -> None:
        """Hold an image (``name``, or ``family/F``) of ``disk_size_gb`` in ``project``."""
        with self._lock:
            self._state.images[(project, name)] = disk_size_gb

    def reset(self) -> None:
        with self._lock:
            self._state = _State()
            self.refusals.clear()
            self.validated = 0

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._state.requests)

    def instance(self, zone: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._state.instances.get((zone, name))

    def firewall(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._state.firewalls.get(name)

    def policy(self, region: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._state.policies.get((region, name))

    def reachable(self, src: tuple[str, str], dst: tuple[str, str], port: int, protocol: str = "tcp") -> bool:
        """Whether instance ``src`` (zone, name) reaches ``dst`` on ``protocol``/``port`` over a network both
        have a NIC on, by the firewall rules as GCE applies them (ingress is denied unless a rule allows it)."""
        with self._lock:
            a, b = self._state.instances[src], self._state.instances[dst]
            for nic_a in a.get("networkInterfaces", []):
                for nic_b in b.get("networkInterfaces", []):
                    if nic_a["network"] == nic_b["network"] and self._admits(
                            nic_b["network"], _tags(b), source_ip=nic_a["networkIP"], source_tags=_tags(a),
                            protocol=protocol, port=port):
                        return True
            return False

    def reachable_from(self, address: str, dst: tuple[str, str], port: int, protocol: str = "tcp") -> bool:
        """Whether an outside ``address`` (no network tags) reaches ``dst`` on any of its NICs."""
        with self._lock:
            b = self._state.instances[dst]
            return any(self._admits(nic["network"], _tags(b), source_ip=address, source_tags=set(),
                                    protocol=protocol, port=port) for nic in b.get("networkInterfaces", []))

    def _admits(self, network: str, target_tags: set[str], *, source_ip: str, source_tags: set[str],
                protocol: str, port: int) -> bool:
        import ipaddress

        for fw in self._state.firewalls.values():
            if fw["network"] != network or fw.get("direction") != "INGRESS" or fw.get("disabled"):
                continue
            if fw.get("targetTags") and not set(fw["targetTags"]) & target_tags:
                continue
            by_tag = bool(set(fw.get("sourceTags") or []) & source_tags)
            by_range = any(ipaddress.ip_address(source_ip) in ipaddress.ip_network(r, strict=False)
                           for r in fw.get("sourceRanges") or [] if (":" in r) == (":" in source_ip))
            if not (by_tag or by_range):
                continue
            for allowed in fw.get("allowed") or []:
                proto = allowed.get("IPProtocol")
                if proto == "all" or (proto == protocol and _port_in(port, allowed.get("ports"))):
                    return True
        return False

    def preempt(self, zone: str, name: str) -> None:
        """GCE reclaiming a spot VM: TERMINATED (STOP action) or gone (DELETE), plus a system operation."""
        with self._lock:
            inst = self._state.instances[(zone, name)]
            project = inst["selfLink"].split("/projects/")[1].split("/")[0]
            op = self._new_op(project, zone, "compute.instances.preempted", inst, user="system")
            op.update(status="DONE", progress=100, endTime=_now(),
                      statusMessage="Instance was preempted.")
            if inst.get("scheduling", {}).get("instanceTerminationAction") == "DELETE":
                del self._state.instances[(zone, name)]
            else:
                inst["status"] = "TERMINATED"
            self._state.pending.pop((zone, name), None)

    # --- helpers -------------------------------------------------------------------------------------
    def _take_fault(self) -> str | None:
        for fault in FAULTS:
            left = self._state.faults.get(fault, 0)
            if left > 0:
                self._state.faults[fault] = left - 1
                return fault
        return None

    def _new_op(self, project: str, zone: str, op_type: str, target: dict[str, Any] | str,
                user: str = "orch@example.iam.gserviceaccount.com") -> dict[str, Any]:
        op_id = str(next(self._ids))
        name = f"operation-{op_id}"
        target_link = target if isinstance(target, str) else target["selfLink"]
        op: dict[str, Any] = {
            "kind": "compute#operation", "id": op_id, "name": name,
            "zone": f"{BASE}/projects/{project}/zones/{zone}", "operationType": op_type,
            "targetLink": target_link,
            # A failed insert still names the id GCE had allocated for the instance.
            "targetId": str(next(self._ids)) + "000000000" if isinstance(target, str) else target["id"],
            "status": "RUNNING", "user": user, "progress": 0,
            "insertTime": _now(), "startTime": _now(),
            "selfLink": f"{BASE}/projects/{project}/zones/{zone}/operations/{name}",
        }
        self._state.operations[(zone, name)] = op
        return op

    def _advance_op(self, op: dict[str, Any]) -> None:
        if op["status"] != "DONE":
            op.update(status="DONE", progress=100, endTime=_now())

    def _advance_instance(self, key: tuple[str, str]) -> None:
        inst = self._state.instances.get(key)
        if inst is None:
            return
        action = self._state.pending.get(key)
        if action == "delete":
            del self._state.instances[key]
            del self._state.pending[key]
        elif action == "stop":
            inst["status"] = "TERMINATED"
            del self._state.pending[key]
        elif inst["status"] == "PROVISIONING":
            inst["status"] = "STAGING"
        elif inst["status"] == "STAGING":
            inst["status"] = "RUNNING"

    def _build_instance(self, project: str, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        inst = json.loads(json.dumps(body))
        inst.update({
            "kind": "compute#instance", "id": str(next(self._ids)) + "000000000",
            "status": "PROVISIONING", "creationTimestamp": _now(),
            "zone": f"{BASE}/projects/{project}/zones/{zone}",
            "selfLink": f"{BASE}/projects/{project}/zones/{zone}/instances/{body['name']}",
            "machineType": f"{BASE}/projects/{project}/{body.get('machineType', '')}",
        })
        if "tags" in inst:
            inst["tags"]["fingerprint"] = "42WmSpB8rSM="
        for i, nic in enumerate(inst.get("networkInterfaces", [])):
            nic.setdefault("name", f"nic{i}")
            network = nic.get("network") or "global/networks/default"
            nic["network"] = network if network.startswith("https://") else f"{BASE}/projects/{project}/{network}"
            nic["networkIP"] = f"10.{128 + i}.0.{len(self._state.instances) + 2}"
            for ac in nic.get("accessConfigs", []):
                ac["natIP"] = f"34.1.0.{len(self._state.instances) + 2}"
        inst["resourcePolicies"] = [f"{BASE}/{u}" if not u.startswith("https://") else u
                                    for u in inst.get("resourcePolicies", [])]
        if not inst["resourcePolicies"]:
            del inst["resourcePolicies"]
        for disk in inst.get("disks", []):
            disk.pop("initializeParams", None)   # output Instances show the disk, not how it was made
            disk.setdefault("type", "PERSISTENT")
            disk["source"] = f"{BASE}/projects/{project}/zones/{zone}/disks/{body['name']}"
        return inst

    # --- the API -------------------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict[str, str], body: dict[str, Any] | None
               ) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self._state.requests.append(RecordedRequest(method, path, dict(query), body))
            m = _PATH.match(path)
            if m is None:
                return 404, _error(404, "NOT_FOUND", "notFound", f"no such path {path}")
            project, parts = m.group("project"), m.group("rest").split("/")
            return self._route(method, project, parts, query, body)

    def _route(self, method: str, project: str, parts: list[str], query: dict[str, str],
               body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        flt = query.get("filter", "")
        if parts == ["aggregated", "instances"] and method == "GET":
            for key in list(self._state.instances):
                self._advance_instance(key)
            items: dict[str, Any] = {}
            for (zone, _), inst in sorted(self._state.instances.items()):
                if matches_filter(inst, flt):
                    items.setdefault(f"zones/{zone}", {"instances": []})["instances"].append(inst)
            return 200, {"kind": "compute#instanceAggregatedList", "id": f"projects/{project}/aggregated/instances",
                         "items": items, "selfLink": f"{BASE}/projects/{project}/aggregated/instances"}
        if parts == ["aggregated", "resourcePolicies"] and method == "GET":
            scoped: dict[str, Any] = {}
            for (region, _), pol in sorted(self._state.policies.items()):
                scoped.setdefault(f"regions/{region}", {"resourcePolicies": []})["resourcePolicies"].append(pol)
            return 200, {"kind": "compute#resourcePolicyAggregatedList", "items": scoped,
                         "id": f"projects/{project}/aggregated/resourcePolicies",
                         "selfLink": f"{BASE}/projects/{project}/aggregated/resourcePolicies"}
        if len(parts) >= 3 and parts[0] == "regions" and parts[2] == "resourcePolicies":
            return self._policies(method, project, parts[1], parts[3:], query, body)
        if len(parts) >= 4 and parts[0] == "regions" and parts[2] == "operations":
            op = self._state.region_operations.get((parts[1], parts[3]))
            if op is None:
                return 404, _error(404, "NOT_FOUND", "notFound", f"The resource operation '{parts[3]}' was not found")
            if (len(parts) == 4 and method == "GET") or (parts[4:] == ["wait"] and method == "POST"):
                return 200, op
        if parts[:2] == ["global", "images"] and method == "GET" and len(parts) in (3, 4):
            return self._image(project, "/".join(parts[2:]))
        if parts[:2] == ["global", "firewalls"]:
            return self._firewalls(method, project, parts[2:], query, body)
        if parts[:2] == ["global", "operations"] and len(parts) >= 3:
            op = self._state.global_operations.get(parts[2])
            if op is None:
                return 404, _error(404, "NOT_FOUND", "notFound", f"The resource operation '{parts[2]}' was not found")
            if (len(parts) == 3 and method == "GET") or (parts[3:] == ["wait"] and method == "POST"):
                return 200, op
        if len(parts) < 3 or parts[0] != "zones":
            return 404, _error(404, "NOT_FOUND", "notFound", "unknown resource")
        zone, kind, rest = parts[1], parts[2], parts[3:]
        if kind == "instances":
            return self._instances(method, project, zone, rest, query, body)
        if kind == "operations":
            return self._operations(method, project, zone, rest, flt)
        return 404, _error(404, "NOT_FOUND", "notFound", f"unknown collection {kind}")

    def _image(self, project: str, key: str) -> tuple[int, dict[str, Any]]:
        size = self._state.images.get((project, key))
        if size is None:
            return 404, _error(404, "NOT_FOUND", "notFound",
                               f"The resource 'projects/{project}/global/images/{key}' was not found")
        family = key.split("/", 1)[1] if key.startswith("family/") else None
        name = f"{family}-v20260101" if family else key
        image = {"kind": "compute#image", "id": str(next(self._ids)) + "000000000", "name": name,
                 "diskSizeGb": str(size), "status": "READY", "creationTimestamp": _now(),
                 "selfLink": f"{BASE}/projects/{project}/global/images/{name}"}
        return 200, {**image, "family": family} if family else image

    def _disk_below_image(self, project: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """GCE's refusal of a boot disk smaller than its image (module docstring), for the images the fake holds."""
        for i, disk in enumerate(body.get("disks") or []):
            params = disk.get("initializeParams") or {}
            key = image_key(str(params.get("sourceImage") or ""), project)
            size = self._state.images.get(key) if key else None
            asked = params.get("diskSizeGb")
            if size is not None and asked is not None and int(asked) < size:
                return _error(400, "INVALID_ARGUMENT", "invalid", f"Invalid value for field 'resource.disks[{i}]."
                              f"initializeParams.diskSizeGb': '{asked}'. Requested disk size cannot be smaller than "
                              f"the image size ({size} GB)")
        return None

    def _instances(self, method: str, project: str, zone: str, rest: list[str], query: dict[str, str],
                   body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        if not rest and method == "POST":
            return self._insert(project, zone, query.get("requestId"), body or {})
        if not rest and method == "GET":
            for key in [k for k in self._state.instances if k[0] == zone]:
                self._advance_instance(key)
            found = [i for (z, _), i in sorted(self._state.instances.items())
                     if z == zone and matches_filter(i, query.get("filter", ""))]
            return 200, {"kind": "compute#instanceList", "id": f"projects/{project}/zones/{zone}/instances",
                         "items": found, "selfLink": f"{BASE}/projects/{project}/zones/{zone}/instances"}
        key = (zone, rest[0])
        if key not in self._state.instances:
            return 404, _error(404, "NOT_FOUND", "notFound",
                               f"The resource 'projects/{project}/zones/{zone}/instances/{rest[0]}' was not found")
        inst = self._state.instances[key]
        if len(rest) == 1 and method == "GET":
            self._advance_instance(key)
            if key not in self._state.instances:
                return 404, _error(404, "NOT_FOUND", "notFound", f"The resource '{rest[0]}' was not found")
            return 200, inst
        if len(rest) == 1 and method == "DELETE":
            op = self._new_op(project, zone, "delete", inst)
            inst["status"] = "STOPPING"
            self._state.pending[key] = "delete"
            return 200, op
        if rest[1:] == ["stop"] and method == "POST":
            op = self._new_op(project, zone, "stop", inst)
            if inst["status"] != "TERMINATED":
                inst["status"] = "STOPPING"
                self._state.pending[key] = "stop"
            return 200, op
        return 400, _error(400, "INVALID_ARGUMENT", "invalid", f"unsupported {method} on instance")

    def _insert(self, project: str, zone: str, request_id: str | None, body: dict[str, Any]
                ) -> tuple[int, dict[str, Any]]:
        if request_id and request_id in self._state.request_ids:
            return 200, self._state.operations[self._state.request_ids[request_id]]
        self.validated += 1
        refusal = check_instance_insert(body)   # GCE's Discovery schema and limits (tests/fakes/gce_contract.py)
        if refusal is not None:
            self.refusals.append(refusal)
            return refusal.status, _error(refusal.status, refusal.rpc_status, refusal.reason, refusal.message)
        fault = self._take_fault()
        if fault == "throttle":
            return 429, _error(429, "RESOURCE_EXHAUSTED", "rateLimitExceeded", "Rate Limit Exceeded")
        if fault == "auth":
            return 401, _error(401, "UNAUTHENTICATED", "authError", "Request had invalid authentication credentials.")
        if fault == "server-error":
            return 503, _error(503, "UNAVAILABLE", "backendError", "Backend Error")
        name = body.get("name", "")
        if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name):
            return 400, _error(400, "INVALID_ARGUMENT", "invalid", f"Invalid value for field 'resource.name': '{name}'")
        too_small = self._disk_below_image(project, body)
        if too_small is not None:
            return 400, too_small
        for url in body.get("resourcePolicies") or []:
            key = _policy_key(url)
            if key is None or key not in self._state.policies:
                return 404, _error(404, "NOT_FOUND", "notFound", f"The resource '{url}' was not found")
            if key[0] != _region_of(zone):
                return 400, _error(400, "INVALID_ARGUMENT", "invalid",
                                   f"Resource policy '{url}' is not in the region of zone '{zone}'.")
        if (zone, name) in self._state.instances:
            return 409, _error(409, "ALREADY_EXISTS", "alreadyExists",
                               f"The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists")
        target = f"{BASE}/projects/{project}/zones/{zone}/instances/{name}"
        if fault in ("capacity", "quota"):
            op = self._new_op(project, zone, "insert", target)
            if fault == "capacity":
                code, status = "ZONE_RESOURCE_POOL_EXHAUSTED", 503
                msg = f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available."
            else:
                code, status = "QUOTA_EXCEEDED", 403
                msg = f"Quota 'NVIDIA_L4_GPUS' exceeded. Limit: 0.0 in region {zone.rsplit('-', 1)[0]}."
            op.update(error={"errors": [{"code": code, "message": msg}]}, httpErrorStatusCode=status,
                      httpErrorMessage="SERVICE UNAVAILABLE" if status == 503 else "FORBIDDEN")
        else:
            inst = self._build_instance(project, zone, body)
            self._state.instances[(zone, name)] = inst
            op = self._new_op(project, zone, "insert", inst)
        if request_id:
            self._state.request_ids[request_id] = (zone, op["name"])
        return 200, op

    # --- firewalls (global) ----------------------------------------------------------------------------
    def _global_op(self, project: str, op_type: str, target_link: str, target_id: str) -> dict[str, Any]:
        op_id = str(next(self._ids))
        name = f"operation-{op_id}"
        op: dict[str, Any] = {
            "kind": "compute#operation", "id": op_id, "name": name, "operationType": op_type,
            "targetLink": target_link, "targetId": target_id, "status": "DONE", "progress": 100,
            "user": "orch@example.iam.gserviceaccount.com", "insertTime": _now(), "startTime": _now(),
            "endTime": _now(), "selfLink": f"{BASE}/projects/{project}/global/operations/{name}",
        }
        self._state.global_operations[name] = op
        return op

    def _firewalls(self, method: str, project: str, rest: list[str], query: dict[str, str],
                   body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        link = f"{BASE}/projects/{project}/global/firewalls"
        if not rest and method == "GET":
            flt = query.get("filter", "")
            items = [fw for _, fw in sorted(self._state.firewalls.items()) if matches_filter(fw, flt)]
            return 200, {"kind": "compute#firewallList", "id": f"projects/{project}/global/firewalls",
                         "items": items, "selfLink": link}
        if not rest and method == "POST":
            request_id = query.get("requestId")
            if request_id and request_id in self._state.request_ids:
                return 200, self._state.global_operations[self._state.request_ids[request_id][1]]
            status, out = self._insert_firewall(project, body or {})
            if status == 200 and request_id:
                self._state.request_ids[request_id] = ("global", out["name"])
            return status, out
        name = rest[0] if rest else ""
        fw = self._state.firewalls.get(name)
        if fw is None:
            return 404, _error(404, "NOT_FOUND", "notFound",
                               f"The resource 'projects/{project}/global/firewalls/{name}' was not found")
        if len(rest) == 1 and method == "GET":
            return 200, fw
        if len(rest) == 1 and method == "DELETE":
            del self._state.firewalls[name]
            return 200, self._global_op(project, "delete", fw["selfLink"], fw["id"])
        if len(rest) == 1 and method == "PATCH":
            merged = {**fw, **{k: v for k, v in (body or {}).items() if k not in ("name", "id", "selfLink")}}
            problem = self._firewall_problem(merged)
            if problem:
                return 400, _error(400, "INVALID_ARGUMENT", "invalid", problem)
            self._state.firewalls[name] = merged
            return 200, self._global_op(project, "patch", fw["selfLink"], fw["id"])
        return 400, _error(400, "INVALID_ARGUMENT", "invalid", f"unsupported {method} on firewall")

    @staticmethod
    def _firewall_problem(fw: dict[str, Any]) -> str | None:
        ranges = fw.get("sourceRanges") or []
        if fw.get("direction", "INGRESS") == "INGRESS" and not (ranges or fw.get("sourceTags")
                                                                or fw.get("sourceServiceAccounts")):
            return "Invalid value for field 'resource.sourceRanges': an INGRESS rule needs a source."
        if {":" in r for r in ranges} == {True, False}:
            return "Invalid value for field 'resource.sourceRanges': IPv4 and IPv6 ranges cannot be mixed."
        if not (fw.get("allowed") or fw.get("denied")):
            return "Invalid value for field 'resource': a rule needs allowed or denied."
        for key in ("targetTags", "sourceTags"):   # network tags: RFC 1035 labels (gce_contract.check_tags)
            refusal = check_tags(f"resource.{key}", fw.get(key) or [])
            if refusal is not None:
                return refusal.message
        return None

    def _insert_firewall(self, project: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body.get("name", "")
        if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name):
            return 400, _error(400, "INVALID_ARGUMENT", "invalid", f"Invalid value for field 'resource.name': '{name}'")
        if name in self._state.firewalls:
            return 409, _error(409, "ALREADY_EXISTS", "alreadyExists",
                               f"The resource 'projects/{project}/global/firewalls/{name}' already exists")
        problem = self._firewall_problem(body)
        if problem:
            return 400, _error(400, "INVALID_ARGUMENT", "invalid", problem)
        network = body.get("network") or "global/networks/default"
        fw = {**json.loads(json.dumps(body)), "kind": "compute#firewall", "id": str(next(self._ids)) + "000000000",
              "creationTimestamp": _now(), "direction": body.get("direction", "INGRESS"),
              "priority": body.get("priority", 1000), "disabled": False,
              "network": network if network.startswith("https://") else f"{BASE}/projects/{project}/{network}",
              "selfLink": f"{BASE}/projects/{project}/global/firewalls/{name}"}
        self._state.firewalls[name] = fw
        return 200, self._global_op(project, "insert", fw["selfLink"], fw["id"])

    # --- resource policies (regional) ---------------------------------------------------------------------
    def _region_op(self, project: str, region: str, op_type: str, target_link: str, target_id: str
                   ) -> dict[str, Any]:
        op_id = str(next(self._ids))
        name = f"operation-{op_id}"
        op: dict[str, Any] = {
            "kind": "compute#operation", "id": op_id, "name": name, "operationType": op_type,
            "targetLink": target_link, "targetId": target_id, "status": "DONE", "progress": 100,
            "region": f"{BASE}/projects/{project}/regions/{region}",
            "user": "orch@example.iam.gserviceaccount.com", "insertTime": _now(), "startTime": _now(),
            "endTime": _now(), "selfLink": f"{BASE}/projects/{project}/regions/{region}/operations/{name}",
        }
        self._state.region_operations[(region, name)] = op
        return op

    def _policies(self, method: str, project: str, region: str, rest: list[str], query: dict[str, str],
                  body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        link = f"{BASE}/projects/{project}/regions/{region}/resourcePolicies"
        if not rest and method == "GET":
            items = [p for (r, _), p in sorted(self._state.policies.items()) if r == region]
            return 200, {"kind": "compute#resourcePolicyList", "id": link, "items": items, "selfLink": link}
        if not rest and method == "POST":
            request_id = query.get("requestId")
            if request_id and request_id in self._state.request_ids:
                return 200, self._state.region_operations[self._state.request_ids[request_id]]
            body = body or {}
            refusal = check_resource_policy_insert(body)
            if refusal is not None:
                self.refusals.append(refusal)
                return refusal.status, _error(refusal.status, refusal.rpc_status, refusal.reason, refusal.message)
            name = body["name"]
            if (region, name) in self._state.policies:
                return 409, _error(409, "ALREADY_EXISTS", "alreadyExists",
                                   f"The resource 'projects/{project}/regions/{region}/resourcePolicies/{name}' "
                                   "already exists")
            pol = {**json.loads(json.dumps(body)), "kind": "compute#resourcePolicy",
                   "id": str(next(self._ids)) + "000000000", "creationTimestamp": _now(), "status": "READY",
                   "region": f"{BASE}/projects/{project}/regions/{region}", "selfLink": f"{link}/{name}"}
            self._state.policies[(region, name)] = pol
            op = self._region_op(project, region, "insert", pol["selfLink"], pol["id"])
            if request_id:
                self._state.request_ids[request_id] = (region, op["name"])
            return 200, op
        name = rest[0] if rest else ""
        pol = self._state.policies.get((region, name))
        if pol is None:
            return 404, _error(404, "NOT_FOUND", "notFound", f"The resource 'projects/{project}/regions/{region}/"
                                                             f"resourcePolicies/{name}' was not found")
        if len(rest) == 1 and method == "GET":
            return 200, pol
        if len(rest) == 1 and method == "DELETE":
            users = [i["selfLink"] for i in self._state.instances.values()
                     if (region, name) in {_policy_key(u) for u in i.get("resourcePolicies", [])}]
            if users:
                return 400, _error(400, "FAILED_PRECONDITION", "resourceInUseByAnotherResource",
                                   f"The resource_policy resource '{pol['selfLink']}' is already being used by "
                                   f"'{users[0]}'")
            del self._state.policies[(region, name)]
            return 200, self._region_op(project, region, "delete", pol["selfLink"], pol["id"])
        return 400, _error(400, "INVALID_ARGUMENT", "invalid", f"unsupported {method} on resource policy")

    def _operations(self, method: str, project: str, zone: str, rest: list[str], flt: str
                    ) -> tuple[int, dict[str, Any]]:
        if not rest and method == "GET":
            found = [o for (z, _), o in sorted(self._state.operations.items()) if z == zone and matches_filter(o, flt)]
            return 200, {"kind": "compute#operationList", "id": f"projects/{project}/zones/{zone}/operations",
                         "items": found, "selfLink": f"{BASE}/projects/{project}/zones/{zone}/operations"}
        op = self._state.operations.get((zone, rest[0]))
        if op is None:
            return 404, _error(404, "NOT_FOUND", "notFound", f"The resource operation '{rest[0]}' was not found")
        if (len(rest) == 1 and method == "GET") or (rest[1:] == ["wait"] and method == "POST"):
            self._advance_op(op)
            return 200, op
        return 400, _error(400, "INVALID_ARGUMENT", "invalid", f"unsupported {method} on operation")


class _Handler(BaseHTTPRequestHandler):
    fake: GceFake
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16  # headers and body leave in one segment (no Nagle + delayed-ACK stalls: ~45 ms a request)

    def _serve(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw.strip() else None
        if self.fake.delay_s:
            time.sleep(self.fake.delay_s)   # a slow cloud, on purpose; 0 in the test suite
        status, payload = self.fake.handle(self.command, url.path, query, body)
        out = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_DELETE = do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


class GceServer:
    """The fake on 127.0.0.1 in a daemon thread. ``endpoint`` is what client_options.api_endpoint takes."""

    def __init__(self, port: int = 0, fake: GceFake | None = None) -> None:
        self.fake = fake or GceFake()
        handler = type("Handler", (_Handler,), {"fake": self.fake})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> GceServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description="A fake Google Compute Engine REST API on 127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to wait before each answer")
    args = parser.parse_args()
    server = GceServer(args.port, GceFake(delay_s=args.delay))
    print(f"fake GCE at {server.endpoint}/compute/v1/", flush=True)
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
