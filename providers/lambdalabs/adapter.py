"""Lambda Cloud adapter over httpx (providers.http), REST v1.

Lambda has no spot market; orch carries its ids in the instance name (``orch-<owner>-<launch_id>``),
parsed back with ``parse_instance_name``. Launch is idempotent by that name: an alive instance with it is
returned instead of launching another. Two client-side limiters (all calls; launches) make orch wait for
its turn instead of collecting 429s.
"""

from __future__ import annotations

import hashlib
import json as json_lib
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any, ClassVar

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
from providers.gpus import resolve_offer_gpu
from providers.http import ApiClient, HttpSettings, RateLimiter, SameBody
from providers.lambdalabs.settings import Settings

PROVIDER = "lambda"

STATES = {
    "booting": InstanceState.PENDING,
    "active": InstanceState.RUNNING,
    "unhealthy": InstanceState.UNREACHABLE,  # failing Lambda's health checks: still billed, may recover
    "terminating": InstanceState.STOPPING,
    "terminated": InstanceState.TERMINATED,
    "preempted": InstanceState.PREEMPTED,  # in the 1.8.3 InstanceStatus enum; Lambda sells no spot today
}

_AUTH_HINT = "set LAMBDA_API_KEY or api_key in ~/.lambda_cloud/lambda_keys (https://cloud.lambda.ai/api-keys)"


def translate_error(response: httpx.Response) -> ProviderError | None:
    """The one place Lambda failures become the taxonomy. Codes are the spec's ApiError* constants."""
    if response.status_code < 400:
        return None
    code, message, suggestion = "", response.text[:200], None
    try:
        err = response.json().get("error") or {}
        code = str(err.get("code") or "")
        message = str(err.get("message") or message)
        suggestion = err.get("suggestion")
    except (ValueError, AttributeError):
        pass
    status = response.status_code
    kw: dict[str, Any] = {"provider": PROVIDER, "code": code or f"HTTP {status}"}
    if code == "instance-operations/launch/insufficient-capacity":
        return InsufficientCapacityError(message, **kw, hint=suggestion)
    if code == "global/quota-exceeded":
        return QuotaExceededError(message, **kw, hint=suggestion)
    if code in ("global/invalid-api-key", "global/account-inactive", "global/invalid-address") or status in (401, 403):
        return AuthError(message, **kw, hint=suggestion or _AUTH_HINT)
    if status == 429:
        return RateLimitedError(message, **kw)
    if status >= 500 or code.startswith("provider/") or code == "global/internal-error":
        # "provider/..." codes are Lambda's upstream outages (spec info): transient by its own account.
        return ProviderUnavailableError(message, **kw)
    if code == "global/object-does-not-exist" or status == 404:
        return InstanceNotFoundError(message, **kw)
    return InvalidRequestError(message, **kw, hint=suggestion)


