"""A small, faithful fake of RunPod's GraphQL API (``POST /graphql``), the operations orch sends.

RunPod publishes no GraphQL schema file; the shapes here follow RunPod's own runpod-python client (see
tests/fakes/schemas/runpod_fields.json for the fields served and their sources) and the REST spec's
``Pod.desiredStatus`` enum. tests/test_fake_specs_lambda_runpod.py validates the answers against it.

Operations recognised by their root field (a real GraphQL parser is not needed; tests/fakes/graphql_lite
parses arguments, ``$variables`` and selection sets faithfully and answers only the selected fields):
``gpuTypes`` (with ``lowestPrice(input:{gpuCount, secureCloud})``), ``myself { pods }``,
``pod(input:{podId})``, ``podFindAndDeployOnDemand(input)``, ``podStop``, ``podResume``, ``podTerminate``.

Behaviour: errors come as HTTP 200 ``{"errors": [{"message", "path", "extensions": {"code"}}], "data": ...}``
like RunPod's; bad keys get HTTP 401. A new pod has ``runtime: null`` until it has been read once, then
a runtime with SSH port mappings; ``podStop`` -> EXITED (runtime null); ``podTerminate`` removes the pod
(``pod`` then answers null, a second terminate "pod not found to terminate").
Switches (``faults.arm(name, times)``; -1: until cleared): ``capacity`` (the documented no-instances
message), ``quota`` (insufficient balance), ``throttle`` (HTTP 429), ``auth`` (HTTP 401), ``server_error``
(HTTP 502), ``slow`` (answers delayed by ``slow_s``). Not modelled: spot/interruptible pods (retired by
RunPod in September 2026), CPU pods, network volumes, templates, clusters, serverless, data-center
placement (every pod lands in ``datacenter``), the pod's env as RunPod renders it.

Run standalone: ``python -m tests.fakes.runpod --port 8089`` (API key ``test-key``).
"""

from __future__ import annotations

import itertools
import secrets
import string
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.graphql_lite import GraphQLSyntaxError, UnknownFieldError, parse, prune, resolve
from tests.fakes.lr_base import FakeServer, Faults, Recorded, Reply, bearer_ok, serve_forever_cli
from tests.fakes.spec_check import spec_errors

# RunPod's current no-capacity wording; OLD_NO_CAPACITY is the earlier one, still recognised by the adapter.
NO_CAPACITY = ("There are no longer any instances available with the requested specifications. "
               "Please refresh and try again.")
OLD_NO_CAPACITY = "There are no instances available with the request specifications. Please try again later."
NO_BALANCE = "You do not have enough funds to deploy this pod. Please add funds to your account."

# podFindAndDeployOnDemand input fields, as RunPod's runpod-python client sends them
# (runpod/api/mutations/pods.py @ 008006083021e027ca3b7a1faeda454b5032879e).
DEPLOY_FIELDS = frozenset({
    "name", "imageName", "cloudType", "startSsh", "gpuTypeId", "supportPublicIp", "gpuCount", "volumeInGb",
    "minVcpuCount", "minMemoryInGb", "allowedCudaVersions", "dataCenterId", "dockerArgs", "countryCode",
    "containerDiskInGb", "ports", "volumeMountPath", "env", "templateId", "networkVolumeId", "minDownload",
    "minUpload",
})
CLOUD_TYPES = ("SECURE", "COMMUNITY", "ALL")


@dataclass
class FakeGpuType:
    id: str
    displayName: str
    memoryInGb: int
    securePrice: float | None
    communityPrice: float | None
    maxGpuCount: int = 8
    secure_stock: str | None = "High"
    community_stock: str | None = "Medium"
    vcpus_per_gpu: int = 16
    memory_per_gpu: int = 125

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "displayName": self.displayName, "memoryInGb": self.memoryInGb,
            "secureCloud": self.securePrice is not None, "communityCloud": self.communityPrice is not None,
            "securePrice": self.securePrice, "communityPrice": self.communityPrice,
            "maxGpuCount": self.maxGpuCount,
            "maxGpuCountSecureCloud": self.maxGpuCount if self.securePrice is not None else 0,
            "maxGpuCountCommunityCloud": self.maxGpuCount if self.communityPrice is not None else 0,
            "minPodGpuCount": 1,
        }

    def lowest_price(self, args: dict[str, Any]) -> dict[str, Any]:
        count = int(args.get("gpuCount") or 1)
        secure = args.get("secureCloud")
        if secure is None:  # both clouds: the cheaper one with stock
            secure = self.communityPrice is None or self.community_stock is None
        price = self.securePrice if secure else self.communityPrice
        stock = self.secure_stock if secure else self.community_stock
        if price is None or count > self.maxGpuCount:
            stock = None
        return {
            "minimumBidPrice": None,  # no interruptible market any more
            "uninterruptablePrice": price,
            "minVcpu": self.vcpus_per_gpu * count,
            "minMemory": self.memory_per_gpu * count,
            "stockStatus": stock,
            "countryCode": "US",
        }


