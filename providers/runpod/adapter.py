"""RunPod adapter over httpx (providers.http), GraphQL at api.runpod.io/graphql.

On-demand pods only: RunPod retired interruptible (spot) pods in September 2026. RunPod has no tags, so
orch's ids ride in the pod name (``orch-<owner>-<launch_id>``); launch is idempotent by that name.
The pod IS the job's container (the manifest's ``image``, else the configured one): the boot script travels
base64-encoded in the ``ORCH_BOOT_B64`` env var (providers/boot_env.py) and ``dockerArgs`` runs it with sh and
python3 in the background before handing over to the image's own ``/start.sh`` (sshd, etc.) where it has one.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx

from providers.base import (
    Availability,
    Capability,
    GpuRequest,
    Instance,
    InstanceState,
    Interconnect,
    LaunchSpec,
    Market,
    Offer,
    Provider,
    instance_name,
    parse_instance_name,
)
from providers.boot_env import BOOT_ENV, boot_env_value, run_boot_from_env
from providers.catalog.query import match_offers
from providers.errors import (
    AuthError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    InvalidRequestError,
    ProviderError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
)
from providers.gpus import GpuModel, UnknownGpuError, resolve_gpu, resolve_offer_gpu
from providers.http import ApiClient, HttpSettings, RateLimiter
from providers.runpod.settings import CloudType, Settings

PROVIDER = "runpod"
SSH_PRIVATE_PORTS = (22, 10022)
_AUTH_HINT = "set RUNPOD_API_KEY or run `runpod config` (https://www.runpod.io/console/user/settings)"

POD_FIELDS = """
    id name desiredStatus lastStatusChange costPerHr gpuCount imageName machineId
    runtime { ports { ip isIpPublic privatePort publicPort type } }
    machine { podHostId gpuDisplayName }