class LambdaProvider(Provider):
    name: ClassVar[str] = PROVIDER
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.LIVE_OFFERS})

    def __init__(self, settings: Settings, *, transport: httpx.BaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 catalog: tuple[Offer, ...] | None = None) -> None:
        self.settings = settings
        self._catalog = catalog
        self._launch_limiter = RateLimiter(settings.launch_interval_s, clock=clock, sleep=sleep)
        self._client = ApiClient(
            PROVIDER,
            HttpSettings(base_url=settings.base_url.rstrip("/"),
                         api_key=settings.api_key.get_secret_value() if settings.api_key else None,
                         timeout_s=settings.timeout_s, retry=settings.retry_policy()),
            translate_error,
            limiter=RateLimiter(settings.min_interval_s, clock=clock, sleep=sleep),
            transport=transport,
        )
        #: The last listing's machines, while Lambda answers the same bytes (a steady fleet's listing).
        self._listing = SameBody(_orch_instances)

    # -- calls -------------------------------------------------------------------------------------

    def _data(self, method: str, path: str, *, json: Any = None, limiter: RateLimiter | None = None) -> Any:
        body = self._client.request(method, path, json=json, limiter=limiter)
        if not isinstance(body, dict) or "data" not in body:
            raise ProviderUnavailableError(f"unexpected answer to {method} {path}", provider=PROVIDER)
        return body["data"]

    def check_credentials(self) -> None:
        if self.settings.api_key is None:
            raise AuthError("no Lambda API key", provider=PROVIDER, hint=_AUTH_HINT)
        self._data("GET", "/ssh-keys")

    # -- offers ------------------------------------------------------------------------------------

    def offers(self, req: GpuRequest) -> list[Offer]:
        """Live prices for every instance type; AVAILABLE in each region with capacity now.

        Regions the catalog lists for a type but Lambda has no capacity in come back NOT_AVAILABLE at the
        live price, so they replace (rather than sit beside) the catalog rows the planner merges these onto.
        """
        if req.providers and PROVIDER not in req.providers:
            return []
        types = self._data("GET", "/instance-types")
        catalog_regions = self._catalog_regions()
        today = datetime.now(UTC).date()
        found: list[Offer] = []
        for item in types.values():
            itype = item["instance_type"]
            live = [r["name"] for r in item.get("regions_with_capacity_available", [])]
            offer = _offer(itype, "", today)
            if offer is None:
                continue
            dark = sorted(set(catalog_regions.get(itype["name"], ())) - set(live))
            found += [_replace_region(offer, r, Availability.AVAILABLE) for r in live]
            found += [_replace_region(offer, r, Availability.NOT_AVAILABLE) for r in dark]
        return match_offers(found, req)

    def _catalog_regions(self) -> dict[str, set[str]]:
        offers = self._catalog
        if offers is None:
            from providers.catalog import load_catalog

            offers = load_catalog().offers
        regions: dict[str, set[str]] = {}
        for o in offers:
            if o.provider == PROVIDER:
                regions.setdefault(o.instance_type, set()).add(o.region)
        return regions

    # -- lifecycle ---------------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> Instance:
        if spec.offer.market is not Market.ON_DEMAND:
            raise InvalidRequestError("Lambda has no spot market", provider=PROVIDER)
        name = instance_name(spec.owner, spec.launch_id)
        existing = self._find_alive(name)
        if existing is not None:
            return existing
        body: dict[str, Any] = {
            "region_name": spec.offer.region,
            "instance_type_name": spec.offer.instance_type,
            "ssh_key_names": [self._ensure_ssh_key(spec.ssh_public_key)],
            "file_system_names": [],
            "name": name,
        }
        if spec.startup_script:
            body["user_data"] = spec.startup_script  # cloud-init runs a "#!" script as-is at first boot
        data = self._data("POST", "/instance-operations/launch", json=body, limiter=self._launch_limiter)
        ids = data.get("instance_ids") or []
        if not ids:
            raise ProviderUnavailableError("launch answered without an instance id", provider=PROVIDER)
        got = self.get(ids[0])
        if got is not None:
            return got
        return Instance(provider=PROVIDER, instance_id=ids[0], launch_id=spec.launch_id, owner=spec.owner,
                        state=InstanceState.PENDING, instance_type=spec.offer.instance_type,
                        region=spec.offer.region, raw_state="booting", ssh_user="ubuntu",
                        price_hr=spec.offer.price_hr)

    def _find_alive(self, name: str) -> Instance | None:
        for raw in self._data("GET", "/instances"):
            if raw.get("name") == name and raw.get("status") not in ("terminating", "terminated"):
                return _instance(raw)
        return None

    def _ensure_ssh_key(self, public_key: str) -> str:
        """The name of a registered key holding ``public_key`` (registering it once). Idempotent.

        The configured name is used when free or already holding this key; a different key under that
        name (rotated, another machine) gets a name suffixed with this key's fingerprint.
        """
        wanted = self.settings.ssh_key_name
        keys = self._registered_keys()
        if not public_key.strip():
            if wanted in keys:
                return wanted
            raise InvalidRequestError(f"no SSH key named {wanted!r} at Lambda and none given to register",
                                      provider=PROVIDER, hint="set ssh_key_name or give the launch a public key")
        if _same_key(keys.get(wanted, ""), public_key):
            return wanted
        if wanted in keys:
            wanted = f"{wanted}-{hashlib.sha256(_key_body(public_key).encode()).hexdigest()[:8]}"
            if _same_key(keys.get(wanted, ""), public_key):
                return wanted
        try:
            self._data("POST", "/ssh-keys", json={"name": wanted, "public_key": public_key.strip()})
        except InvalidRequestError:
            # Another daemon (or process) registered the name between our read and our add: fine when it holds
            # this very key (several daemons sharing one account all register it on their first launch).
            if not _same_key(self._registered_keys().get(wanted, ""), public_key):
                raise
        return wanted

    def _registered_keys(self) -> dict[str, str]:
        """The account's SSH keys: name -> public key."""
        return {k["name"]: k.get("public_key", "") for k in self._data("GET", "/ssh-keys")}

    def get(self, instance_id: str) -> Instance | None:
        try:
            return _instance(self._data("GET", f"/instances/{instance_id}"))
        except InstanceNotFoundError:
            return None

    def list_instances(self, owner: str) -> list[Instance]:
        listed = self._client.request("GET", "/instances", decode=self._listing)
        if listed is None:
            raise ProviderUnavailableError("unexpected answer to GET /instances", provider=PROVIDER)
        return [inst for inst in listed if inst.owner == owner]

    def terminate(self, instance_id: str) -> None:
        try:
            self._data("POST", "/instance-operations/terminate", json={"instance_ids": [instance_id]})
        except InstanceNotFoundError:
            return

    def close(self) -> None:
        self._client.close()


