"""A small Azure Resource Manager fake: Microsoft.Compute virtualMachines and Microsoft.Network
networkInterfaces, with ARM's long-running-operation flow, as azure-mgmt-compute/-network drive it.

PUT answers 201 + the resource (provisioningState Creating) + an Azure-AsyncOperation URL whose status
goes InProgress -> Succeeded (or Failed with an error); DELETE and actions answer 202 with the same
headers; every answer carries Retry-After: 0. Errors are ``{"error": {"code", "message"}}``.
Switches: capacity (SkuNotAvailable at once, or AllocationFailed in the LRO), quota
(OperationNotAllowed), throttle (429), auth (401), server error (500), a delay, and ``evict(name)``
(a Spot VM deallocated by the platform).

    python -m tests.fakes.azure_arm --port 8090
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_VM = re.compile(r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.Compute/"
                 r"virtualMachines(?:/(?P<name>[^/]+)(?:/(?P<action>instanceView|deallocate|start|powerOff))?)?$", re.I)
_NIC = re.compile(r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.Network/"
                  r"networkInterfaces/(?P<name>[^/]+)$", re.I)
_DISK = re.compile(r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.Compute/"
                   r"disks/(?P<name>[^/]+)$", re.I)
_OP = re.compile(r"^/_orch_ops/(?P<id>\d+)$")


@dataclass
class ArmState:
    vms: dict[str, dict[str, Any]] = field(default_factory=dict)
    power: dict[str, str] = field(default_factory=dict)         # vm -> running|deallocated|stopped|starting
    evicted: set[str] = field(default_factory=set)
    nics: dict[str, dict[str, Any]] = field(default_factory=dict)
    disks_deleted: list[str] = field(default_factory=list)
    ops: dict[str, list[dict[str, Any]]] = field(default_factory=dict)   # op id -> remaining statuses
    faults: list[list[Any]] = field(default_factory=list)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    delay_s: float = 0.0


class ArmFake:
    def __init__(self) -> None:
        self.state = ArmState()
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # --- switches ------------------------------------------------------------------------------------
    def inject(self, fault: str, times: int = 1) -> None:
        """The next ``times`` VM creations fail with ``fault``; -1 until reset. ``capacity-lro`` fails the
        creation inside its long-running operation (AllocationFailed) rather than at once."""
        with self.lock:
            self.state.faults.append([fault, times])

    def evict(self, name: str) -> None:
        with self.lock:
            self.state.power[name] = "deallocated"
            self.state.evicted.add(name)

    def reset(self) -> None:
        with self.lock:
            self.state = ArmState()

    # --- model ---------------------------------------------------------------------------------------
    def _take_fault(self) -> str | None:
        for entry in self.state.faults:
            if entry[1] != 0:
                if entry[1] > 0:
                    entry[1] -= 1
                return str(entry[0])
        return None

    def _lro(self, final: dict[str, Any]) -> dict[str, str]:
        op = str(next(self._ids))
        self.state.ops[op] = [{"status": "InProgress"}, final]
        return {"Azure-AsyncOperation": f"{self.url}/_orch_ops/{op}", "Retry-After": "0"}

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any, dict[str, str]]:
        with self.lock:
            self.state.requests.append((method, path, body))
            if m := _OP.match(path):
                steps = self.state.ops.get(m.group("id"))
                if not steps:
                    return 404, _err("NotFound", "no such operation"), {}
                status = steps.pop(0) if len(steps) > 1 else steps[0]
                return 200, status, {"Retry-After": "0"}
            if m := _VM.match(path):
                return self._vm(method, m, body)
            if m := _NIC.match(path):
                return self._nic(method, m, body)
            if (m := _DISK.match(path)) and method == "DELETE":
                self.state.disks_deleted.append(m.group("name"))
                return 202, None, self._lro({"status": "Succeeded"})
        return 404, _err("InvalidResourceType", f"no such path {path}"), {}

    def _vm(self, method: str, m: re.Match[str], body: Any) -> tuple[int, Any, dict[str, str]]:
        name, action = m.group("name"), m.group("action")
        base = f"/subscriptions/{m.group('sub')}/resourceGroups/{m.group('rg')}/providers/Microsoft.Compute"
        if name is None:
            return 200, {"value": [self._view(n) for n in self.state.vms]}, {}
        if method == "PUT":
            return self._create(name, base, body)
        vm = self.state.vms.get(name)
        if vm is None:
            return 404, _err("ResourceNotFound", f"The Resource 'Microsoft.Compute/virtualMachines/{name}' under "
                             f"resource group '{m.group('rg')}' was not found."), {}
        if method == "GET" and action == "instanceView":
            return 200, self._instance_view(name), {}
        if method == "GET":
            return 200, self._view(name), {}
        if method == "DELETE":
            del self.state.vms[name]
            self.state.power.pop(name, None)
            return 202, None, self._lro({"status": "Succeeded"})
        if method == "POST" and action in ("deallocate", "powerOff", "start"):
            self.state.power[name] = {"deallocate": "deallocated", "powerOff": "stopped", "start": "running"}[action]
            self.state.evicted.discard(name)
            return 202, None, self._lro({"status": "Succeeded"})
        return 405, _err("MethodNotAllowed", method), {}

    def _create(self, name: str, base: str, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        fault = self._take_fault()
        if fault == "throttle":
            return 429, _err("TooManyRequests", "The request is being throttled."), {"Retry-After": "0"}
        if fault == "auth":
            return 401, _err("AuthenticationFailed", "Authentication failed."), {}
        if fault == "server-error":
            return 500, _err("InternalServerError", "An internal error occurred."), {}
        if fault == "capacity":
            return 409, _err("SkuNotAvailable", "The requested size for resource is currently not available in "
                             "location 'eastus'."), {}
        if fault == "quota":
            return 409, _err("OperationNotAllowed", "Operation could not be completed as it results in exceeding "
                             "approved standardNCADSA100v4Family Cores quota."), {}
        props = dict(body.get("properties", {}))
        props.pop("provisioningState", None)
        vm = {"id": f"{base}/virtualMachines/{name}", "name": name, "type": "Microsoft.Compute/virtualMachines",
              "location": body.get("location", ""), "tags": body.get("tags", {}),
              "properties": {**props, "provisioningState": "Succeeded", "vmId": f"vm-{next(self._ids)}"}}
        created = name not in self.state.vms
        if fault == "capacity-lro":
            headers = self._lro({"status": "Failed", "error": {"code": "AllocationFailed", "message":
                                 "Allocation failed. We do not have sufficient capacity for the requested VM size."}})
            return 201, {**vm, "properties": {**vm["properties"], "provisioningState": "Creating"}}, headers
        self.state.vms[name] = vm
        self.state.power.setdefault(name, "running")
        shown = {**vm, "properties": {**vm["properties"], "provisioningState": "Creating"}}
        return (201 if created else 200), shown, self._lro({"status": "Succeeded"})

    def _view(self, name: str) -> dict[str, Any]:
        return self.state.vms[name]

    def _instance_view(self, name: str) -> dict[str, Any]:
        power = self.state.power.get(name, "running")
        statuses = [{"code": "ProvisioningState/succeeded", "level": "Info", "displayStatus": "Provisioning succeeded"},
                    {"code": f"PowerState/{power}", "level": "Info", "displayStatus": f"VM {power}"}]
        return {"computerName": name, "statuses": statuses}

    def _nic(self, method: str, m: re.Match[str], body: Any) -> tuple[int, Any, dict[str, str]]:
        name = m.group("name")
        nic_id = f"/subscriptions/{m.group('sub')}/resourceGroups/{m.group('rg')}/providers/Microsoft.Network/" \
                 f"networkInterfaces/{name}"
        if method == "PUT":
            nic = {"id": nic_id, "name": name, "location": body.get("location", ""), "tags": body.get("tags", {}),
                   "properties": {**body.get("properties", {}), "provisioningState": "Succeeded"}}
            self.state.nics[name] = nic
            return 201, nic, self._lro({"status": "Succeeded"})
        nic = self.state.nics.get(name)
        if nic is None:
            return 404, _err("NotFound", f"Resource {nic_id} not found."), {}
        if method == "GET":
            return 200, nic, {}
        if method == "DELETE":
            del self.state.nics[name]
            return 202, None, self._lro({"status": "Succeeded"})
        return 405, _err("MethodNotAllowed", method), {}

    # --- server --------------------------------------------------------------------------------------
    def start(self, port: int = 0) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                if fake.state.delay_s:
                    time.sleep(fake.state.delay_s)
                status, doc, headers = fake.handle(self.command, parsed.path, body)
                data = b"" if doc is None else json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-ms-request-id", "orch-fake")
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = _serve

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


def _err(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def main() -> None:
    parser = argparse.ArgumentParser(description="a fake Azure Resource Manager for VMs and NICs")
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args()
    fake = ArmFake()
    print(f"serving on {fake.start(args.port)}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