"""
GPU_TYPES = """
query GpuTypes($lowestPriceInput: GpuLowestPriceInput) {
  gpuTypes {
    id displayName memoryInGb secureCloud communityCloud securePrice communityPrice
    maxGpuCount maxGpuCountSecureCloud maxGpuCountCommunityCloud
    lowestPrice(input: $lowestPriceInput) {
      minimumBidPrice uninterruptablePrice minVcpu minMemory stockStatus countryCode
    }
  }
}"""
GPU_TYPE_IDS = "query GpuTypeIds { gpuTypes { id displayName memoryInGb } }"
MY_PODS = f"query MyPods {{ myself {{ pods {{ {POD_FIELDS} }} }} }}"
GET_POD = f"query Pod($input: PodFilter!) {{ pod(input: $input) {{ {POD_FIELDS} }} }}"
DEPLOY = (f"mutation Deploy($input: PodFindAndDeployOnDemandInput!) "
          f"{{ podFindAndDeployOnDemand(input: $input) {{ {POD_FIELDS} }} }}")
STOP = "mutation StopPod($input: PodStopInput!) { podStop(input: $input) { id desiredStatus } }"
TERMINATE = "mutation TerminatePod($input: PodTerminateInput!) { podTerminate(input: $input) }"

# The no-capacity answers of podFindAndDeployOnDemand: a message and no error code. RunPod's current wording
# ("There are no longer any instances available with the requested specifications. Please refresh and try
# again.") and the older one ("There are no instances available with the request specifications...") are both
# still seen, so both are recognised.
NO_CAPACITY_PREFIXES = ("there are no longer any instances available", "there are no instances available")


def translate_error(response: httpx.Response) -> ProviderError | None:
    """The one place RunPod failures become the taxonomy.

    GraphQL errors arrive with HTTP 200 as ``{"errors": [{"message", "extensions": {"code"}}]}``. The
    no-capacity refusal has only a message ("There are no longer any instances available with the requested
    specifications...", formerly "There are no instances available with the request specifications..."),
    no code, so it is recognised by that documented message here and only here;
    likewise "pod not found ..." and balance refusals, for which RunPod publishes no codes either.
    """
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    errors = body.get("errors") if isinstance(body, dict) else None
    first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
    message = str(first.get("message") or response.text[:200] or f"HTTP {status}")
    code = str((first.get("extensions") or {}).get("code") or "") or None
    kw: dict[str, Any] = {"provider": PROVIDER, "code": code}
    lowered = message.lower()
    if status in (401, 403) or code in ("UNAUTHENTICATED", "FORBIDDEN"):
        return AuthError(message, **kw, hint=_AUTH_HINT)
    if status == 429:
        return RateLimitedError(message, **kw)
    if status >= 500:
        return ProviderUnavailableError(message, **kw)
    if status >= 400:
        return InvalidRequestError(message, **kw)
    if not first:
        return None
    if lowered.startswith(NO_CAPACITY_PREFIXES):
        return InsufficientCapacityError(message, **kw)
    if any(word in lowered for word in ("balance", "enough funds", "quota", "spend limit")):
        return QuotaExceededError(message, **kw, hint="add funds or raise the spend limit in the RunPod console")
    if "pod not found" in lowered:
        return InstanceNotFoundError(message, **kw)
    if code in ("GRAPHQL_VALIDATION_FAILED", "GRAPHQL_PARSE_FAILED", "BAD_USER_INPUT", "BAD_REQUEST"):
        return InvalidRequestError(message, **kw)
    if code == "INTERNAL_SERVER_ERROR":
        return ProviderUnavailableError(message, **kw)
    return InvalidRequestError(message, **kw)


class RunPodProvider(Provider):
    name: ClassVar[str] = PROVIDER
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.LIVE_OFFERS, Capability.STOP})

    def __init__(self, settings: Settings, *, transport: httpx.BaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        url = urlsplit(settings.graphql_url)
        self._path = url.path or "/graphql"
        limiter = RateLimiter(settings.min_interval_s, clock=clock, sleep=sleep) if settings.min_interval_s else None
        self._client = ApiClient(
            PROVIDER,
            HttpSettings(base_url=f"{url.scheme}://{url.netloc}",
                         api_key=settings.api_key.get_secret_value() if settings.api_key else None,
                         timeout_s=settings.timeout_s, retry=settings.retry_policy()),
            translate_error, limiter=limiter, transport=transport,
        )

    def _gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = self._client.request("POST", self._path, json={"query": query, "variables": variables or {}})
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict):
            raise ProviderUnavailableError("GraphQL answer without data", provider=PROVIDER)
        return data

    def check_credentials(self) -> None:
        if self.settings.api_key is None:
            raise AuthError("no RunPod API key", provider=PROVIDER, hint=_AUTH_HINT)
        self._gql("query Me { myself { id } }")

    # -- offers ------------------------------------------------------------------------------------

    def _clouds(self) -> tuple[str, ...]:
        if self.settings.cloud_type is CloudType.ALL:
            return (CloudType.SECURE.value, CloudType.COMMUNITY.value)
        return (self.settings.cloud_type.value,)

    def offers(self, req: GpuRequest) -> list[Offer]:
        """Live on-demand offers for ``req.count`` GPUs: price = count x secure|community price per GPU.

        Types whose lowestPrice has no stockStatus have no capacity now and are left out; types orch's
        GPU registry does not know are skipped.
        """
        if Market.ON_DEMAND not in req.markets or (req.providers and PROVIDER not in req.providers):
            return []
        today = datetime.now(UTC).date()
        found: list[Offer] = []
        for cloud in self._clouds():
            secure = cloud == CloudType.SECURE.value
            data = self._gql(GPU_TYPES, {"lowestPriceInput": {"gpuCount": req.count, "secureCloud": secure}})
            for g in data.get("gpuTypes") or []:
                offer = _offer(g, req.count, cloud, today)
                if offer is not None:
                    found.append(offer)
        return match_offers(found, req)

    # -- lifecycle ---------------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> Instance:
        if spec.offer.market is not Market.ON_DEMAND:
            raise InvalidRequestError("RunPod rents on-demand pods only (spot pods were retired in Sept 2026)",
                                      provider=PROVIDER)
        name = instance_name(spec.owner, spec.launch_id)
        for pod in self._pods():
            if pod.get("name") == name and pod.get("desiredStatus") != "TERMINATED":
                return _instance(pod)
        data = self._gql(DEPLOY, {"input": self._deploy_input(spec, name)})
        pod = data.get("podFindAndDeployOnDemand")
        if not isinstance(pod, dict):
            raise ProviderUnavailableError("deploy answered without a pod", provider=PROVIDER)
        return _instance(pod)

    def _deploy_input(self, spec: LaunchSpec, name: str) -> dict[str, Any]:
        offer = spec.offer
        cloud = offer.instance_type.rsplit("_", 1)[-1]
        if cloud not in (CloudType.SECURE.value, CloudType.COMMUNITY.value):
            cloud = self.settings.cloud_type.value
        env = {"ORCH_LAUNCH_ID": spec.launch_id, "ORCH_OWNER": spec.owner, "ORCH_JOB": spec.job}
        if spec.ssh_public_key:
            env["PUBLIC_KEY"] = spec.ssh_public_key.strip()  # RunPod images add it to authorized_keys
        inp: dict[str, Any] = {
            "name": name,
            "imageName": spec.image or self.settings.image,
            "gpuTypeId": offer.offer_id or self._gpu_type_id(offer.gpu),
            "cloudType": cloud,
            "gpuCount": offer.gpu_count,
            "containerDiskInGb": self.settings.container_disk_gb,
            "volumeInGb": self.settings.volume_gb if self.settings.volume_gb is not None else spec.disk_gb,
            "volumeMountPath": self.settings.volume_mount_path,
            "ports": self.settings.ports,
            "startSsh": True,
            "supportPublicIp": True,
        }
        if len(offer.region) == 2 and offer.region.isupper():
            inp["countryCode"] = offer.region
        if offer.zone:
            inp["dataCenterId"] = offer.zone
        if spec.startup_script:
            env[BOOT_ENV] = boot_env_value(spec.startup_script)
            inp["dockerArgs"] = _STARTUP_ARGS
        inp["env"] = [{"key": k, "value": v} for k, v in env.items()]
        return inp

    def _gpu_type_id(self, gpu: str) -> str:
        """RunPod's id for a canonical GPU (for catalog offers, which carry no RunPod handle)."""
        for g in self._gql(GPU_TYPE_IDS).get("gpuTypes") or []:
            model = _model(g)
            if model is not None and model.name == gpu:
                return str(g["id"])
        raise InvalidRequestError(f"RunPod has no GPU type for {gpu}", provider=PROVIDER)

    def _pods(self) -> list[dict[str, Any]]:
        return list(((self._gql(MY_PODS).get("myself") or {}).get("pods")) or [])

    def get(self, instance_id: str) -> Instance | None:
        try:
            pod = self._gql(GET_POD, {"input": {"podId": instance_id}}).get("pod")
        except InstanceNotFoundError:
            return None
        return _instance(pod) if isinstance(pod, dict) else None

    def list_instances(self, owner: str) -> list[Instance]:
        found = []
        for pod in self._pods():
            ids = parse_instance_name(pod.get("name"))
            if ids is not None and ids[0] == owner:
                found.append(_instance(pod))
        return found

    def terminate(self, instance_id: str) -> None:
        try:
            self._gql(TERMINATE, {"input": {"podId": instance_id}})
        except InstanceNotFoundError:
            return

    def stop(self, instance_id: str) -> None:
        """podStop: the pod goes EXITED; its volume (and bill for it) stays."""
        self._gql(STOP, {"input": {"podId": instance_id}})

    def close(self) -> None:
        self._client.close()


# Runs the boot script in the background (sh and python3 only: the pod's image may have no bash), then becomes
# the image's own entrypoint (RunPod images' /start.sh: sshd, jupyter...), or waits where the image has none.
_STARTUP_ARGS = "sh -c " + shlex.quote(
    f"({run_boot_from_env('/tmp/orch-boot.sh', '/tmp/orch-boot.log')} &); "
    "if [ -x /start.sh ]; then exec /start.sh; else exec sleep infinity; fi"
)


def _model(g: dict[str, Any]) -> GpuModel | None:
    vram = g.get("memoryInGb")
    for spelling in (g.get("id"), g.get("displayName")):
        if not spelling:
            continue
        try:
            return resolve_gpu(str(spelling), float(vram) if vram else None)
        except UnknownGpuError:
            continue
    # Neither spelling is known: logged (once per name), never silently dropped.
    return resolve_offer_gpu(str(g.get("id") or g.get("displayName") or ""), provider=PROVIDER)


def _offer(g: dict[str, Any], count: int, cloud: str, today: Any) -> Offer | None:
    secure = cloud == CloudType.SECURE.value
    lowest = g.get("lowestPrice") or {}
    per_gpu = g.get("securePrice" if secure else "communityPrice")
    available = g.get("secureCloud" if secure else "communityCloud")
    max_count = g.get("maxGpuCountSecureCloud" if secure else "maxGpuCountCommunityCloud") or g.get("maxGpuCount")
    if not lowest.get("stockStatus") or not per_gpu or not available:
        return None
    if isinstance(max_count, int) and count > max_count:
        return None
    model = _model(g)
    if model is None:
        return None
    return Offer(
        provider=PROVIDER, instance_type=f"{count}x_{g['id']}_{cloud}", region=str(lowest.get("countryCode") or "any"),
        zone=None, gpu=model.name, gpu_count=count, vram_gb=float(g.get("memoryInGb") or model.vram_gb),
        vcpus=float(lowest.get("minVcpu") or 0), memory_gb=float(lowest.get("minMemory") or 0),
        interconnect=model.default_interconnect if count > 1 else Interconnect.PCIE,
        market=Market.ON_DEMAND, price_hr=round(count * float(per_gpu), 4), price_as_of=today, source="live",
        availability=Availability.AVAILABLE, offer_id=str(g["id"]),
    )


def _state(pod: dict[str, Any]) -> InstanceState:
    desired = pod.get("desiredStatus")
    if desired == "RUNNING":
        return InstanceState.RUNNING if pod.get("runtime") else InstanceState.PENDING
    if desired in ("EXITED", "PAUSED"):
        return InstanceState.STOPPED
    if desired == "TERMINATED":
        return InstanceState.TERMINATED
    return InstanceState.PENDING  # CREATED, RESTARTING (older values)


def _ssh(pod: dict[str, Any]) -> tuple[str | None, int]:
    ports = ((pod.get("runtime") or {}).get("ports")) or []
    for private in SSH_PRIVATE_PORTS:
        for p in ports:
            if p.get("privatePort") == private and p.get("isIpPublic") and p.get("type") == "tcp":
                return p.get("ip"), int(p.get("publicPort") or 22)
    return None, 22


def _instance(pod: dict[str, Any]) -> Instance:
    ids = parse_instance_name(pod.get("name"))
    ip, port = _ssh(pod)
    gpu_name = (pod.get("machine") or {}).get("gpuDisplayName") or ""
    count = pod.get("gpuCount") or 0
    cost = pod.get("costPerHr")
    return Instance(
        provider=PROVIDER,
        instance_id=str(pod["id"]),
        launch_id=ids[1] if ids else None,
        owner=ids[0] if ids else None,
        state=_state(pod),
        instance_type=f"{count}x {gpu_name}".strip() if gpu_name else "",
        region="",
        raw_state=str(pod.get("desiredStatus") or ""),
        raw_reason=pod.get("lastStatusChange"),
        public_ip=ip,
        ssh_port=port,
        ssh_user="root",
        price_hr=_cost_per_hr(cost),
        extra=(("machine_id", str(pod["machineId"])),) if pod.get("machineId") else (),
    )


def _cost_per_hr(value: Any) -> float | None:
    """The pod's ``costPerHr`` as $/h: a number, or a number in a string (RunPod's REST spec shows "0.74");
    anything else (absent, negative, not a number) is no price."""
    try:
        cost = float(value)
    except (TypeError, ValueError):
        return None
    return cost if 0 <= cost < float("inf") else None