# -- translation of values ----------------------------------------------------------------------------

def _key_body(public_key: str) -> str:
    """"ssh-ed25519 AAAA... comment" -> "ssh-ed25519 AAAA...": the comment does not make another key."""
    return " ".join(public_key.split()[:2])


def _same_key(a: str, b: str) -> bool:
    return bool(a.strip()) and _key_body(a) == _key_body(b)


GIB_IN_GB = 1.073741824


def _offer(itype: dict[str, Any], region: str, today: date) -> Offer | None:
    """An Offer for a Lambda instance type, or None for a type orch's GPU registry does not know."""
    specs = itype["specs"]
    gpus = int(specs.get("gpus") or 0)
    if gpus < 1:
        return None
    model = resolve_offer_gpu(itype.get("description") or itype["gpu_description"], provider=PROVIDER)
    if model is None:
        return None
    sxm = "sxm" in str(itype.get("gpu_description", "")).lower()
    storage = specs.get("storage_gib")    # the type's fixed local disk (spec: InstanceTypeSpecs.storage_gib)
    return Offer(
        provider=PROVIDER, instance_type=itype["name"], region=region, zone=None, gpu=model.name,
        gpu_count=gpus, vram_gb=float(model.vram_gb), vcpus=float(specs["vcpus"]),
        memory_gb=float(specs["memory_gib"]),
        interconnect=Interconnect.NVLINK if sxm and gpus > 1 else Interconnect.PCIE,
        market=Market.ON_DEMAND, price_hr=itype["price_cents_per_hour"] / 100, price_as_of=today,
        source="live", max_disk_gb=round(float(storage) * GIB_IN_GB, 1) if storage else None,
    )


def _replace_region(offer: Offer, region: str, availability: Availability) -> Offer:
    from dataclasses import replace

    return replace(offer, region=region, availability=availability)


def _orch_instances(body: bytes) -> tuple[Instance, ...] | None:
    """The machines of a GET /instances answer named by orch (any owner's), or None when it is not the
    ``{"data": [...]}`` envelope. A ValueError: not JSON."""
    doc = json_lib.loads(body)
    if not isinstance(doc, dict) or "data" not in doc:
        return None
    # The name parsed once per machine (a daemon's first listing decodes every machine: ~10% of it twice).
    return tuple(_named(raw, ids) for raw in doc["data"] if (ids := parse_instance_name(raw.get("name"))))


def _instance(raw: dict[str, Any]) -> Instance:
    return _named(raw, parse_instance_name(raw.get("name")))


def _named(raw: dict[str, Any], ids: tuple[str, str] | None) -> Instance:
    """The machine ``raw`` whose name parsed to ``ids`` (owner, launch id; None: not orch's name)."""
    status = str(raw.get("status", ""))
    itype = raw.get("instance_type") or {}
    price = itype.get("price_cents_per_hour")
    return Instance(
        provider=PROVIDER,
        instance_id=raw["id"],
        launch_id=ids[1] if ids else None,
        owner=ids[0] if ids else None,
        state=STATES.get(status, InstanceState.PENDING),
        instance_type=itype.get("name", ""),
        region=(raw.get("region") or {}).get("name", ""),
        raw_state=status,
        raw_reason=status if status in ("unhealthy", "preempted") else None,
        public_ip=raw.get("ip") or None,
        private_ip=raw.get("private_ip") or None,
        ssh_user="ubuntu",
        price_hr=price / 100 if isinstance(price, int | float) else None,
        extra=(("hostname", str(raw["hostname"])),) if raw.get("hostname") else (),
    )