def default_gpu_types() -> list[FakeGpuType]:
    return [
        FakeGpuType("NVIDIA A100 80GB PCIe", "A100 PCIe", 80, 1.64, 1.19, vcpus_per_gpu=8, memory_per_gpu=117),
        FakeGpuType("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 2.69, 2.69, vcpus_per_gpu=20),
        FakeGpuType("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 0.69, 0.34, vcpus_per_gpu=6, memory_per_gpu=41),
        FakeGpuType("NVIDIA A40", "A40", 48, 0.40, None, secure_stock=None),  # not in orch's GPU registry
    ]


@dataclass
class _Pod:
    id: str
    name: str
    gpu: FakeGpuType
    gpu_count: int
    cloud: str
    inputs: dict[str, Any]
    desired: str = "RUNNING"
    started: bool = False
    reads: int = 0
    port_base: int = 0


def _pod_id() -> str:
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(14))


@dataclass
class RunPodFake:
    api_key: str = "test-key"
    slow_s: float = 0.0
    gpu_types: list[FakeGpuType] = field(default_factory=default_gpu_types)
    faults: Faults = field(default_factory=Faults)
    requests: list[Recorded] = field(default_factory=list)
    pods: dict[str, _Pod] = field(default_factory=dict)
    no_capacity_message: str = NO_CAPACITY              # OLD_NO_CAPACITY: the wording RunPod used before
    validated: int = 0                                   # deploy inputs checked against the derived schema
    refusals: list[str] = field(default_factory=list)    # each deploy input the schema refused
    _ports: itertools.count = field(default_factory=lambda: itertools.count(40000, 2))  # type: ignore[type-arg]
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self._lock:
            self.faults.clear()
            self.requests.clear()
            self.pods.clear()
            self.validated = 0
            self.refusals.clear()
            self.no_capacity_message = NO_CAPACITY
            self.gpu_types = default_gpu_types()

    def operations(self) -> list[dict[str, Any]]:
        """The GraphQL bodies received, in order ({"query", "variables", "operationName"?})."""
        return [r.body for r in self.requests if isinstance(r.body, dict)]

    # -- HTTP --------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, body: Any, headers: dict[str, str]) -> Reply:
        authorized = bearer_ok(headers, self.api_key)
        with self._lock:
            reply = self._http(method, path.split("?", 1)[0], body, authorized)
            self.requests.append(Recorded(method, path, body, authorized, reply.status, reply.body))
        if self.slow_s and self.faults.take("slow"):
            time.sleep(self.slow_s)  # the switch models a slow server; tests pair it with a client timeout
        return reply

    def _http(self, method: str, path: str, body: Any, authorized: bool) -> Reply:
        if (method, path) != ("POST", "/graphql"):
            return Reply(404, {"errors": [{"message": f"Cannot {method} {path}"}]})
        if not authorized or self.faults.take("auth"):
            return Reply(401, {"errors": [{"message": "Unauthorized", "extensions": {"code": "UNAUTHENTICATED"}}]})
        if self.faults.take("throttle"):
            return Reply(429, {"errors": [{"message": "Too many requests"}]}, {"Retry-After": "0"})
        if self.faults.take("server_error"):
            return Reply(502, {"errors": [{"message": "Bad gateway"}]})
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            return Reply(400, {"errors": [{"message": "Must provide query string.",
                                           "extensions": {"code": "BAD_REQUEST"}}]})
        try:
            op = parse(body["query"])
            variables = body.get("variables") or {}
            data: dict[str, Any] = {}
            errors: list[dict[str, Any]] = []
            _resolve_tree(op.fields, variables, op.variables)
            for f in op.fields:
                value, error = self._root(op.kind, f.name, f.args, f.selection)
                data[f.name] = None if error else prune(value, f.selection, f.name)
                if error:
                    errors.append({**error, "path": [f.name]})
        except (GraphQLSyntaxError, UnknownFieldError) as exc:
            return Reply(400, {"errors": [{"message": str(exc),
                                           "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"}}]})
        return Reply(200, {"errors": errors, "data": data} if errors else {"data": data})

    # -- operations ----------------------------------------------------------------------------------

    def _root(self, kind: str, name: str, args: dict[str, Any], selection: list[Any]
              ) -> tuple[Any, dict[str, Any] | None]:
        handlers = {
            ("query", "gpuTypes"): lambda: (self._gpu_types(args, selection), None),
            ("query", "myself"): lambda: ({"id": "user_fake", "pods": [self._read(p) for p in list(self.pods.values())]
                                           }, None),
            ("query", "pod"): lambda: self._get(args),
            ("mutation", "podFindAndDeployOnDemand"): lambda: self._deploy(args),
            ("mutation", "podStop"): lambda: self._stop(args),
            ("mutation", "podResume"): lambda: self._resume(args),
            ("mutation", "podTerminate"): lambda: self._terminate(args),
        }
        handler = handlers.get((kind, name))
        if handler is None:
            raise UnknownFieldError(f'Cannot query field "{name}" on type "{kind.capitalize()}".')
        return handler()

    def _gpu_types(self, args: dict[str, Any], selection: list[Any]) -> list[dict[str, Any]]:
        wanted = (args.get("input") or {}).get("id")
        lp = next((f for f in selection if f.name == "lowestPrice"), None)
        out = []
        for g in self.gpu_types:
            if wanted and g.id != wanted:
                continue
            item = g.as_json()
            if lp is not None:
                item["lowestPrice"] = g.lowest_price(lp.args.get("input") or {}) if lp.args.get("input") else None
            out.append(item)
        return out

    def _pod_arg(self, args: dict[str, Any]) -> str:
        inp = args.get("input")
        if not isinstance(inp, dict) or not isinstance(inp.get("podId"), str):
            raise GraphQLSyntaxError('Argument "input" requires {podId: String!}.')
        return inp["podId"]

    def _get(self, args: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
        pod = self.pods.get(self._pod_arg(args))
        return (self._read(pod) if pod else None), None

    def _deploy(self, args: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
        inp = args.get("input")
        if not isinstance(inp, dict):
            return None, _user_error('Argument "input" of type "PodFindAndDeployOnDemandInput!" was not provided.')
        unknown = set(inp) - DEPLOY_FIELDS
        if unknown:
            return None, _user_error(f"Field \"{sorted(unknown)[0]}\" is not defined by type "
                                     "\"PodFindAndDeployOnDemandInput\".")
        # Every field's type against the derived schema (tests/fakes/schemas/runpod_fields.json), as RunPod's
        # GraphQL layer coerces input values: a wrong one is a BAD_USER_INPUT error.
        self.validated += 1
        wrong = spec_errors("runpod_fields.json", "#/$defs/PodFindAndDeployOnDemandInput", inp)
        if wrong:
            self.refusals.append(wrong[0])
            return None, _user_error(f'Variable "$input" got invalid value; {wrong[0]}')
        cloud = inp.get("cloudType", "ALL")
        if cloud not in CLOUD_TYPES:
            return None, _user_error(f'Value "{cloud}" does not exist in "CloudTypeEnum" enum.')
        gpu = next((g for g in self.gpu_types if g.id == inp.get("gpuTypeId")), None)
        if gpu is None:
            return None, _user_error(f"Invalid GPU type id {inp.get('gpuTypeId')!r}.")
        count = inp.get("gpuCount", 1)
        if not isinstance(count, int) or count < 1:
            return None, _user_error("gpuCount must be a positive integer.")
        if self.faults.take("quota"):
            return None, {"message": NO_BALANCE, "extensions": {"code": "INSUFFICIENT_BALANCE"}}
        secure_ok = gpu.securePrice is not None and gpu.secure_stock is not None
        community_ok = gpu.communityPrice is not None and gpu.community_stock is not None
        placed = {"SECURE": "SECURE" if secure_ok else None, "COMMUNITY": "COMMUNITY" if community_ok else None,
                  "ALL": "SECURE" if secure_ok else ("COMMUNITY" if community_ok else None)}[cloud]
        if self.faults.take("capacity") or placed is None or count > gpu.maxGpuCount:
            # RunPod answers this one with a message only (no extensions.code).
            return None, {"message": self.no_capacity_message}
        pod = _Pod(_pod_id(), str(inp.get("name") or ""), gpu, count, placed, dict(inp),
                   port_base=next(self._ports))
        self.pods[pod.id] = pod
        return self._as_json(pod), None

    def _stop(self, args: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
        pod = self.pods.get(self._pod_arg(args))
        if pod is None:
            return None, {"message": "pod not found to stop", "extensions": {"code": "INTERNAL_SERVER_ERROR"}}
        pod.desired, pod.started = "EXITED", False
        return self._as_json(pod), None

    def _resume(self, args: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
        pod = self.pods.get(self._pod_arg(args))
        if pod is None:
            return None, {"message": "pod not found to resume", "extensions": {"code": "INTERNAL_SERVER_ERROR"}}
        pod.desired = "RUNNING"
        return self._as_json(pod), None

    def _terminate(self, args: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
        pod_id = self._pod_arg(args)
        if self.pods.pop(pod_id, None) is None:
            return None, {"message": "pod not found to terminate", "extensions": {"code": "INTERNAL_SERVER_ERROR"}}
        return None, None  # podTerminate is scalar-valued: it answers null

    # -- pod shapes --------------------------------------------------------------------------------

    def _read(self, pod: _Pod) -> dict[str, Any]:
        shown = self._as_json(pod)
        pod.reads += 1
        if pod.desired == "RUNNING":
            pod.started = True  # the container is up once the pod has been seen booting once
        return shown

    def _as_json(self, pod: _Pod) -> dict[str, Any]:
        inp = pod.inputs
        price = pod.gpu.securePrice if pod.cloud == "SECURE" else pod.gpu.communityPrice
        runtime = None
        if pod.started and pod.desired == "RUNNING":
            runtime = {
                "uptimeInSeconds": 60 * pod.reads,
                "ports": [
                    {"ip": "203.0.113.10", "isIpPublic": True, "privatePort": private, "publicPort": pod.port_base + i,
                     "type": "tcp"}
                    for i, private in enumerate(_tcp_ports(str(inp.get("ports") or "")))
                ],
            }
        return {
            "id": pod.id,
            "name": pod.name,
            "imageName": inp.get("imageName", ""),
            "desiredStatus": pod.desired,
            "lastStatusChange": f"Rented by User: {pod.desired.lower()}",
            "costPerHr": round((price or 0.0) * pod.gpu_count, 4),
            "gpuCount": pod.gpu_count,
            "vcpuCount": pod.gpu.vcpus_per_gpu * pod.gpu_count,
            "memoryInGb": pod.gpu.memory_per_gpu * pod.gpu_count,
            "containerDiskInGb": inp.get("containerDiskInGb", 0),
            "volumeInGb": inp.get("volumeInGb", 0),
            "volumeMountPath": inp.get("volumeMountPath", "/workspace"),
            "dockerArgs": inp.get("dockerArgs", ""),
            "ports": inp.get("ports", ""),
            "podType": "RESERVED",
            "machineId": f"m-{pod.id[:8]}",
            "uptimeSeconds": 60 * pod.reads if runtime else 0,
            "runtime": runtime,
            "machine": {"podHostId": f"{pod.id}-64410f7a", "gpuDisplayName": pod.gpu.displayName,
                        "dataCenterId": "US-TX-3" if pod.cloud == "SECURE" else "US-CA-1"},
        }


def _tcp_ports(spec: str) -> list[int]:
    """"22/tcp,10022/tcp,8888/http" -> [22, 10022]: the TCP ports that get a public mapping."""
    out = []
    for part in spec.split(","):
        port, _, proto = part.strip().partition("/")
        if proto == "tcp" and port.isdigit():
            out.append(int(port))
    return out


def _resolve_tree(fields: list[Any], variables: dict[str, Any], declared: dict[str, str]) -> None:
    """Substitute ``$variables`` in every field's arguments, nested fields (``lowestPrice``) included."""
    for f in fields:
        f.args = resolve(f.args, variables, declared)
        _resolve_tree(f.selection, variables, declared)


def _user_error(message: str) -> dict[str, Any]:
    return {"message": message, "extensions": {"code": "BAD_USER_INPUT"}}


def start_runpod_fake(port: int = 0, **kwargs: Any) -> tuple[RunPodFake, FakeServer]:
    fake = RunPodFake(**kwargs)
    return fake, FakeServer(fake.handle, port).start()


if __name__ == "__main__":
    serve_forever_cli("runpod", lambda port: FakeServer(RunPodFake().handle, port))
