"""Lambda Cloud adapter over httpx (providers.http), REST v1.

Lambda has no spot market; orch carries its ids in the instance name (``orch-<owner>-<launch_id>``),
parsed back with ``parse_instance_name``. Launch is idempotent by that name: an alive instance with it is
returned instead of launching another. Two client-side limiters (all calls; launches) make orch wait for
its turn instead of collecting 429s.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar

import httpx

from providers.base import (
    Availability,
    Capability,
    GpuRequest,
    Instance,
    InstanceState,
    LaunchSpec,
    Market,
    Offer,
    Provider,
    instance_name,
)
from providers.catalog.query import match_offers
from providers.errors import AuthError, InstanceNotFoundError, InvalidRequestError, ProviderUnavailableError
from providers.http import ApiClient, HttpSettings, RateLimiter, SameBody
from providers.lambdalabs.errors import AUTH_HINT, PROVIDER, translate_error
from providers.lambdalabs.instances import orch_instances, to_instance
from providers.lambdalabs.offers import in_region, to_offer
from providers.lambdalabs.settings import SSH_KEY_NAME_MAX, Settings


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
            transport=transport, key_hint=AUTH_HINT,
        )
        #: The last listing's machines, while Lambda answers the same bytes (a steady fleet's listing).
        self._listing = SameBody(orch_instances)

    # -- calls -------------------------------------------------------------------------------------

    def _data(self, method: str, path: str, *, json: Any = None, limiter: RateLimiter | None = None) -> Any:
        body = self._client.request(method, path, json=json, limiter=limiter)
        if not isinstance(body, dict) or "data" not in body:
            raise ProviderUnavailableError(f"unexpected answer to {method} {path}", provider=PROVIDER)
        return body["data"]

    def check_credentials(self) -> None:
        if self.settings.api_key is None:
            raise AuthError("no Lambda API key", provider=PROVIDER, hint=AUTH_HINT)
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
            offer = to_offer(itype, "", today)
            if offer is None:
                continue
            dark = sorted(set(catalog_regions.get(itype["name"], ())) - set(live))
            found += [in_region(offer, r, Availability.AVAILABLE) for r in live]
            found += [in_region(offer, r, Availability.NOT_AVAILABLE) for r in dark]
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
                return to_instance(raw)
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
            # The suffix replaces the name's tail where needed: Lambda takes at most SSH_KEY_NAME_MAX characters.
            suffix = f"-{hashlib.sha256(_key_body(public_key).encode()).hexdigest()[:8]}"
            wanted = wanted[: SSH_KEY_NAME_MAX - len(suffix)] + suffix
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
            return to_instance(self._data("GET", f"/instances/{instance_id}"))
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


# -- ssh keys ----------------------------------------------------------------------------------------

def _key_body(public_key: str) -> str:
    """"ssh-ed25519 AAAA... comment" -> "ssh-ed25519 AAAA...": the comment does not make another key."""
    return " ".join(public_key.split()[:2])


def _same_key(a: str, b: str) -> bool:
    return bool(a.strip()) and _key_body(a) == _key_body(b)
