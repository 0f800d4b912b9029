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
    Capability,
    GpuRequest,
    Instance,
    LaunchSpec,
    Market,
    Offer,
    Provider,
    instance_name,
    parse_instance_name,
)
from providers.boot_env import BOOT_ENV, boot_env_value, run_boot_from_env
from providers.catalog.query import match_offers
from providers.errors import AuthError, InstanceNotFoundError, InvalidRequestError, ProviderUnavailableError
from providers.http import ApiClient, HttpSettings, RateLimiter
from providers.runpod.errors import AUTH_HINT, PROVIDER, translate_error
from providers.runpod.instances import to_instance
from providers.runpod.offers import gpu_model, to_offer
from providers.runpod.queries import DEPLOY, GET_POD, GPU_TYPE_IDS, GPU_TYPES, MY_PODS, STOP, TERMINATE
from providers.runpod.settings import CloudType, Settings


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
            translate_error, limiter=limiter, transport=transport, key_hint=AUTH_HINT,
        )

    def _gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = self._client.request("POST", self._path, json={"query": query, "variables": variables or {}})
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict):
            raise ProviderUnavailableError("GraphQL answer without data", provider=PROVIDER)
        return data

    def check_credentials(self) -> None:
        if self.settings.api_key is None:
            raise AuthError("no RunPod API key", provider=PROVIDER, hint=AUTH_HINT)
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
                offer = to_offer(g, req.count, cloud, today)
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
                return to_instance(pod)
        data = self._gql(DEPLOY, {"input": self._deploy_input(spec, name)})
        pod = data.get("podFindAndDeployOnDemand")
        if not isinstance(pod, dict):
            raise ProviderUnavailableError("deploy answered without a pod", provider=PROVIDER)
        return to_instance(pod)

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
            "volumeInGb": spec.disk_size(self.settings.volume_gb),
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
            model = gpu_model(g)
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
        return to_instance(pod) if isinstance(pod, dict) else None

    def list_instances(self, owner: str) -> list[Instance]:
        found = []
        for pod in self._pods():
            ids = parse_instance_name(pod.get("name"))
            if ids is not None and ids[0] == owner:
                found.append(to_instance(pod))
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
