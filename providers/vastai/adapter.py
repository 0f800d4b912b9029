"""The Vast.ai adapter: REST v0/v1 over httpx through providers.http (ApiClient + RateLimiter + translator).

Vast has no tags, so orch's ids ride in the instance ``label`` (``instance_name(owner, launch_id)``), and
every lookup that heals a crash (idempotent launch, orphan listing) goes by label.

Markets: on-demand, and interruptible (a bid: ``price`` on create). An outbid interruptible is not
destroyed but STOPPED by Vast, and keeps billing its disk: orch reads it as PREEMPTED (raw_reason
"outbid") and terminates it. A create with a bid under the ask's minimum may answer ``success: false``
and still leave a stopped instance under the label: launch destroys such leftovers before raising.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import date
from typing import Any, ClassVar

import httpx

from providers.base import (
    Capability,
    GpuRequest,
    Instance,
    InstanceState,
    LaunchSpec,
    Market,
    Offer,
    Provider,
    parse_instance_name,
)
from providers.catalog.query import offer_matches
from providers.errors import (
    AuthError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    ProviderError,
    ProviderUnavailableError,
)
from providers.http import ApiClient, HttpSettings, RateLimiter
from providers.retry import RetryPolicy, call_with_retry
from providers.vastai.create import create_body, no_dearer_than_quoted
from providers.vastai.errors import AUTH_HINT, PROVIDER, translate_error
from providers.vastai.instances import parse_instance, vast_instance_type
from providers.vastai.offers import search_body, to_offer
from providers.vastai.settings import Settings

#: Vast's page size limit for GET /api/v1/instances/.
PAGE_LIMIT = 25


class VastProvider(Provider):
    """Vast.ai through its REST API. See the module docstring for the label and outbid conventions."""

    name: ClassVar[str] = PROVIDER
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.SPOT, Capability.STOP,
                                                               Capability.LIVE_OFFERS})

    def __init__(self, settings: Settings, *, transport: httpx.BaseTransport | None = None,
                 today: Any = date.today) -> None:
        self.settings = settings
        self._today = today
        key = settings.api_key.get_secret_value() if settings.api_key else None
        self._policy = settings.retry_policy()
        http = HttpSettings(base_url=settings.base_url.rstrip("/"), api_key=key, timeout_s=settings.timeout_s,
                            retry=self._policy)
        limiter = RateLimiter(settings.min_interval_s)
        self._api = ApiClient(PROVIDER, http, translate_error, limiter=limiter, transport=transport, key_hint=AUTH_HINT)
        # Creating is not idempotent on Vast's side: that client never retries; launch() retries around a
        # label lookup instead, so a create that did land is found rather than repeated.
        once = HttpSettings(base_url=http.base_url, api_key=key, timeout_s=settings.timeout_s,
                            retry=RetryPolicy(attempts=1, initial_wait_s=0.0, max_wait_s=0.0,
                                              deadline_s=settings.retry_deadline_s))
        self._create_api = ApiClient(PROVIDER, once, translate_error, limiter=limiter, transport=transport,
                                     key_hint=AUTH_HINT)
        self._v1 = self._api.settings.base_url.removesuffix("/api/v0") + "/api/v1"

    # ---- credentials -----------------------------------------------------------------------------------
    def check_credentials(self) -> None:
        if self.settings.api_key is None:
            raise AuthError("no Vast.ai API key found", provider=PROVIDER, hint=AUTH_HINT)
        self._api.request("GET", f"{self._v1}/instances/", params={"limit": 1})

    # ---- offers ------------------------------------------------------------------------------------------
    def offers(self, req: GpuRequest) -> list[Offer]:
        if req.providers and PROVIDER not in req.providers and "vast" not in req.providers:
            return []
        found: list[Offer] = []
        # Priced with the disk the launch will rent (Vast bills it by the hour): the request's, else the default.
        disk = req.disk_gb if req.disk_gb is not None else self.settings.disk_gb
        for market in sorted(req.markets):
            for raw in self._search(search_body(self.settings, req, market, disk)):
                offer = to_offer(raw, market, disk, self._today, bid_markup=self.settings.bid_markup)
                if offer is not None and offer_matches(offer, _ignore_provider(req)):
                    found.append(offer)
        found.sort(key=lambda o: (o.price_hr, o.market, o.offer_id or ""))
        return found

    def _search(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        answer = self._api.request("POST", "/bundles/", json=body)
        offers = answer.get("offers") if isinstance(answer, dict) else None
        return [o for o in offers or [] if isinstance(o, dict)]

    # ---- launch --------------------------------------------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> Instance:
        def attempt() -> Instance:
            existing = self._by_label(spec.name)
            if existing:
                return parse_instance(existing[0])
            return self._create(spec)

        return call_with_retry(attempt, self._policy)

    def _live_ask(self, spec: LaunchSpec) -> dict[str, Any]:
        """The ask to rent, fresh from the API (its min_bid moves): the spec's, or the cheapest live match."""
        market = spec.offer.market
        disk = spec.disk_size(self.settings.disk_gb)
        kind = "bid" if market is Market.SPOT else "on-demand"
        if spec.offer.offer_id and spec.offer.offer_id.isdigit():
            asks = self._search({"id": {"eq": int(spec.offer.offer_id)}, "rentable": {"eq": True},
                                 "rented": {"eq": False}, "type": kind, "allocated_storage": disk,
                                 "disk_space": {"gte": disk}, "limit": 1})
            if not asks:
                raise InsufficientCapacityError(f"ask {spec.offer.offer_id} is no longer available",
                                                provider=PROVIDER, code="no_such_ask")
            return asks[0]
        # A catalog offer: find the cheapest live ask for the same GPU, count and market, with room for the disk
        # (an ask's disk_space is all the machine has).
        req = GpuRequest(gpus=(spec.offer.gpu,), count=spec.offer.gpu_count, markets=frozenset({market}),
                         disk_gb=disk)
        live = [o for o in self.offers(req) if o.max_disk_gb is None or o.max_disk_gb >= disk]
        if not live:
            raise InsufficientCapacityError(f"no live Vast offer for {spec.offer.gpu_count}x {spec.offer.gpu}",
                                            provider=PROVIDER)
        return self._live_ask(_with_offer(spec, live[0]))

    def _create(self, spec: LaunchSpec) -> Instance:
        ask = self._live_ask(spec)
        if not spec.offer.offer_id:
            no_dearer_than_quoted(ask, spec, self.settings)    # a catalog offer's match, never dearer than quoted
        body = create_body(self.settings, spec, ask)     # refuses (typed) what must not be rented: before any create
        try:
            answer = self._create_api.request("PUT", f"/asks/{int(ask['id'])}/", json=body)
        except ProviderError as exc:
            if not exc.retryable:
                # A refused create (a bid too low above all) can leave a stopped, disk-billing instance.
                self._destroy_leftovers(spec.name)
            raise
        new_id = answer.get("new_contract") if isinstance(answer, dict) else None
        if not new_id:
            self._destroy_leftovers(spec.name)
            raise ProviderUnavailableError(f"create answered without an instance id: {answer!r}"[:300],
                                           provider=PROVIDER)
        got = self.get(str(new_id))
        if got is not None:
            return self._checked_rental(got, spec)
        # Not visible yet (eventual consistency): what we know is enough for the caller's row.
        ids = parse_instance_name(spec.name)
        return Instance(provider=PROVIDER, instance_id=str(new_id), launch_id=spec.launch_id, owner=spec.owner,
                        state=InstanceState.PENDING, instance_type=vast_instance_type(ask),
                        region=str(ask.get("geolocation") or "unknown"), market=spec.offer.market,
                        job=spec.job, raw_state="created", raw_reason=None if ids else "unlabelled")

    def _checked_rental(self, got: Instance, spec: LaunchSpec) -> Instance:
        """The rental Vast made, checked against the market asked for (``is_bid``): the create answer does not
        say which, and a spot create whose bid Vast did not take rents on-demand at the full price. A wrong
        one is destroyed at once and the launch fails typed (this ask cannot give that market: move on)."""
        if got.market is spec.offer.market:
            return got
        self.terminate(got.instance_id)
        raise InsufficientCapacityError(
            f"Vast rented instance {got.instance_id} as {got.market.value}, not {spec.offer.market.value}: "
            "destroyed at once", provider=PROVIDER, code="wrong_rental_type")

    def _destroy_leftovers(self, label: str) -> list[str]:
        """Destroy whatever a refused create left under ``label``; never mask the refusal's own error."""
        destroyed = []
        try:
            for raw in self._by_label(label):
                self.terminate(str(raw["id"]))
                destroyed.append(str(raw["id"]))
        except ProviderError:
            pass    # list_instances / orphan GC finds it later by the same label
        return destroyed

    def destroy_stopped_after_failed_bid(self, owner: str) -> list[str]:
        """Destroy this owner's interruptibles Vast left stopped (outbid, or a refused bid): they bill disk.

        Returns the destroyed instance ids. The daemon may equally terminate() PREEMPTED instances itself.
        """
        destroyed = []
        for inst in self.list_instances(owner):
            if inst.market is Market.SPOT and inst.state is InstanceState.PREEMPTED:
                self.terminate(inst.instance_id)
                destroyed.append(inst.instance_id)
        return destroyed

    # ---- reading -------------------------------------------------------------------------------------------
    def get(self, instance_id: str) -> Instance | None:
        if not str(instance_id).isdigit():
            return None     # Vast ids are integers: anything else names nothing there
        try:
            answer = self._api.request("GET", f"/instances/{int(instance_id)}/", params={"owner": "me"})
        except InstanceNotFoundError:
            return None
        raw = answer.get("instances") if isinstance(answer, dict) else None
        return parse_instance(raw) if isinstance(raw, dict) else None

    def _pages(self, filters: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        params: dict[str, Any] = {"limit": PAGE_LIMIT}
        if filters:
            params["select_filters"] = json.dumps(filters)
        while True:
            answer = self._api.request("GET", f"{self._v1}/instances/", params=params)
            yield from (i for i in (answer or {}).get("instances") or [] if isinstance(i, dict))
            token = (answer or {}).get("next_token")
            if not token:
                return
            params = {**params, "after_token": token}

    def _by_label(self, label: str) -> list[dict[str, Any]]:
        return [raw for raw in self._pages({"label": {"eq": label}}) if raw.get("label") == label]

    def list_instances(self, owner: str) -> list[Instance]:
        found = []
        for raw in self._pages():
            ids = parse_instance_name(raw.get("label"))
            if ids is not None and ids[0] == owner:
                found.append(parse_instance(raw))
        return found

    # ---- changing ------------------------------------------------------------------------------------------
    def terminate(self, instance_id: str) -> None:
        if not str(instance_id).isdigit():
            return
        try:
            self._api.request("DELETE", f"/instances/{int(instance_id)}/")
        except InstanceNotFoundError:
            return

    def stop(self, instance_id: str) -> None:
        self._api.request("PUT", f"/instances/{int(instance_id)}/", json={"state": "stopped"})

    def change_bid(self, instance_id: str, price_hr: float) -> None:
        """Raise (or lower) an interruptible's bid; an outbid instance resumes when its bid wins again."""
        self._api.request("PUT", f"/instances/bid_price/{int(instance_id)}/",
                          json={"client_id": "me", "price": round(price_hr, 4)})

    def close(self) -> None:
        self._api.close()
        self._create_api.close()


def _ignore_provider(req: GpuRequest) -> GpuRequest:
    return replace(req, providers=())


def _with_offer(spec: LaunchSpec, offer: Offer) -> LaunchSpec:
    return replace(spec, offer=offer)

