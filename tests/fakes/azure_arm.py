"""A small fake of Azure Resource Manager for Microsoft.Compute VMs/disks and Microsoft.Network NICs, public IP
addresses and network security groups.

Speaks the wire shapes azure-mgmt-compute / azure-mgmt-network use (ComputeRP / NetworkRP swagger):
resources under ``/subscriptions/S/resourceGroups/RG/providers/<ns>/<type>/<name>``, any api-version,
errors as ``{"error": {"code", "message"}}``, long-running operations as 201/202 plus an
``Azure-AsyncOperation`` header whose URL answers ``{"status": "InProgress"}`` then ``Succeeded`` (or
``Failed`` with an error), always with ``Retry-After: 0``. Every request is recorded.

Switches (``FakeArm`` methods, or POST /_fake/<switch> with a JSON body when run standalone):
capacity (SkuNotAvailable 409 at once, or AllocationFailed inside the create LRO), quota
(OperationNotAllowed 409), price-too-low (SpotPriceGreaterThanProvidedMaxPrice 400), throttle (429),
auth (401), server_error (500), slow (hold every response until slow 0, at most its seconds),
evict(name) (a Spot VM is evicted the way its evictionPolicy says). ``python -m tests.fakes.azure_arm``.

Network references are live, as in ARM: a NIC's ipConfiguration names a public IP and the NIC names an NSG
by id (unknown ids are a 400); the public IP then shows ``ipConfiguration`` and the NSG ``networkInterfaces``,
and ARM refuses to delete either while so referenced (PublicIPAddressCannotBeDeleted /
InUseNetworkSecurityGroupCannotBeDeleted, both 400). Deleting the NIC (or the VM, deleteOption Delete) frees
them. Every PUT body is first held to the REST spec's shapes and customData limit (tests/fakes/azure_contract.py;
``refusals`` keeps each refusal). A static Standard public IP gets its address at creation. A VM PUT with
``identity`` gets principal ids.

A VM whose ``osDisk.diskSizeGB`` is under the size of its marketplace image's OS disk (``IMAGE_OS_DISK_GB``, the
fake's own figures; ``State.image_os_disk_gb``) is refused as ARM refuses it: OperationNotAllowed "The specified disk
size 20 GB is smaller than the size of the corresponding disk in the VM image: 64 GB. This is not allowed. Please
choose equal or greater size or do not specify an explicit size." with target ``osDisk.diskSizeGB`` (ARM's code,
words and target as reported, e.g. hitachienergy/epiphany#1049; the 409 status is the fake's, as for its quota
answer). Without an explicit size ARM gives the disk the image's.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.answer_gate import AnswerGate
from tests.fakes.azure_contract import ArmRefusal, check_body

_RES = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/"
    r"(?P<ns>Microsoft\.Compute|Microsoft\.Network)/"
    r"(?P<type>virtualMachines|disks|networkInterfaces|publicIPAddresses|networkSecurityGroups"
    r"|proximityPlacementGroups|availabilitySets)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<action>[A-Za-z]+))?)?$",
    re.IGNORECASE,
)
_OP = re.compile(r"^/subscriptions/(?P<sub>[^/]+)/providers/(?P<ns>[^/]+)/locations/(?P<loc>[^/]+)/"
                 r"operations/(?P<id>[^/]+)$", re.IGNORECASE)


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Fault:
    kind: str                    # capacity | capacity-lro | quota | price-too-low | throttle | auth | server-error
    remaining: int
    ops: frozenset[str] | None   # None: every request; else e.g. {"vm.put"}


@dataclass
class Operation:
    id: str
    polls_left: int
    on_done: Any                 # callable() -> None, applied once when the operation succeeds
    error: dict[str, str] | None = None
    status: str = "InProgress"


#: OS disk sizes of the marketplace images the fake knows, (publisher, offer, sku) lower-cased -> GB: the fake's own
#: figures (a test assumption), with orch's default image among them.
IMAGE_OS_DISK_GB: dict[tuple[str, str, str], int] = {("microsoft-dsvm", "ubuntu-hpc", "2204"): 64}


@dataclass
class State:
    vms: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)      # (rg, name) -> resource
    nics: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    disks: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pips: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    nsgs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    ppgs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    avsets: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    ops: dict[str, Operation] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    lro_polls: int = 1           # InProgress answers before an operation completes
    page_size: int = 50
    nic_counter: int = 3
    pip_counter: int = 3
    image_os_disk_gb: dict[tuple[str, str, str], int] = field(default_factory=lambda: dict(IMAGE_OS_DISK_GB))


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _err(code: str, message: str, target: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **({"target": target} if target else {})}}


class FakeArm:
    """The fake's state and switches; ``serve()`` starts it on 127.0.0.1 in a daemon thread."""

    def __init__(self) -> None:
        self.state = State()
        self.validated: Counter[str] = Counter()   # PUT bodies checked against the REST spec, by type
        self.refusals: list[ArmRefusal] = []   # each PUT ARM would have refused (spec shapes, customData limit)
        self.lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._gate = AnswerGate()

    # -- switches ------------------------------------------------------------------------------------

    def inject(self, kind: str, times: int = 1, ops: frozenset[str] | None = None) -> None:
        """Fail the next ``times`` matching requests. Default ops: VM create for capacity/quota/5xx."""
        if ops is None and kind in ("capacity", "capacity-lro", "quota", "server-error", "price-too-low"):
            ops = frozenset({"vm.put"})
        with self.lock:
            self.state.faults.append(Fault(kind, times, ops))

    def slow(self, seconds: float) -> None:
        """Hold every answer until ``slow(0)``, at most ``seconds`` (tests/fakes/answer_gate.py)."""
        self._gate.slow(seconds)

    def evict(self, name: str, rg: str | None = None) -> None:
        """Evict a Spot VM now: Deallocate -> PowerState/deallocated; Delete -> the VM (and its parts) go."""
        with self.lock:
            key = self._find_vm(name, rg)
            vm = self.state.vms[key]
            props = vm["properties"]
            if props.get("priority") != "Spot":
                raise ValueError(f"{name} is not a Spot VM")
            if props.get("evictionPolicy", "Deallocate") == "Delete":
                self._delete_vm_now(key)
            else:
                vm["_power"] = "deallocated"

    def reset(self) -> None:
        with self.lock:
            self.state = State()
            self._gate.slow(0)
            self.refusals.clear()
            self.validated.clear()

    @property
    def requests(self) -> list[Recorded]:
        with self.lock:
            return list(self.state.requests)

    def _find_vm(self, name: str, rg: str | None) -> tuple[str, str]:
        for key in self.state.vms:
            if key[1].lower() == name.lower() and (rg is None or key[0].lower() == rg.lower()):
                return key
        raise KeyError(name)

    # -- server --------------------------------------------------------------------------------------

    def serve(self, port: int = 0) -> str:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()
        return self.url

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- the API -------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str],
               body: Any) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            self.state.requests.append(Recorded(method, path, query, headers, body))
        self._gate.pass_through()
        with self.lock:
            if path.startswith("/_fake/"):
                return self._control(path[len("/_fake/"):], body or {})
            if not headers.get("authorization", "").startswith("Bearer "):
                return 401, {}, _err("AuthenticationFailed",
                                     "Authentication failed. The 'Authorization' header is missing.")
            if "api-version" not in query:
                return 400, {}, _err("MissingApiVersionParameter", "The api-version query parameter is required.")
            m = _OP.match(path)
            if m and method == "GET":
                return self._poll(m.group("id"), monitor="monitor" in query)
            m = _RES.match(path)
            if not m:
                return 404, {}, _err("InvalidResourceType", f"no route for {method} {path}")
            rtype = m.group("type").lower()
            op = {"virtualmachines": "vm", "networkinterfaces": "nic", "disks": "disk", "publicipaddresses": "pip",
                  "networksecuritygroups": "nsg", "proximityplacementgroups": "ppg", "availabilitysets": "avset"}[rtype]
            action = (m.group("action") or "").lower()
            opname = f"{op}.{action or method.lower()}" if m.group("name") else f"{op}.list"
            if method == "PUT" and m.group("name") and not action:
                self.validated[rtype] += 1
                refusal = check_body(rtype, body)   # the REST spec's shapes and limits (tests/fakes/azure_contract.py)
                if refusal is not None:
                    self.refusals.append(refusal)
                    return 400, {}, _err(refusal.code, refusal.message, refusal.target)
            fault = self._take_fault(opname)
            if fault is not None and fault.kind != "capacity-lro":
                return self._fault_response(fault)
            rg, name = m.group("rg"), m.group("name")
            sub = m.group("sub")
            if op == "vm":
                return self._vm(method, sub, rg, name, action, query, body, fault)
            if op == "nic":
                return self._nic(method, sub, rg, name, query, body)
            if op == "pip":
                return self._pip(method, sub, rg, name, query, body)
            if op == "nsg":
                return self._nsg(method, sub, rg, name, query, body)
            if op == "ppg":
                return self._ppg(method, sub, rg, name, query, body)
            if op == "avset":
                return self._avset(method, sub, rg, name, query, body)
            return self._disk(method, sub, rg, name)

    def _take_fault(self, opname: str) -> Fault | None:
        for f in self.state.faults:
            if f.remaining > 0 and (f.ops is None or opname in f.ops):
                f.remaining -= 1
                return f
        return None

    @staticmethod
    def _fault_response(f: Fault) -> tuple[int, dict[str, str], Any]:
        if f.kind == "capacity":
            return 409, {}, _err("SkuNotAvailable",
                                 "The requested VM size is currently not available in this location.")
        if f.kind == "quota":
            return 409, {}, _err("OperationNotAllowed",
                                 "Operation could not be completed as it results in exceeding approved "
                                 "standardNCADSA100v4Family Cores quota.")
        if f.kind == "price-too-low":   # learn.microsoft.com/azure/virtual-machines/error-codes-spot
            return 400, {}, _err("SpotPriceGreaterThanProvidedMaxPrice",
                                 "Unable to perform operation 'Create VM' since the provided maximum price '0.01 USD' "
                                 "is lower than the current spot price '0.6 USD' for Azure Spot VM size "
                                 "'Standard_NC24ads_A100_v4'.")
        if f.kind == "throttle":
            return 429, {"Retry-After": "0"}, _err("TooManyRequests", "The request is being throttled.")
        if f.kind == "auth":
            return 401, {}, _err("InvalidAuthenticationToken", "The access token is invalid.")
        return 500, {}, _err("InternalServerError", "An internal server error occurred.")

    def _control(self, switch: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        if switch == "inject":
            ops = body.get("ops")
            self.inject(body["kind"], int(body.get("times", 1)), frozenset(ops) if ops else None)
        elif switch == "slow":
            self.slow(float(body.get("seconds", 0)))
        elif switch == "evict":
            self.evict(body["name"], body.get("resource_group"))
        elif switch == "reset":
            self.reset()
        else:
            return 404, {}, _err("UnknownSwitch", switch)
        return 200, {}, {"ok": True}

    # -- LROs ----------------------------------------------------------------------------------------

    def _start_op(self, sub: str, ns: str, location: str, on_done: Any,
                  error: dict[str, str] | None = None) -> dict[str, str]:
        op = Operation(uuid.uuid4().hex, self.state.lro_polls, on_done, error)
        self.state.ops[op.id] = op
        url = f"{self._base()}/subscriptions/{sub}/providers/{ns}/locations/{location}/operations/{op.id}"
        return {"Azure-AsyncOperation": f"{url}?api-version=2024-01-01",
                "Location": f"{url}?monitor=true&api-version=2024-01-01", "Retry-After": "0"}

    def _base(self) -> str:
        return self.url if self._server is not None else "http://127.0.0.1"

    def _poll(self, op_id: str, *, monitor: bool) -> tuple[int, dict[str, str], Any]:
        op = self.state.ops.get(op_id)
        if op is None:
            return 404, {}, _err("ResourceNotFound", f"operation {op_id} not found")
        if op.status == "InProgress":
            if op.polls_left > 0:
                op.polls_left -= 1
            else:
                op.status = "Failed" if op.error else "Succeeded"
                if op.on_done is not None:
                    op.on_done()
        if monitor:  # the Location URL: 202 while running, then 200/204
            return (202, {"Retry-After": "0"}, None) if op.status == "InProgress" else (204, {}, None)
        out: dict[str, Any] = {"name": op.id, "status": op.status, "startTime": _now()}
        if op.status == "Failed" and op.error:
            out["error"] = op.error
        return 200, {"Retry-After": "0"}, out

    # -- VMs -----------------------------------------------------------------------------------------

    def _vm_view(self, vm: dict[str, Any]) -> dict[str, Any]:
        prov = vm["properties"]["provisioningState"]
        statuses: list[dict[str, Any]] = []
        failure = vm.get("_failure")
        if failure:
            statuses.append({"code": f"ProvisioningState/failed/{failure['code']}", "level": "Error",
                             "displayStatus": "Provisioning failed", "message": failure["message"]})
        else:
            statuses.append({"code": f"ProvisioningState/{prov.lower()}", "level": "Info",
                             "displayStatus": f"Provisioning {prov.lower()}"})
        if vm.get("_power"):
            statuses.append({"code": f"PowerState/{vm['_power']}", "level": "Info",
                             "displayStatus": f"VM {vm['_power']}"})
        return {"computerName": vm["properties"].get("osProfile", {}).get("computerName"), "statuses": statuses}

    @staticmethod
    def _public(res: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in res.items() if not k.startswith("_")}

    def _vm(self, method: str, sub: str, rg: str, name: str | None, action: str, query: dict[str, list[str]],
            body: Any, fault: Fault | None) -> tuple[int, dict[str, str], Any]:
        if name is None:
            if method != "GET":
                return 405, {}, _err("MethodNotAllowed", method)
            if "$expand" in query and "$filter" not in query:
                return 400, {}, _err("InvalidParameter", "$expand=instanceView requires a valid $filter.")
            return self._page([self._public(v) for (g, _), v in self.state.vms.items() if g.lower() == rg.lower()],
                              query, f"/subscriptions/{sub}/resourceGroups/{rg}/providers/"
                                     "Microsoft.Compute/virtualMachines")
        key = (rg, name)
        vm = self._lookup(self.state.vms, key)
        if action:
            return self._vm_action(sub, action, vm, key)
        if method == "GET":
            if vm is None:
                return 404, {}, _err("ResourceNotFound", f"The Resource 'Microsoft.Compute/virtualMachines/{name}' "
                                                         f"under resource group '{rg}' was not found.")
            out = self._public(vm)
            if query.get("$expand", [""])[0].lower() == "instanceview":
                out = {**out, "properties": {**out["properties"], "instanceView": self._vm_view(vm)}}
            return 200, {}, out
        if method == "PUT":
            return self._vm_put(sub, rg, name, vm, body, fault)
        if method == "PATCH":
            if vm is None:
                return 404, {}, _err("ResourceNotFound", name)
            if isinstance(body, dict) and "tags" in body:
                vm["tags"] = dict(body["tags"] or {})
            return 200, {}, self._public(vm)
        if method == "DELETE":
            if vm is None:
                return 204, {}, None
            vm["properties"]["provisioningState"] = "Deleting"
            vm["_power"] = "stopping"
            headers = self._start_op(sub, "Microsoft.Compute", vm["location"],
                                     lambda: self._delete_vm_now(self._key_of(self.state.vms, key)))
            return 202, headers, None
        return 405, {}, _err("MethodNotAllowed", method)

    def _os_disk_below_image(self, props: dict[str, Any]) -> dict[str, Any] | None:
        """ARM's refusal of an OS disk smaller than its image's (module docstring), for the images the fake knows."""
        storage = props.get("storageProfile") or {}
        ref = storage.get("imageReference") or {}
        key = tuple(str(ref.get(k, "")).lower() for k in ("publisher", "offer", "sku"))
        image_gb = self.state.image_os_disk_gb.get(key)  # type: ignore[arg-type]
        asked = (storage.get("osDisk") or {}).get("diskSizeGB")
        if image_gb is None or asked is None or asked >= image_gb:
            return None
        return _err("OperationNotAllowed", f"The specified disk size {asked} GB is smaller than the size of the "
                    f"corresponding disk in the VM image: {image_gb} GB. This is not allowed. Please choose equal or "
                    "greater size or do not specify an explicit size.", "osDisk.diskSizeGB")

    def _vm_put(self, sub: str, rg: str, name: str, vm: dict[str, Any] | None, body: Any,
                fault: Fault | None) -> tuple[int, dict[str, str], Any]:
        if not isinstance(body, dict) or not body.get("location"):
            return 400, {}, _err("InvalidParameter", "The value of parameter location is invalid.")
        props = body.get("properties") or {}
        if not (props.get("hardwareProfile") or {}).get("vmSize"):
            return 400, {}, _err("InvalidParameter", "vmSize is required.")
        too_small = self._os_disk_below_image(props)
        if too_small is not None:
            return 409, {}, too_small
        if "evictionPolicy" in props and props.get("priority") != "Spot":
            return 400, {}, _err("InvalidParameter", "evictionPolicy can only be set for Spot VMs.")
        for ref in (props.get("networkProfile") or {}).get("networkInterfaces") or []:
            if self._by_id(self.state.nics, ref.get("id", "")) is None:
                return 400, {}, _err("InvalidParameter", f"Network interface {ref.get('id')} not found.")
        ppg_ref = (props.get("proximityPlacementGroup") or {}).get("id")
        if ppg_ref is not None:
            ppg = self._by_id(self.state.ppgs, ppg_ref)
            if ppg is None or ppg["location"] != body["location"]:
                return 400, {}, _err("InvalidParameter", f"Proximity placement group {ppg_ref} not found in "
                                                         f"{body['location']}.")
        avset_ref = (props.get("availabilitySet") or {}).get("id")
        if avset_ref is not None:
            avset = self._by_id(self.state.avsets, avset_ref)
            if avset is None or avset["location"] != body["location"]:
                return 404, {}, _err("NotFound", f"Availability set {avset_ref} not found in {body['location']}.")
            if body.get("zones"):
                return 400, {}, _err("InvalidParameter", "Virtual Machine cannot be created in an availability "
                                                         "set and an availability zone at the same time.")
            set_ppg = ((avset["properties"].get("proximityPlacementGroup") or {}).get("id") or "").lower()
            if set_ppg and set_ppg != (ppg_ref or "").lower():
                return 400, {}, _err("InvalidParameter", "The proximity placement group of the virtual machine "
                                                         "differs from the one of its availability set.")
        if vm is not None:  # ARM PUT is create-or-update: same name, same resource
            vm["tags"] = dict(body.get("tags") or {})
            return 200, {"Retry-After": "0"}, self._public(vm)
        vm_id = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{name}"
        stored_props = json.loads(json.dumps(props))
        stored_props.update({"provisioningState": "Creating", "vmId": str(uuid.uuid4()), "timeCreated": _now()})
        os_disk = (stored_props.get("storageProfile") or {}).get("osDisk") or {}
        os_disk.setdefault("name", f"{name}_OsDisk_1_{uuid.uuid4().hex[:8]}")
        vm = {"id": vm_id, "name": name, "type": "Microsoft.Compute/virtualMachines", "location": body["location"],
              "tags": dict(body.get("tags") or {}), "properties": stored_props, "_power": "starting"}
        if body.get("identity"):
            identity, problem = self._identity(body["identity"])
            if problem:
                return 400, {}, _err("InvalidParameter", problem)
            vm["identity"] = identity
        if body.get("zones"):
            vm["zones"] = list(body["zones"])
        key = (rg, name)
        self.state.vms[key] = vm
        disk_id = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/disks/{os_disk['name']}"
        self.state.disks[(rg, os_disk["name"])] = {"id": disk_id, "name": os_disk["name"], "location": body["location"],
                                                   "managedBy": vm_id, "properties": {}}
        for ref in (stored_props.get("networkProfile") or {}).get("networkInterfaces") or []:
            nic = self._by_id(self.state.nics, ref["id"])
            if nic is not None:
                nic["properties"]["virtualMachine"] = {"id": vm_id}
        error = None
        if fault is not None:  # capacity-lro: the create is accepted, then fails while allocating
            error = {"code": "AllocationFailed", "message": "Allocation failed. We do not have sufficient capacity "
                                                            "for the requested VM size in this region."}

        def done() -> None:
            live = self.state.vms.get(key)
            if live is None:
                return
            if error:
                live["properties"]["provisioningState"] = "Failed"
                live["_failure"] = error
                live["_power"] = None
            else:
                live["properties"]["provisioningState"] = "Succeeded"
                live["_power"] = "running"

        headers = self._start_op(sub, "Microsoft.Compute", body["location"], done, error)
        return 201, headers, self._public(vm)

    def _vm_action(self, sub: str, action: str, vm: dict[str, Any] | None,
                   key: tuple[str, str]) -> tuple[int, dict[str, str], Any]:
        if vm is None:
            return 404, {}, _err("ResourceNotFound", key[1])
        if action == "instanceview":
            return 200, {}, self._vm_view(vm)
        if action == "simulateeviction":
            if vm["properties"].get("priority") != "Spot":
                return 409, {}, _err("OperationNotAllowed", "simulateEviction is only for Spot VMs.")
            self.evict(key[1], key[0])
            return 204, {}, None
        transitions = {"deallocate": ("deallocating", "deallocated"), "poweroff": ("stopping", "stopped"),
                       "start": ("starting", "running")}
        if action not in transitions:
            return 404, {}, _err("InvalidResourceType", action)
        during, after = transitions[action]
        vm["_power"] = during

        def done() -> None:
            live = self.state.vms.get(key)
            if live is not None:
                live["_power"] = after

        return 202, self._start_op(sub, "Microsoft.Compute", vm["location"], done), None

    def _delete_vm_now(self, key: tuple[str, str] | None) -> None:
        """Remove a VM; its NICs and OS disk go with it where their deleteOption says Delete."""
        if key is None or key not in self.state.vms:
            return
        vm = self.state.vms.pop(key)
        props = vm["properties"]
        for ref in (props.get("networkProfile") or {}).get("networkInterfaces") or []:
            nic_key = self._key_by_id(self.state.nics, ref.get("id", ""))
            if nic_key is None:
                continue
            if (ref.get("properties") or {}).get("deleteOption") == "Delete":
                self._detach_nic(self.state.nics.pop(nic_key))
            else:
                self.state.nics[nic_key]["properties"].pop("virtualMachine", None)
        os_disk = (props.get("storageProfile") or {}).get("osDisk") or {}
        disk_key = self._lookup_key(self.state.disks, (key[0], os_disk.get("name", "")))
        if disk_key is not None:
            if os_disk.get("deleteOption") == "Delete":
                self.state.disks.pop(disk_key, None)
            else:
                self.state.disks[disk_key].pop("managedBy", None)

    # -- NICs and disks ------------------------------------------------------------------------------

    def _nic(self, method: str, sub: str, rg: str, name: str | None, query: dict[str, list[str]],
             body: Any) -> tuple[int, dict[str, str], Any]:
        if name is None:
            return self._page([v for (g, _), v in self.state.nics.items() if g.lower() == rg.lower()], query,
                              f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces")
        key = (rg, name)
        nic = self._lookup(self.state.nics, key)
        if method == "GET":
            if nic is None:
                return 404, {}, _err("ResourceNotFound", f"The Resource 'Microsoft.Network/networkInterfaces/{name}' "
                                                         f"under resource group '{rg}' was not found.")
            return 200, {}, nic
        if method == "PUT":
            if not isinstance(body, dict) or not body.get("location"):
                return 400, {}, _err("InvalidParameter", "location is required.")
            configs = (body.get("properties") or {}).get("ipConfigurations") or []
            if not configs or not all(((c.get("properties") or {}).get("subnet") or {}).get("id") for c in configs):
                return 400, {}, _err("InvalidParameter", "ipConfigurations[].properties.subnet.id is required.")
            nic_id = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces/{name}"
            problem = self._missing_refs(body.get("properties") or {})
            if problem:
                return 400, {}, _err("InvalidResourceReference", problem)
            if nic is None:
                self.state.nic_counter += 1
                ip = f"10.0.0.{self.state.nic_counter}"
            else:
                ip = nic["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"]
            props = json.loads(json.dumps(body.get("properties") or {}))
            for c in props["ipConfigurations"]:
                c.setdefault("properties", {})["privateIPAddress"] = ip
                c["properties"]["provisioningState"] = "Succeeded"
                c["id"] = f"{nic_id}/ipConfigurations/{c.get('name', 'ipconfig1')}"
            props["provisioningState"] = "Succeeded"
            if nic is not None and "virtualMachine" in nic["properties"]:
                props["virtualMachine"] = nic["properties"]["virtualMachine"]
            new = {"id": nic_id, "name": name, "type": "Microsoft.Network/networkInterfaces",
                   "location": body["location"], "tags": dict(body.get("tags") or {}), "properties": props}
            if nic is not None:
                self._detach_nic(nic)
            self.state.nics[key] = new
            self._attach_nic(new)
            headers = self._start_op(sub, "Microsoft.Network", body["location"], None)
            return (200 if nic is not None else 201), headers, new
        if method == "DELETE":
            if nic is None:
                return 204, {}, None
            if nic["properties"].get("virtualMachine"):
                return 400, {}, _err("NicInUse", f"Network Interface {nic['id']} is used by existing resource "
                                                 f"{nic['properties']['virtualMachine']['id']}.")
            self._detach_nic(self.state.nics.pop(self._key_of(self.state.nics, key)))
            return 202, self._start_op(sub, "Microsoft.Network", nic["location"], None), None
        return 405, {}, _err("MethodNotAllowed", method)

    def _missing_refs(self, props: dict[str, Any]) -> str | None:
        refs = [((c.get("properties") or {}).get("publicIPAddress") or {}).get("id")
                for c in props.get("ipConfigurations") or []]
        for rid in [r for r in refs if r]:
            if self._by_id(self.state.pips, rid) is None:
                return f"Resource {rid} referenced by resource networkInterfaces was not found."
        nsg_id = (props.get("networkSecurityGroup") or {}).get("id")
        if nsg_id and self._by_id(self.state.nsgs, nsg_id) is None:
            return f"Resource {nsg_id} referenced by resource networkInterfaces was not found."
        return None

    def _attach_nic(self, nic: dict[str, Any]) -> None:
        props = nic["properties"]
        for cfg in props.get("ipConfigurations") or []:
            rid = ((cfg.get("properties") or {}).get("publicIPAddress") or {}).get("id")
            pip = self._by_id(self.state.pips, rid) if rid else None
            if pip is not None:
                pip["properties"]["ipConfiguration"] = {"id": cfg["id"]}
        nsg = self._by_id(self.state.nsgs, (props.get("networkSecurityGroup") or {}).get("id") or "")
        if nsg is not None:
            nsg["properties"].setdefault("networkInterfaces", []).append({"id": nic["id"]})

    def _detach_nic(self, nic: dict[str, Any] | None) -> None:
        if nic is None:
            return
        for pip in self.state.pips.values():
            cfg = (pip["properties"].get("ipConfiguration") or {}).get("id", "")
            if cfg.lower().startswith(nic["id"].lower() + "/"):
                pip["properties"].pop("ipConfiguration", None)
        for nsg in self.state.nsgs.values():
            refs = nsg["properties"].get("networkInterfaces") or []
            kept = [r for r in refs if r["id"].lower() != nic["id"].lower()]
            if kept:
                nsg["properties"]["networkInterfaces"] = kept
            else:
                nsg["properties"].pop("networkInterfaces", None)

    @staticmethod
    def _identity(wanted: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        kind = wanted.get("type", "")
        out: dict[str, Any] = {"type": kind}
        if "SystemAssigned" in kind:
            out.update(principalId=str(uuid.uuid4()), tenantId="00000000-0000-0000-0000-00000000aaaa")
        users = wanted.get("userAssignedIdentities") or {}
        if "UserAssigned" in kind:
            if not users:
                return out, "userAssignedIdentities is required when type is UserAssigned."
            for rid in users:
                if "/providers/microsoft.managedidentity/userassignedidentities/" not in rid.lower():
                    return out, f"The identity {rid} is not a user assigned identity resource id."
            out["userAssignedIdentities"] = {rid: {"principalId": str(uuid.uuid4()), "clientId": str(uuid.uuid4())}
                                             for rid in users}
        elif kind not in ("SystemAssigned", "None"):
            return out, f"Identity type {kind!r} is not one of SystemAssigned, UserAssigned, None."
        return out, None

    # -- public IPs and network security groups ---------------------------------------------------------

    def _pip(self, method: str, sub: str, rg: str, name: str | None, query: dict[str, list[str]],
             body: Any) -> tuple[int, dict[str, str], Any]:
        base = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/publicIPAddresses"
        if name is None:
            return self._page([v for (g, _), v in self.state.pips.items() if g.lower() == rg.lower()], query, base)
        key = (rg, name)
        pip = self._lookup(self.state.pips, key)
        if method == "GET":
            if pip is None:
                return 404, {}, _err("ResourceNotFound", f"The Resource 'Microsoft.Network/publicIPAddresses/{name}' "
                                                         f"under resource group '{rg}' was not found.")
            return 200, {}, pip
        if method == "PUT":
            if not isinstance(body, dict) or not body.get("location"):
                return 400, {}, _err("InvalidParameter", "location is required.")
            props = json.loads(json.dumps(body.get("properties") or {}))
            sku = (body.get("sku") or {}).get("name", "Basic")
            if sku == "Standard" and props.get("publicIPAllocationMethod", "Dynamic") != "Static":
                return 400, {}, _err("StandardSkuPublicIPAddressesMustBeStatic",
                                     "Standard sku publicIp addresses must be Static.")
            if pip is None:
                self.state.pip_counter += 1
                address = f"20.0.0.{self.state.pip_counter}"
            else:
                address = pip["properties"].get("ipAddress")
            props.update(provisioningState="Succeeded", resourceGuid=str(uuid.uuid4()), idleTimeoutInMinutes=4)
            if props.get("publicIPAllocationMethod") == "Static" and address:
                props["ipAddress"] = address
            if pip is not None and "ipConfiguration" in pip["properties"]:
                props["ipConfiguration"] = pip["properties"]["ipConfiguration"]
            new = {"id": f"{base}/{name}", "name": name, "type": "Microsoft.Network/publicIPAddresses",
                   "location": body["location"], "tags": dict(body.get("tags") or {}),
                   "sku": {"name": sku, "tier": (body.get("sku") or {}).get("tier", "Regional")}, "properties": props}
            if body.get("zones"):
                new["zones"] = list(body["zones"])
            self.state.pips[self._key_of(self.state.pips, key) or key] = new
            return (200 if pip else 201), self._start_op(sub, "Microsoft.Network", body["location"], None), new
        if method == "DELETE":
            if pip is None:
                return 204, {}, None
            if pip["properties"].get("ipConfiguration"):
                return 400, {}, _err("PublicIPAddressCannotBeDeleted",
                                     f"Public IP address {pip['id']} can not be deleted since it is still allocated "
                                     f"to resource {pip['properties']['ipConfiguration']['id']}.")
            self.state.pips.pop(self._key_of(self.state.pips, key), None)
            return 202, self._start_op(sub, "Microsoft.Network", pip["location"], None), None
        return 405, {}, _err("MethodNotAllowed", method)

    def _nsg(self, method: str, sub: str, rg: str, name: str | None, query: dict[str, list[str]],
             body: Any) -> tuple[int, dict[str, str], Any]:
        base = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/networkSecurityGroups"
        if name is None:
            return self._page([v for (g, _), v in self.state.nsgs.items() if g.lower() == rg.lower()], query, base)
        key = (rg, name)
        nsg = self._lookup(self.state.nsgs, key)
        if method == "GET":
            if nsg is None:
                return 404, {}, _err("ResourceNotFound", f"The Resource 'Microsoft.Network/networkSecurityGroups/"
                                                         f"{name}' under resource group '{rg}' was not found.")
            return 200, {}, nsg
        if method == "PUT":
            if not isinstance(body, dict) or not body.get("location"):
                return 400, {}, _err("InvalidParameter", "location is required.")
            props = json.loads(json.dumps(body.get("properties") or {}))
            problem = _rules_problem(props.get("securityRules") or [])
            if problem:
                return 400, {}, _err("SecurityRuleInvalidAddressPrefix", problem)
            nsg_id = f"{base}/{name}"
            for rule in props.get("securityRules") or []:
                rule["id"] = f"{nsg_id}/securityRules/{rule['name']}"
                rule["type"] = "Microsoft.Network/networkSecurityGroups/securityRules"
                rule.setdefault("properties", {})["provisioningState"] = "Succeeded"
            props.update(provisioningState="Succeeded", resourceGuid=str(uuid.uuid4()),
                         defaultSecurityRules=_default_rules(nsg_id))
            if nsg is not None and nsg["properties"].get("networkInterfaces"):
                props["networkInterfaces"] = nsg["properties"]["networkInterfaces"]
            new = {"id": nsg_id, "name": name, "type": "Microsoft.Network/networkSecurityGroups",
                   "location": body["location"], "tags": dict(body.get("tags") or {}), "properties": props}
            self.state.nsgs[self._key_of(self.state.nsgs, key) or key] = new
            return (200 if nsg else 201), self._start_op(sub, "Microsoft.Network", body["location"], None), new
        if method == "DELETE":
            if nsg is None:
                return 204, {}, None
            if nsg["properties"].get("networkInterfaces") or nsg["properties"].get("subnets"):
                return 400, {}, _err("InUseNetworkSecurityGroupCannotBeDeleted",
                                     f"Network security group {nsg['id']} cannot be deleted because it is in use by "
                                     f"the following resources: {nsg['properties'].get('networkInterfaces')}.")
            self.state.nsgs.pop(self._key_of(self.state.nsgs, key), None)
            return 202, self._start_op(sub, "Microsoft.Network", nsg["location"], None), None
        return 405, {}, _err("MethodNotAllowed", method)

    def _ppg(self, method: str, sub: str, rg: str, name: str | None, query: dict[str, list[str]],
             body: Any) -> tuple[int, dict[str, str], Any]:
        """Proximity placement groups (synchronous in ARM): PUT, GET, list, DELETE. ``virtualMachines`` is
        read from the VMs that name the group. (ARM's answer to deleting a group that still holds VMs is
        not modelled: orch deletes only groups it lists without VMs.)"""
        base = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/proximityPlacementGroups"
        if name is None:
            if method != "GET":
                return 405, {}, _err("MethodNotAllowed", method)
            return self._page([self._ppg_view(v) for (g, _), v in self.state.ppgs.items() if g.lower() == rg.lower()],
                              query, base)
        key = (rg, name)
        ppg = self._lookup(self.state.ppgs, key)
        if method == "GET":
            if ppg is None:
                return 404, {}, _err("ResourceNotFound", f"The Resource 'Microsoft.Compute/proximityPlacementGroups/"
                                                         f"{name}' under resource group '{rg}' was not found.")
            return 200, {}, self._ppg_view(ppg)
        if method == "PUT":
            if not isinstance(body, dict) or not body.get("location"):
                return 400, {}, _err("InvalidParameter", "location is required.")
            kind = (body.get("properties") or {}).get("proximityPlacementGroupType", "Standard")
            if kind not in ("Standard", "Ultra"):
                return 400, {}, _err("InvalidParameter", f"proximityPlacementGroupType {kind!r} is invalid.")
            new = {"id": f"{base}/{name}", "name": name, "type": "Microsoft.Compute/proximityPlacementGroups",
                   "location": body["location"], "tags": dict(body.get("tags") or {}),
                   "properties": {"proximityPlacementGroupType": kind}}
            self.state.ppgs[self._key_of(self.state.ppgs, key) or key] = new
            return (200 if ppg else 201), {}, self._ppg_view(new)
        if method == "DELETE":
            if ppg is None:
                return 204, {}, None
            self.state.ppgs.pop(self._key_of(self.state.ppgs, key), None)
            return 200, {}, None
        return 405, {}, _err("MethodNotAllowed", method)

    def _ppg_view(self, ppg: dict[str, Any]) -> dict[str, Any]:
        def ref(res: dict[str, Any]) -> str:
            return str((res["properties"].get("proximityPlacementGroup") or {}).get("id") or "").lower()

        held = [{"id": vm["id"]} for vm in self.state.vms.values() if ref(vm) == ppg["id"].lower()]
        sets = [{"id": a["id"]} for a in self.state.avsets.values() if ref(a) == ppg["id"].lower()]
        return {**ppg, "properties": {**ppg["properties"], "virtualMachines": held, "availabilitySets": sets}}

    def _avset(self, method: str, sub: str, rg: str, name: str | None, query: dict[str, list[str]],
               body: Any) -> tuple[int, dict[str, str], Any]:
        """Availability sets (synchronous in ARM): PUT, GET, list, DELETE. ``virtualMachines`` is read from
        the VMs that name the set; a set naming a proximity placement group that does not exist is refused."""
        base = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/availabilitySets"
        if name is None:
            if method != "GET":
                return 405, {}, _err("MethodNotAllowed", method)
            return self._page([self._avset_view(v) for (g, _), v in self.state.avsets.items()
                               if g.lower() == rg.lower()], query, base)
        key = (rg, name)
        avset = self._lookup(self.state.avsets, key)
        if method == "GET":
            if avset is None:
                return 404, {}, _err("ResourceNotFound", f"The Resource 'Microsoft.Compute/availabilitySets/{name}' "
                                                         f"under resource group '{rg}' was not found.")
            return 200, {}, self._avset_view(avset)
        if method == "PUT":
            if not isinstance(body, dict) or not body.get("location"):
                return 400, {}, _err("InvalidParameter", "location is required.")
            props = json.loads(json.dumps(body.get("properties") or {}))
            ppg_ref = (props.get("proximityPlacementGroup") or {}).get("id")
            if ppg_ref and self._by_id(self.state.ppgs, ppg_ref) is None:
                return 404, {}, _err("NotFound", f"Proximity placement group {ppg_ref} not found.")
            new = {"id": f"{base}/{name}", "name": name, "type": "Microsoft.Compute/availabilitySets",
                   "location": body["location"], "tags": dict(body.get("tags") or {}),
                   "sku": body.get("sku") or {"name": "Classic"}, "properties": props}
            self.state.avsets[self._key_of(self.state.avsets, key) or key] = new
            return 200, {}, self._avset_view(new)   # the spec's AvailabilitySets_CreateOrUpdate answers 200 only
        if method == "DELETE":
            if avset is None:
                return 204, {}, None
            self.state.avsets.pop(self._key_of(self.state.avsets, key), None)
            return 200, {}, None
        return 405, {}, _err("MethodNotAllowed", method)

    def _avset_view(self, avset: dict[str, Any]) -> dict[str, Any]:
        def ref(vm: dict[str, Any]) -> str:
            return str((vm["properties"].get("availabilitySet") or {}).get("id") or "").lower()

        held = [{"id": vm["id"]} for vm in self.state.vms.values() if ref(vm) == avset["id"].lower()]
        return {**avset, "properties": {**avset["properties"], "virtualMachines": held}}

    # -- reachability (NSG evaluation) ----------------------------------------------------------------

    def reachable(self, src_vm: str, dst_vm: str, port: int, protocol: str = "Tcp") -> bool:
        """Whether VM ``src_vm`` reaches ``dst_vm`` on ``port`` (both in the fake's one virtual network,
        VNET_PREFIX), by the NSG on the destination's NIC as Azure applies it (no NSG: all allowed)."""
        with self.lock:
            return self._admits(self._vm_nic(dst_vm), self._private_ip(src_vm), port, protocol)

    def reachable_from(self, address: str, dst_vm: str, port: int, protocol: str = "Tcp") -> bool:
        """Whether an address outside the virtual network reaches ``dst_vm``'s public IP on ``port``."""
        with self.lock:
            nic = self._vm_nic(dst_vm)
            has_public = any((c.get("properties") or {}).get("publicIPAddress")
                             for c in nic["properties"].get("ipConfigurations") or [])
            return has_public and self._admits(nic, address, port, protocol)

    def _vm_nic(self, vm_name: str) -> dict[str, Any]:
        vm = self._lookup_name(self.state.vms, vm_name)
        ref = vm["properties"]["networkProfile"]["networkInterfaces"][0]["id"]
        nic: dict[str, Any] = self._by_id(self.state.nics, ref)
        return nic

    def _private_ip(self, vm_name: str) -> str:
        cfg = self._vm_nic(vm_name)["properties"]["ipConfigurations"][0]
        return str(cfg["properties"]["privateIPAddress"])

    @staticmethod
    def _lookup_name(table: dict[tuple[str, str], Any], name: str) -> Any:
        return next(v for (_, n), v in table.items() if n.lower() == name.lower())

    def _admits(self, nic: dict[str, Any], source: str, port: int, protocol: str) -> bool:
        nsg_ref = (nic["properties"].get("networkSecurityGroup") or {}).get("id")
        if not nsg_ref:
            return True
        nsg = self._by_id(self.state.nsgs, nsg_ref)
        rules = [r["properties"] for r in [*nsg["properties"].get("securityRules", []),
                                           *nsg["properties"]["defaultSecurityRules"]]
                 if r["properties"]["direction"] == "Inbound"]
        for rule in sorted(rules, key=lambda r: int(r["priority"])):
            if rule["protocol"] not in ("*", protocol):
                continue
            sources = rule.get("sourceAddressPrefixes") or [rule.get("sourceAddressPrefix", "*")]
            ports = rule.get("destinationPortRanges") or [rule.get("destinationPortRange", "*")]
            if any(_prefix_has(p, source) for p in sources) and any(_port_has(r, port) for r in ports):
                return bool(rule["access"] == "Allow")
        return False

    def _disk(self, method: str, sub: str, rg: str, name: str | None) -> tuple[int, dict[str, str], Any]:
        if name is None or method not in ("DELETE", "GET"):
            return 405, {}, _err("MethodNotAllowed", method)
        disk = self._lookup(self.state.disks, (rg, name))
        if method == "GET":
            return (200, {}, self._public(disk)) if disk else (404, {}, _err("ResourceNotFound", name))
        if disk is None:
            return 204, {}, None
        if disk.get("managedBy"):
            return 409, {}, _err("OperationNotAllowed", f"Disk {name} is attached to VM {disk['managedBy']}.")
        self.state.disks.pop(self._key_of(self.state.disks, (rg, name)), None)
        return 202, self._start_op(sub, "Microsoft.Compute", disk["location"], None), None

    # -- helpers -------------------------------------------------------------------------------------

    def _page(self, items: list[dict[str, Any]], query: dict[str, list[str]],
              path: str) -> tuple[int, dict[str, str], Any]:
        start = int(query.get("$skiptoken", ["0"])[0])
        size = self.state.page_size
        out: dict[str, Any] = {"value": items[start:start + size]}
        if start + size < len(items):
            out["nextLink"] = f"{self._base()}{path}?api-version=2024-01-01&$skiptoken={start + size}"
        return 200, {}, out

    @staticmethod
    def _lookup_key(table: dict[tuple[str, str], Any], key: tuple[str, str]) -> tuple[str, str] | None:
        # ARM names are case-insensitive
        for k in table:
            if k[0].lower() == key[0].lower() and k[1].lower() == key[1].lower():
                return k
        return None

    def _lookup(self, table: dict[tuple[str, str], Any], key: tuple[str, str]) -> Any:
        k = self._lookup_key(table, key)
        return table[k] if k is not None else None

    def _key_of(self, table: dict[tuple[str, str], Any], key: tuple[str, str]) -> tuple[str, str] | None:
        return self._lookup_key(table, key)

    @staticmethod
    def _key_by_id(table: dict[tuple[str, str], Any], rid: str) -> tuple[str, str] | None:
        for k, v in table.items():
            if v["id"].lower() == rid.lower():
                return k
        return None

    def _by_id(self, table: dict[tuple[str, str], Any], rid: str) -> Any:
        k = self._key_by_id(table, rid)
        return table[k] if k is not None else None

    def vms(self) -> Iterator[dict[str, Any]]:
        with self.lock:
            yield from (self._public(v) for v in list(self.state.vms.values()))


#: The fake's one virtual network: every NIC's private address is in it (the ``VirtualNetwork`` service tag).
VNET_PREFIX = "10.0.0.0/16"


def _prefix_has(prefix: str, address: str) -> bool:
    """Whether an NSG rule's source ``prefix`` (a CIDR, ``*`` or a service tag) covers ``address``."""
    import ipaddress

    addr = ipaddress.ip_address(address)
    inside = addr.version == 4 and addr in ipaddress.ip_network(VNET_PREFIX)
    if prefix == "*":
        return True
    if prefix == "VirtualNetwork":
        return inside
    if prefix == "Internet":
        return not inside
    try:
        net = ipaddress.ip_network(prefix, strict=False)
    except ValueError:
        return False   # another service tag (AzureLoadBalancer ...): not a VM's source
    return addr.version == net.version and addr in net


def _port_has(spec: str, port: int) -> bool:
    if spec == "*":
        return True
    low, _, high = spec.partition("-")
    return int(low) <= port <= int(high or low)


def _rules_problem(rules: list[dict[str, Any]]) -> str | None:
    """ARM's checks on the rules orch sends: required fields, and no IPv4/IPv6 mix within one rule."""
    for rule in rules:
        props = rule.get("properties") or {}
        missing = [f for f in ("protocol", "access", "priority", "direction") if f not in props]
        if missing:
            return f"Security rule {rule.get('name')} is missing {', '.join(missing)}."
        prefixes = props.get("sourceAddressPrefixes") or [props.get("sourceAddressPrefix", "*")]
        if len({":" in p for p in prefixes}) > 1:
            return f"Security rule {rule.get('name')} mixes IPv4 and IPv6 address prefixes."
    return None


def _default_rules(nsg_id: str) -> list[dict[str, Any]]:
    """The six default rules every NSG shows, as ARM's published NetworkSecurityGroupGet example has them
    (tests/fixtures/azure/NetworkSecurityGroupGet.json; tests/test_azure_adapter.py holds the fake to it)."""
    rows = [("AllowVnetInBound", "Allow inbound traffic from all VMs in VNET", "VirtualNetwork", "VirtualNetwork",
             "Allow", 65000, "Inbound"),
            ("AllowAzureLoadBalancerInBound", "Allow inbound traffic from azure load balancer", "AzureLoadBalancer",
             "*", "Allow", 65001, "Inbound"),
            ("DenyAllInBound", "Deny all inbound traffic", "*", "*", "Deny", 65500, "Inbound"),
            ("AllowVnetOutBound", "Allow outbound traffic from all VMs to all VMs in VNET", "VirtualNetwork",
             "VirtualNetwork", "Allow", 65000, "Outbound"),
            ("AllowInternetOutBound", "Allow outbound traffic from all VMs to Internet", "*", "Internet", "Allow",
             65001, "Outbound"),
            ("DenyAllOutBound", "Deny all outbound traffic", "*", "*", "Deny", 65500, "Outbound")]
    return [{"name": name, "id": f"{nsg_id}/defaultSecurityRules/{name}",
             "properties": {"provisioningState": "Succeeded", "description": description, "protocol": "*",
                            "sourcePortRange": "*", "destinationPortRange": "*", "sourceAddressPrefix": source,
                            "destinationAddressPrefix": destination, "access": access, "priority": priority,
                            "direction": direction}}
            for name, description, source, destination, access, priority, direction in rows]


class _Handler(BaseHTTPRequestHandler):
    fake: FakeArm
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16  # headers and body leave in one segment (no Nagle + delayed-ACK stalls: ~45 ms a request)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _dispatch(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            status, extra, payload = self.fake.handle(self.command, parts.path, parse_qs(parts.query), headers, body)
        except Exception as exc:  # a fake bug must answer, not hang the client until its read timeout
            status, extra, payload = 500, {}, _err("FakeArmBug", f"{type(exc).__name__}: {exc}")
        data = json.dumps(payload).encode() if payload is not None else b""
        self.send_response(status)
        self.send_header("x-ms-request-id", str(uuid.uuid4()))
        for k, v in extra.items():
            self.send_header(k, v)
        if data:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _dispatch


def main() -> None:
    parser = argparse.ArgumentParser(description="A fake Azure Resource Manager on 127.0.0.1")
    parser.add_argument("--port", type=int, default=8443)
    args = parser.parse_args()
    fake = FakeArm()
    print(f"fake ARM on {fake.serve(args.port)}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        fake.close()


if __name__ == "__main__":
    main()
