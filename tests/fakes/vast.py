"""A small, faithful fake of the Vast.ai REST API (console.vast.ai) for tests, on 127.0.0.1.

It speaks the wire shapes of vast-ai/docs ``api-reference/openapi.yaml`` @ e758d350 (the fields it serves are
listed, as facts, in tests/fakes/schemas/vast_fields.json, and tests/test_fake_spec_vast.py holds the fake
to them). Routes (trailing slash optional, as the vast CLI always sends one):

* ``POST /api/v0/bundles/``                 offer search, with the filter ops eq/neq/gt/gte/lt/lte/in/notin
* ``PUT  /api/v0/asks/{id}/``               create an instance from an ask -> {"success", "new_contract"}
* ``GET/PUT/DELETE /api/v0/instances/{id}/`` show / stop-start-label / destroy
* ``GET  /api/v1/instances/``               keyset-paged list (limit <= 25, after_token, select_filters)
* ``PUT  /api/v0/instances/bid_price/{id}/`` change an interruptible's bid

Behaviour: Bearer key check on every route; asks leave the inventory while rented and come back on
destroy; a new instance reads ``loading`` on its first read and ``running`` after; ``outbid(id)`` stops an
interruptible the way Vast does (cur_state == intended_status == next_state == "stopped"); a bid below the
ask's ``min_bid`` answers ``invalid_price`` and, with ``low_bid_creates_stopped``, also leaves a stopped
instance under the requested label (the leak dstack#4025 describes); ``min_bid_rises`` moves an ask's floor
between a search and the create (how a bid that cleared the search comes to be refused); an interruptible
reports ``dph_total`` = its bid plus its disk (Vast bills the bid its renter set, not the ask's floor); with
``bid_ignored``, a create that carried a bid rents on-demand (``is_bid`` false), as a spot create without a
bid does. Switches inject faults on the create route: capacity, quota, throttle, auth, server-error;
``slow(seconds)`` holds every answer until ``slow(0)``
(``seconds`` only bounds a hung test). Every request is recorded in ``requests``.

Run standalone: ``python -m tests.fakes.vast --port 8765 [--api-key KEY]``.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.answer_gate import AnswerGate
from tests.fakes.spec_check import spec_errors

DEFAULT_API_KEY = "vast-test-key"
PAGE_MAX = 25
ONSTART_LIMIT = 4048     # vast-ai/docs openapi.yaml @ e758d350, PUT /api/v0/asks/{id} requestBody onstart
#: Request-body keys of POST /bundles/ that are not filters.
SEARCH_META_KEYS = frozenset({"type", "order", "limit", "allocated_storage"})
SEARCH_TYPES = frozenset({"on-demand", "ondemand", "bid", "reserved"})
FILTER_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda a, b: a == b,
    "neq": lambda a, b: a != b,
    "gt": lambda a, b: a is not None and a > b,
    "gte": lambda a, b: a is not None and a >= b,
    "lt": lambda a, b: a is not None and a < b,
    "lte": lambda a, b: a is not None and a <= b,
    "in": lambda a, b: a in b,
    "notin": lambda a, b: a not in b,
}
#: Instance columns GET /api/v1/instances/ can filter on (the spec: columns stored on the contract record).
INSTANCE_FILTER_COLUMNS = frozenset({"id", "label", "actual_status", "gpu_name", "verification"})


def _offer(ask_id: int, machine_id: int, gpu_name: str, num_gpus: int, gpu_ram: int, *, dph_base: float,
           min_bid: float, geolocation: str, cpu_cores: int, cpu_ram: int, reliability: float = 0.995,
           verified: bool = True, rentable: bool = True, rented: bool = False, cuda: float = 12.4,
           direct_ports: int = 64, inet_down: float = 1800.0, compute_cap: int = 890, bw_nvlink: float = 0.0,
           storage_cost: float = 0.15) -> dict[str, Any]:
    return {
        "id": ask_id, "ask_contract_id": ask_id, "bundle_id": ask_id + 500000, "machine_id": machine_id,
        "host_id": 9000 + machine_id, "num_gpus": num_gpus, "gpu_name": gpu_name, "gpu_ram": gpu_ram,
        "gpu_total_ram": gpu_ram * num_gpus, "gpu_arch": "nvidia", "compute_cap": compute_cap,
        "cuda_max_good": cuda, "driver_version": "550.120.00", "cpu_arch": "amd64",
        "cpu_cores": cpu_cores * 2, "cpu_cores_effective": float(cpu_cores), "cpu_ram": cpu_ram,
        "disk_space": 1500.0, "disk_bw": 3000.0, "dph_base": dph_base, "dph_total": dph_base,
        "min_bid": min_bid, "storage_cost": storage_cost, "inet_up": inet_down * 0.8, "inet_down": inet_down,
        "inet_up_cost": 0.004, "inet_down_cost": 0.004, "direct_port_count": direct_ports,
        "reliability": reliability, "reliability2": reliability, "score": round(reliability * 100, 2),
        "geolocation": geolocation, "verified": verified, "verification": "verified" if verified else "unverified",
        "rentable": rentable, "rented": rented, "is_bid": False, "static_ip": True, "bw_nvlink": bw_nvlink,
        "public_ipaddr": f"203.0.113.{machine_id % 250 + 1}",
    }


def seed_offers() -> list[dict[str, Any]]:
    """A small realistic inventory: what the filters should keep, and what they should drop."""
    return [
        _offer(7001001, 41, "RTX 4090", 1, 24564, dph_base=0.34, min_bid=0.18, geolocation="Texas, US",
               cpu_cores=16, cpu_ram=64300),
        _offer(7001002, 42, "RTX 4090", 2, 24564, dph_base=0.66, min_bid=0.35, geolocation="Quebec, CA",
               cpu_cores=32, cpu_ram=128600),
        _offer(7001003, 43, "RTX 4090", 1, 24564, dph_base=0.22, min_bid=0.10, geolocation="Taiwan, TW",
               cpu_cores=8, cpu_ram=32150, reliability=0.91),                       # unreliable: filtered
        _offer(7001004, 44, "RTX 4090", 1, 24564, dph_base=0.25, min_bid=0.12, geolocation="Norway, NO",
               cpu_cores=8, cpu_ram=32150, verified=False),                         # unverified: filtered
        _offer(7001005, 45, "RTX 4090", 1, 24564, dph_base=0.28, min_bid=0.14, geolocation="Ohio, US",
               cpu_cores=8, cpu_ram=32150, direct_ports=0),                         # no direct ports
        _offer(7002001, 51, "A100 SXM4", 1, 81920, dph_base=1.05, min_bid=0.62, geolocation="Bavaria, DE",
               cpu_cores=32, cpu_ram=257000, compute_cap=800, cuda=12.2),
        _offer(7002002, 52, "A100 SXM4", 4, 81920, dph_base=4.10, min_bid=2.40, geolocation="Oregon, US",
               cpu_cores=96, cpu_ram=1031000, compute_cap=800, bw_nvlink=400.0),
        _offer(7002003, 53, "A100 SXM4", 1, 81920, dph_base=0.95, min_bid=0.55, geolocation="Utah, US",
               cpu_cores=32, cpu_ram=257000, compute_cap=800, cuda=11.8),             # old CUDA: filtered
        _offer(7003001, 61, "H100 SXM", 1, 81559, dph_base=2.10, min_bid=1.30, geolocation="Virginia, US",
               cpu_cores=26, cpu_ram=257000, compute_cap=900, cuda=12.6),
        _offer(7003002, 62, "H100 SXM", 8, 81559, dph_base=16.40, min_bid=10.20, geolocation="Finland, FI",
               cpu_cores=208, cpu_ram=2063000, compute_cap=900, cuda=12.6, bw_nvlink=900.0),
        _offer(7003003, 63, "H100 SXM", 1, 81559, dph_base=1.80, min_bid=1.00, geolocation="Iowa, US",
               cpu_cores=26, cpu_ram=257000, compute_cap=900, cuda=12.6, rented=True),  # rented: filtered
    ]


#: What a search may order by: every field of an ask, and the two each answer adds (dph_total, is_bid).
_ORDER_KEYS = frozenset(seed_offers()[0]) | {"dph_total", "is_bid"}


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    authorized: bool
    user_agent: str = ""


@dataclass
class FakeState:
    api_key: str = DEFAULT_API_KEY
    offers: dict[int, dict[str, Any]] = field(default_factory=dict)
    instances: dict[int, dict[str, Any]] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)      # create-route faults -> remaining count
    low_bid_creates_stopped: bool = False
    # Vast's create answer does not say which rental it made; with this set, a create that carried a bid
    # rents on-demand anyway (what a spot create without a bid does), so the adapter's check can be tested.
    bid_ignored: bool = False
    # ask id -> the min_bid that ask has by the time the next create for it arrives: another renter's bid raised
    # the floor between orch's search and its create, the way a real bid comes to be refused (invalid_price).
    min_bid_rises: dict[int, float] = field(default_factory=dict)
    validated: int = 0                                         # create bodies checked against the vendored spec
    refusals: list[str] = field(default_factory=list)          # each create the spec (or a limit) refused
    ssh_endpoint: tuple[str, int] | None = None                # where "22/tcp" points, for e2e tests
    next_id: int = 31000001
    requests: list[Recorded] = field(default_factory=list)


class VastFake:
    """The fake's state and behaviour; ``start()`` serves it on 127.0.0.1 in a daemon thread."""

    #: "lost-answer" creates the instance, then answers 503 (the reply was lost on the way back).
    FAULTS = ("capacity", "quota", "throttle", "auth", "server-error", "lost-answer")

    def __init__(self, api_key: str = DEFAULT_API_KEY) -> None:
        self.state = FakeState(api_key=api_key)
        self.lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._gate = AnswerGate()
        self.reset()

    # ---- control -------------------------------------------------------------------------------------
    def reset(self) -> None:
        with self.lock:
            key = self.state.api_key
            self.state = FakeState(api_key=key, offers={o["id"]: o for o in seed_offers()})
            self._gate.slow(0)

    def slow(self, seconds: float) -> None:
        """Hold every answer until ``slow(0)``, at most ``seconds`` (tests/fakes/answer_gate.py)."""
        self._gate.slow(seconds)

    def inject(self, fault: str, times: int = 1) -> None:
        """Fail the next ``times`` create calls (PUT /asks/{id}/) with ``fault``."""
        if fault not in self.FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(self.FAULTS)}")
        with self.lock:
            self.state.faults[fault] = times

    def outbid(self, instance_id: int | str) -> None:
        """Another renter outbid this interruptible: Vast stops it (it keeps its disk, and bills it)."""
        with self.lock:
            inst = self.state.instances[int(instance_id)]
            inst.update(actual_status="stopped", intended_status="stopped", cur_state="stopped",
                        next_state="stopped", status_msg="Instance stopped: outbid by a higher bid",
                        ports=None)

    @property
    def requests(self) -> list[Recorded]:
        return self.state.requests

    def start(self, port: int = 0) -> str:
        """Serve on 127.0.0.1:``port`` (0: any free port); return the base URL (ends in /api/v0)."""
        fake = self

        class Handler(_Handler):
            pass

        Handler.fake = fake
        self._server = _QuietServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="vast-fake", daemon=True)
        self._thread.start()
        return f"http://127.0.0.1:{self._server.server_address[1]}/api/v0"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ---- request handling ----------------------------------------------------------------------------
    def handle(self, method: str, raw_path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        split = urlsplit(raw_path)
        path = split.path.rstrip("/")
        query = parse_qs(split.query)
        authorized = headers.get("authorization", "") == f"Bearer {self.state.api_key}"
        with self.lock:
            self.state.requests.append(Recorded(method, path, query, copy.deepcopy(body), authorized,
                                                headers.get("user-agent", "")))
        self._gate.pass_through()
        route = _route(method, path)
        if route is None:
            return 404, {"success": False, "error": "not_found", "msg": f"no route {method} {path}"}
        name, ident = route
        if not authorized:
            # The spec documents an unauthorized search as HTTP 404 and elsewhere as 401 auth_error.
            status = 404 if name == "search" else 401
            return status, {"success": False, "error": "auth_error", "msg": "Invalid user key"}
        with self.lock:
            return getattr(self, f"_r_{name}")(ident, query, body)

    def _r_search(self, _ident: int | None, _query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict):
            return 400, {"error": "invalid_request", "msg": "Invalid json body"}
        # The body against the vendored spec's search_request (types, order pairs, known keys) before any use.
        wrong = spec_errors("vast_fields.json", "#/$defs/search_request", body)
        if wrong:
            self.state.refusals.append(wrong[0])
            return 400, {"error": "invalid_request", "msg": wrong[0]}
        kind = body.get("type", "on-demand")
        if kind not in SEARCH_TYPES:
            return 400, {"error": "invalid_request", "msg": f"invalid type {kind!r}"}
        storage = float(body.get("allocated_storage", 8.0))
        filters = {k: v for k, v in body.items() if k not in SEARCH_META_KEYS}
        try:
            found = [o for o in self.state.offers.values() if _matches(o, filters)]
        except _BadQuery as exc:
            return 400, {"error": "invalid_request", "msg": str(exc)}
        out = []
        for offer in found:
            o = dict(offer)
            disk_hr = storage * o["storage_cost"] / 720.0
            o["dph_total"] = round(o["dph_base"] + disk_hr, 6)
            o["is_bid"] = kind == "bid"
            out.append(o)
        for key, direction in reversed(body.get("order", [["score", "desc"]])):
            # An ask's fields name the order keys, whether or not any ask matched: an empty search is an empty
            # list (as Vast answers it), never a refusal of a key that orders full ones.
            if key not in _ORDER_KEYS:
                return 400, {"error": "invalid_request", "msg": f"{key} is not a valid order key"}
            out.sort(key=lambda o, k=key: o[k], reverse=direction == "desc")
        return 200, {"offers": out[: int(body.get("limit", 64))]}

    def _take_fault(self) -> str | None:
        for name in self.FAULTS:
            left = self.state.faults.get(name, 0)
            if left > 0:
                self.state.faults[name] = left - 1
                return name
        return None

    def _r_create(self, ask_id: int | None, _query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        fault = self._take_fault()
        if fault == "throttle":
            return 429, {"detail": "API requests too frequent endpoint threshold=4.5"}
        if fault == "server-error":
            return 503, {"success": False, "error": "server_error", "msg": "Service temporarily unavailable"}
        if fault == "auth":
            return 401, {"success": False, "error": "auth_error", "msg": "Invalid user key"}
        if fault == "quota":
            return 403, {"success": False, "error": "insufficient_credit",
                         "msg": "Your account lacks credit; see the billing page.", "ask_id": ask_id}
        offer = self.state.offers.get(ask_id or -1)
        if fault == "capacity" or offer is None or offer["rented"] or not offer["rentable"]:
            return 404, {"success": False, "error": "no_such_ask",
                         "msg": f"error 404/3603: no_such_ask Instance type by id {ask_id} is not available.",
                         "ask_id": ask_id}
        if offer["id"] in self.state.min_bid_rises:
            offer["min_bid"] = self.state.min_bid_rises.pop(offer["id"])
        if not isinstance(body, dict) or not isinstance(body.get("image"), str):
            return 400, {"success": False, "error": "invalid_args", "msg": "'image' is required", "ask_id": ask_id}
        onstart = body.get("onstart")
        if isinstance(onstart, str) and len(onstart) > ONSTART_LIMIT:
            # The spec (PUT /api/v0/asks/{id}, onstart): "limited to 4048 characters -- gzip+base64 for longer".
            self.state.refusals.append("onstart")
            return 400, {"success": False, "error": "invalid_args", "ask_id": ask_id,
                         "msg": f"onstart field is limited to {ONSTART_LIMIT} characters (got {len(onstart)})."}
        price = body.get("price")
        if price is not None and (not isinstance(price, int | float) or not 0.001 <= price <= 128.0):
            return 400, {"success": False, "error": "invalid_args", "msg": "Invalid price.", "ask_id": ask_id}
        # Every other field against the vendored spec's create_request (tests/fakes/schemas/vast_fields.json).
        self.state.validated += 1
        wrong = spec_errors("vast_fields.json", "#/$defs/create_request", body)
        if wrong:
            self.state.refusals.append(wrong[0])
            return 400, {"success": False, "error": "invalid_args", "msg": wrong[0], "ask_id": ask_id}
        if price is not None and price < offer["min_bid"]:
            msg = f"Your bid {price:.4f} is below the minimum bid {offer['min_bid']:.4f} for this ask."
            if self.state.low_bid_creates_stopped:
                # The leak: Vast says no, yet a stopped (storage-billing) instance exists under the label.
                self._new_instance(offer, body, price, stopped=True)
                return 200, {"success": False, "error": "invalid_price", "msg": msg}
            return 400, {"success": False, "error": "invalid_price", "msg": msg, "ask_id": ask_id}
        iid = self._new_instance(offer, body, price, stopped=False)
        if fault == "lost-answer":
            return 503, {"success": False, "error": "server_error", "msg": "upstream timed out"}
        return 200, {"success": True, "new_contract": iid}

    def _new_instance(self, offer: dict[str, Any], body: dict[str, Any], price: float | None, *,
                      stopped: bool) -> int:
        iid = self.state.next_id
        self.state.next_id += 1
        disk = float(body.get("disk") or 10.0)
        disk_hr = disk * offer["storage_cost"] / 720.0
        status = "stopped" if stopped else "loading"
        intended = "stopped" if stopped else "running"
        self.state.instances[iid] = {
            "id": iid, "machine_id": offer["machine_id"], "host_id": offer["host_id"],
            "bundle_id": offer["bundle_id"], "label": body.get("label"),
            "actual_status": status, "intended_status": intended, "cur_state": intended, "next_state": intended,
            "status_msg": None, "image_uuid": body["image"], "image_args": list(body.get("args") or []),
            "image_runtype": str(body.get("runtype") or "ssh"), "onstart": body.get("onstart"),
            "num_gpus": offer["num_gpus"], "gpu_name": offer["gpu_name"], "gpu_ram": offer["gpu_ram"],
            "gpu_totalram": offer["gpu_total_ram"], "gpu_arch": "nvidia", "cpu_arch": "amd64",
            "cpu_cores": offer["cpu_cores"], "cpu_cores_effective": offer["cpu_cores_effective"],
            "cpu_ram": offer["cpu_ram"], "disk_space": disk, "geolocation": offer["geolocation"],
            "public_ipaddr": offer["public_ipaddr"], "ssh_host": f"ssh{offer['machine_id'] % 9 + 1}.vast.ai",
            "ssh_idx": str(offer["machine_id"] % 9 + 1), "ssh_port": 20000 + iid % 10000,
            "direct_port_count": offer["direct_port_count"], "ports": None,
            "is_bid": price is not None and not self.state.bid_ignored, "min_bid": offer["min_bid"],
            "dph_base": offer["dph_base"],
            "dph_total": round((price if price is not None else offer["dph_base"]) + disk_hr, 6),
            "storage_cost": offer["storage_cost"], "reliability2": offer["reliability2"],
            "verification": offer["verification"], "rentable": True, "start_date": time.time(),
            "_ask_id": offer["id"], "_bid": price, "_reads": 0,
        }
        offer["rented"] = True
        return iid

    def _read(self, inst: dict[str, Any]) -> dict[str, Any]:
        """The instance as the API shows it now; a loading one is running from its second read on."""
        inst["_reads"] += 1
        if inst["actual_status"] == "loading" and inst["_reads"] > 1:
            inst["actual_status"] = "running"
            inst["status_msg"] = f"success, running {inst['image_uuid']}/ssh"
        if inst["actual_status"] == "running" and inst["ports"] is None:
            host, port = self.state.ssh_endpoint or (inst["public_ipaddr"], 40000 + inst["id"] % 10000)
            inst["public_ipaddr"] = host
            inst["ports"] = {"22/tcp": [{"HostIp": host, "HostPort": str(port)}],
                             "10022/tcp": [{"HostIp": host, "HostPort": str(port + 1)}]}
        return {k: v for k, v in inst.items() if not k.startswith("_")}

    def _r_show(self, iid: int | None, _query: dict[str, list[str]], _body: Any) -> tuple[int, Any]:
        inst = self.state.instances.get(iid or -1)
        return 200, {"instances": self._read(inst) if inst else None}

    def _r_manage(self, iid: int | None, _query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        inst = self.state.instances.get(iid or -1)
        if inst is None:
            return 404, {"success": False, "error": "no_such_instance", "msg": "Instance with that ID does not exist."}
        if not isinstance(body, dict) or not ({"state", "label"} & set(body)):
            return 400, {"success": False, "error": "invalid_args", "msg": "state or label required"}
        wrong = spec_errors("vast_fields.json", "#/$defs/manage_request", body)     # state enum, label maxLength
        if wrong:
            self.state.refusals.append(wrong[0])
            return 400, {"success": False, "error": "invalid_args", "msg": wrong[0]}
        if "label" in body:
            inst["label"] = body["label"]
        if body.get("state") == "stopped":
            inst.update(actual_status="stopped", intended_status="stopped", cur_state="stopped",
                        next_state="stopped", ports=None)
        elif body.get("state") == "running":
            inst.update(actual_status="loading", intended_status="running", cur_state="running",
                        next_state="running", _reads=0)
        return 200, {"success": True}

    def _r_destroy(self, iid: int | None, _query: dict[str, list[str]], _body: Any) -> tuple[int, Any]:
        inst = self.state.instances.pop(iid or -1, None)
        if inst is None:
            return 404, {"success": False, "error": "no_such_instance", "msg": "Instance with that ID does not exist."}
        offer = self.state.offers.get(inst["_ask_id"])
        if offer is not None:
            offer["rented"] = False
        return 200, {"success": True, "msg": "Instance destroyed successfully"}

    def _r_bid(self, iid: int | None, _query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        inst = self.state.instances.get(iid or -1)
        if inst is None:
            return 404, {"success": False, "error": "no_such_instance", "msg": "Instance with that ID does not exist."}
        price = body.get("price") if isinstance(body, dict) else None
        if not isinstance(price, int | float) or not 0.001 <= price <= 32.0:
            return 400, {"success": False, "error": "invalid_args", "msg": "Please set a bid price >= 0.001."}
        wrong = spec_errors("vast_fields.json", "#/$defs/bid_request", body)        # client_id is required
        if wrong:
            self.state.refusals.append(wrong[0])
            return 400, {"success": False, "error": "invalid_args", "msg": wrong[0]}
        inst["_bid"] = price
        if inst["is_bid"] and inst["cur_state"] == "stopped" and price >= inst["min_bid"]:
            inst.update(actual_status="loading", intended_status="running", cur_state="running",
                        next_state="running", status_msg=None, _reads=0)
        return 200, {"success": True}

    def _r_list(self, _ident: int | None, query: dict[str, list[str]], _body: Any) -> tuple[int, Any]:
        try:
            limit = int(query.get("limit", ["25"])[0])
            limit = 5 if limit <= 0 else min(limit, PAGE_MAX)
            filters = json.loads(query.get("select_filters", ["{}"])[0])
            if not isinstance(filters, dict) or set(filters) - INSTANCE_FILTER_COLUMNS:
                raise _BadQuery(f"not filterable: {sorted(set(filters) - INSTANCE_FILTER_COLUMNS)}")
            after = 0
            if "after_token" in query:
                after = int(json.loads(base64.b64decode(query["after_token"][0]))["values"]["id"])
        except (ValueError, KeyError, TypeError, _BadQuery) as exc:
            error = "invalid_token" if "after_token" in query else "invalid_request"
            return 400, {"error": error, "msg": f"Error in query parameters: {exc}"}
        try:
            rows = [i for iid, i in sorted(self.state.instances.items()) if iid > after and _matches(i, filters)]
        except _BadQuery as exc:
            return 400, {"error": "invalid_request", "msg": str(exc)}
        page = rows[:limit]
        token = None
        if len(rows) > limit:
            token = base64.b64encode(json.dumps({"values": {"id": page[-1]["id"]}}).encode()).decode()
        labels: dict[str, int] = {}
        for inst in self.state.instances.values():
            labels[inst["label"] or ""] = labels.get(inst["label"] or "", 0) + 1
        return 200, {"success": True, "instances_found": len(page), "total_instances": len(rows),
                     "label_counts": labels, "next_token": token, "instances": [self._read(i) for i in page]}


class _BadQuery(ValueError):
    pass


def _norm_gpu(value: Any) -> Any:
    # The search API accepts "RTX_4090" and "RTX 4090" alike (the CLI's spelling vs the offers' field).
    return value.replace("_", " ") if isinstance(value, str) else value


def _matches(row: dict[str, Any], filters: dict[str, Any]) -> bool:
    for fname, cond in filters.items():
        if fname not in row or fname.startswith("_"):
            raise _BadQuery(f"{fname} is not a valid search key")
        if not isinstance(cond, dict):
            raise _BadQuery(f"filter {fname} must be an object of operators")
        value = row[fname]
        for op, arg in cond.items():
            if op not in FILTER_OPS:
                raise _BadQuery(f"unknown operator {op!r} on {fname}")
            if op in ("in", "notin") and not isinstance(arg, list):
                raise _BadQuery(f"{op} on {fname} takes a list")
            if fname == "gpu_name":
                value = _norm_gpu(value)
                arg = [_norm_gpu(a) for a in arg] if isinstance(arg, list) else _norm_gpu(arg)
            try:
                if not FILTER_OPS[op](value, arg):
                    return False
            except TypeError as exc:
                raise _BadQuery(f"cannot compare {fname} with {arg!r}") from exc
    return True


_ROUTES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("POST", re.compile(r"^/api/v0/bundles$"), "search"),
    ("PUT", re.compile(r"^/api/v0/asks/(\d+)$"), "create"),
    ("PUT", re.compile(r"^/api/v0/instances/bid_price/(\d+)$"), "bid"),
    ("GET", re.compile(r"^/api/v0/instances/(\d+)$"), "show"),
    ("PUT", re.compile(r"^/api/v0/instances/(\d+)$"), "manage"),
    ("DELETE", re.compile(r"^/api/v0/instances/(\d+)$"), "destroy"),
    ("GET", re.compile(r"^/api/v1/instances$"), "list"),
)

#: route name -> (method, path as the spec spells it), for the spec test.
SPEC_ROUTES: dict[str, tuple[str, str]] = {
    "search": ("post", "/api/v0/bundles"),
    "create": ("put", "/api/v0/asks/{id}"),
    "bid": ("put", "/api/v0/instances/bid_price/{id}"),
    "show": ("get", "/api/v0/instances/{id}"),
    "manage": ("put", "/api/v0/instances/{id}"),
    "destroy": ("delete", "/api/v0/instances/{id}"),
    "list": ("get", "/api/v1/instances"),
}


def spec_route(method: str, raw_path: str) -> tuple[str, str] | None:
    """The spec's (method, path) for a request the fake serves, or None."""
    found = _route(method, urlsplit(raw_path).path.rstrip("/"))
    return SPEC_ROUTES[found[0]] if found else None


def _route(method: str, path: str) -> tuple[str, int | None] | None:
    for m, pattern, name in _ROUTES:
        match = pattern.match(path)
        if m == method and match:
            return name, int(match.group(1)) if match.groups() else None
    return None


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out (the slow switch) hangs up mid-answer: expected, not worth a traceback.
        pass


class _Handler(BaseHTTPRequestHandler):
    fake: VastFake
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16  # headers and body leave in one segment (no Nagle + delayed-ACK stalls: ~45 ms a request)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, payload = self.fake.handle(self.command, self.path, headers, body)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 429:
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = _serve


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fake Vast.ai REST API on 127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--api-key", default=DEFAULT_API_KEY)
    args = parser.parse_args(argv)
    fake = VastFake(api_key=args.api_key)
    url = fake.start(args.port)
    print(f"fake Vast.ai API at {url} (Bearer {args.api_key[:4]}...)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    main()
