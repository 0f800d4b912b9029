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
import shlex
from collections.abc import Iterable, Iterator
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
    parse_instance_name,
)
from providers.boot_env import BOOT_ENV, boot_env_value, run_boot_from_env
from providers.catalog.query import offer_matches
from providers.errors import (
    AuthError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    InvalidRequestError,
    PriceTooLowError,
    ProviderError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
)
from providers.gpus import resolve_offer_gpu
from providers.http import ApiClient, HttpSettings, RateLimiter
from providers.retry import RetryPolicy, call_with_retry
from providers.vastai.settings import Settings

PROVIDER = "vastai"
AUTH_HINT = "set VAST_API_KEY, or run `vastai set api-key <key>` (key at https://cloud.vast.ai/manage-keys/)"
#: Vast's page size limit for GET /api/v1/instances/.
PAGE_LIMIT = 25
#: The spec: "onstart field is limited to 4048 characters -- gzip+base64 for longer scripts".
ONSTART_MAX = 4048
HOURS_PER_MONTH = 720.0   # storage_cost is $/GB/month; the vast CLI divides by 720 for $/h

#: Vast's gpu_name spellings per canonical GPU, for a server-side gpu_name filter. Names not here are
#: filtered client-side only (resolve_gpu on each offer), so a missing entry costs bandwidth, not results.
VAST_GPU_NAMES: dict[str, tuple[str, ...]] = {
    "B200-180G": ("B200",),
    "H200-141G": ("H200", "H200 NVL"),
    "H100-80G": ("H100 SXM", "H100 PCIE"),
    "H100NVL-94G": ("H100 NVL",),
    "GH200-96G": ("GH200 SXM",),
    "A100-80G": ("A100 SXM4", "A100 PCIE", "A100X"),
    "A100-40G": ("A100 SXM4", "A100 PCIE"),
    "L40S-48G": ("L40S",),
    "L40-48G": ("L40",),
    "L4-24G": ("L4",),
    "A10-24G": ("A10",),
    "RTX4090-24G": ("RTX 4090",),
    "RTXA6000-48G": ("RTX A6000",),
    "RTX5090-32G": ("RTX 5090",),
    "RTX3090-24G": ("RTX 3090",),
    "RTXA5000-24G": ("RTX A5000",),
    "RTXA4000-16G": ("RTX A4000",),
    "RTX6000ADA-48G": ("RTX 6000Ada",),
    "A40-48G": ("A40",),
    "V100-16G": ("Tesla V100",),
    "V100-32G": ("Tesla V100",),
    "T4-16G": ("Tesla T4",),
}

# Error identifiers Vast puts in {"success": false, "error": ..., "msg": ...} (vast-ai/docs openapi.yaml).
_NOT_FOUND_CODES = frozenset({"no_such_instance", "not_found"})
_NO_ASK_CODES = frozenset({"no_such_ask"})
_CREDIT_CODES = frozenset({"insufficient_credit", "insufficient_balance", "low_credit"})
_AUTH_CODES = frozenset({"auth_error", "unauthorized"})
_RATE_CODES = frozenset({"rate_limit_exceeded"})


def translate_error(response: httpx.Response) -> ProviderError | None:
    """THE one place Vast's failures become the taxonomy. None when the response is a success.

    Vast reports failure by HTTP status and/or an envelope ``{"success": false, "error", "msg"}`` (even at
    HTTP 200, e.g. a rejected bid). The error identifier wins over the status: Vast answers an
    unauthorized search with 404 and out-of-credit with 4xx codes that also mean other things.
    """
    status = response.status_code
    try:
        body: Any = response.json() if response.content else None
    except ValueError:
        body = None
    envelope = body if isinstance(body, dict) else {}
    failed_envelope = envelope.get("success") is False
    if status < 400 and not failed_envelope:
        return None
    code = str(envelope.get("error") or "") or None
    msg = str(envelope.get("msg") or envelope.get("detail") or envelope.get("message") or response.text[:200])
    words = f"{code or ''} {msg}".lower()
    where = f"HTTP {status}"

    if status == 429 or code in _RATE_CODES:
        return RateLimitedError(f"rate limited ({where}): {msg}", provider=PROVIDER, code=code or "429")
    if status >= 500:
        return ProviderUnavailableError(f"server error {where}: {msg}", provider=PROVIDER, code=code)
    if code in _AUTH_CODES or status == 401 or "invalid user key" in words:
        return AuthError(f"API key refused ({where}): {msg}", provider=PROVIDER, code=code, hint=AUTH_HINT)
    if code in _NOT_FOUND_CODES:
        return InstanceNotFoundError(f"no such instance: {msg}", provider=PROVIDER, code=code)
    # The spec shows no_such_ask both as the identifier and inside msg under error "invalid_args".
    if code in _NO_ASK_CODES or "no_such_ask" in words or status == 410:
        return InsufficientCapacityError(f"offer no longer available: {msg}", provider=PROVIDER,
                                         code="no_such_ask")
    if code in _CREDIT_CODES or status in (402, 411) or "credit" in words:
        return QuotaExceededError(f"not enough credit: {msg}", provider=PROVIDER, code=code,
                                  hint="add credit at https://cloud.vast.ai/billing/")
    if code == "invalid_price" or ("bid" in words and ("low" in words or "below" in words)):
        return PriceTooLowError(f"bid refused: {msg}", provider=PROVIDER, code=code or "invalid_price")
    if status == 403:
        return AuthError(f"not allowed ({where}): {msg}", provider=PROVIDER, code=code, hint=AUTH_HINT)
    if status == 404:
        return InstanceNotFoundError(f"not found ({where}): {msg}", provider=PROVIDER, code=code)
    return InvalidRequestError(f"request refused ({where}): {msg}", provider=PROVIDER, code=code)


def disk_cost_hr(disk_gb: float, storage_cost: float) -> float:
    """Vast bills disk at ``storage_cost`` $/GB/month; per hour as the vast CLI computes it (/720)."""
    return disk_gb * storage_cost / HOURS_PER_MONTH


def offer_price_hr(raw: dict[str, Any], market: Market, disk_gb: float) -> float:
    """$/h for an ask: on-demand dph_base (or spot min_bid) plus the disk it will carry."""
    base = float(raw["min_bid"] if market is Market.SPOT else raw["dph_base"])
    return round(base + disk_cost_hr(disk_gb, float(raw.get("storage_cost") or 0.0)), 6)


def _vast_instance_type(raw: dict[str, Any]) -> str:
    gpu = str(raw.get("gpu_name") or "unknown").replace(" ", "_")
    cpus = float(raw.get("cpu_cores_effective") or 0)
    return f"{int(raw.get('num_gpus') or 0)}x-{gpu}-{cpus:g}-{int(raw.get('cpu_ram') or 0)}"


def map_state(raw: dict[str, Any]) -> tuple[InstanceState, str, str | None]:
    """(state, raw_state, raw_reason) from actual_status / intended_status / cur_state / next_state / is_bid.

    * loading / created / null (not yet started) / rebooting: PENDING
    * running: RUNNING (STOPPING when a stop was asked for)
    * stopped, interruptible: PREEMPTED "outbid" (Vast stops, not destroys, an outbid instance; a bid too
      low at create time looks the same: cur_state == intended_status == next_state == "stopped")
    * stopped while intended running (on-demand): PREEMPTED (the host took it away)
    * stopped by the user (intended stopped, on-demand): STOPPED
    * unknown (no recent heartbeat from the host) / offline (the host disconnected from Vast's servers):
      UNREACHABLE. Not gone: the contract still bills and the host may come back, so the caller gives it a
      grace period before counting the node lost (docs.vast.ai, "show instance": actual_status values).
    * exited (the container process exited): PREEMPTED with the raw status; it does not run again
    * frozen: STOPPED (paused by Vast, storage kept)
    """
    actual = raw.get("actual_status")
    intended = raw.get("intended_status")
    cur, nxt = raw.get("cur_state"), raw.get("next_state")
    is_bid = bool(raw.get("is_bid"))
    raw_state = str(actual or cur or "null")
    contract_stopped = cur == "stopped" and nxt == "stopped" and intended == "stopped"
    if actual == "stopped" or (contract_stopped and actual in (None, "created", "loading")):
        if is_bid:
            return InstanceState.PREEMPTED, raw_state, "outbid"
        if intended == "running":
            return InstanceState.PREEMPTED, raw_state, "stopped by host (intended running)"
        return InstanceState.STOPPED, raw_state, None
    if actual == "running":
        return (InstanceState.STOPPING if intended == "stopped" else InstanceState.RUNNING), raw_state, None
    if actual in (None, "created", "loading", "rebooting", "scheduling"):
        return InstanceState.PENDING, raw_state, raw.get("status_msg")
    if actual in ("unknown", "offline"):
        return InstanceState.UNREACHABLE, raw_state, raw.get("status_msg") or f"{actual}: host lost contact"
    if actual == "exited":
        return InstanceState.PREEMPTED, raw_state, "exited: will not reach running again"
    if actual == "frozen":
        return InstanceState.STOPPED, raw_state, raw.get("status_msg")
    return InstanceState.PENDING, raw_state, raw.get("status_msg")


def _ssh_endpoint(raw: dict[str, Any]) -> tuple[str | None, int]:
    """Direct ssh (ports["22/tcp"] on public_ipaddr) when mapped, else Vast's ssh proxy."""
    ports = raw.get("ports") or {}
    mapped = ports.get("22/tcp") if isinstance(ports, dict) else None
    if mapped:
        host_ip = mapped[0].get("HostIp")
        ip = raw.get("public_ipaddr") if host_ip in (None, "", "0.0.0.0") else host_ip
        return (str(ip).strip() if ip else None), int(mapped[0]["HostPort"])
    if raw.get("ssh_host") and raw.get("ssh_port"):
        return str(raw["ssh_host"]), int(raw["ssh_port"])
    return None, 22


def parse_instance(raw: dict[str, Any]) -> Instance:
    state, raw_state, reason = map_state(raw)
    ids = parse_instance_name(raw.get("label"))
    ip, port = _ssh_endpoint(raw)
    start = raw.get("start_date")
    extra = tuple((k, str(raw[k])) for k in ("intended_status", "cur_state", "next_state", "status_msg",
                                             "machine_id", "label") if raw.get(k) is not None)
    return Instance(
        provider=PROVIDER, instance_id=str(raw["id"]), launch_id=ids[1] if ids else None,
        owner=ids[0] if ids else None, state=state, instance_type=_vast_instance_type(raw),
        region=str(raw.get("geolocation") or "unknown"), market=Market.SPOT if raw.get("is_bid") else Market.ON_DEMAND,
        raw_state=raw_state, raw_reason=reason, public_ip=ip, ssh_port=port,
        created_at=datetime.fromtimestamp(float(start), UTC) if start else None,
        price_hr=float(raw["dph_total"]) if raw.get("dph_total") is not None else None, extra=extra,
    )


def _onstart(spec: LaunchSpec) -> str:
    """The ssh key installed, then the boot script run from the pod's environment (``create_body`` puts it in
    ``env``): a few hundred characters whatever the script's size, so always under Vast's ONSTART_MAX."""
    parts = []
    if spec.ssh_public_key:
        key = shlex.quote(spec.ssh_public_key.strip())
        parts.append(f"mkdir -p ~/.ssh && chmod 700 ~/.ssh && echo {key} >> ~/.ssh/authorized_keys")
    if spec.startup_script:
        parts.append(run_boot_from_env("/root/orch-boot.sh", "/root/orch-boot.log"))
    onstart = "\n".join(parts)
    if len(onstart) > ONSTART_MAX:
        raise InvalidRequestError(f"onstart is {len(onstart)} characters; Vast takes {ONSTART_MAX} (a shorter ssh "
                                  "key)", provider=PROVIDER)
    return onstart


def onstart_for(spec: LaunchSpec) -> str:
    """The ``onstart`` a launch of ``spec`` sends (public for the size checks in tests and docs)."""
    return _onstart(spec)


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
        self._api = ApiClient(PROVIDER, http, translate_error, limiter=limiter, transport=transport)
        # Creating is not idempotent on Vast's side: that client never retries; launch() retries around a
        # label lookup instead, so a create that did land is found rather than repeated.
        once = HttpSettings(base_url=http.base_url, api_key=key, timeout_s=settings.timeout_s,
                            retry=RetryPolicy(attempts=1, initial_wait_s=0.0, max_wait_s=0.0,
                                              deadline_s=settings.retry_deadline_s))
        self._create_api = ApiClient(PROVIDER, once, translate_error, limiter=limiter, transport=transport)
        self._v1 = self._api.settings.base_url.removesuffix("/api/v0") + "/api/v1"

    # ---- credentials -----------------------------------------------------------------------------------
    def check_credentials(self) -> None:
        if self.settings.api_key is None:
            raise AuthError("no Vast.ai API key found", provider=PROVIDER, hint=AUTH_HINT)
        self._api.request("GET", f"{self._v1}/instances/", params={"limit": 1})

    # ---- offers ------------------------------------------------------------------------------------------
    def search_body(self, req: GpuRequest, market: Market) -> dict[str, Any]:
        """The POST /bundles/ body for ``req`` in ``market``: the careful filters plus what ``req`` pins."""
        s = self.settings
        body: dict[str, Any] = {
            "rentable": {"eq": s.rentable},
            "rented": {"eq": s.rented},
            "reliability": {"gte": s.min_reliability},
            "num_gpus": {"eq": req.count},
            "type": "bid" if market is Market.SPOT else "on-demand",
            "allocated_storage": s.disk_gb,
            "order": [["min_bid" if market is Market.SPOT else "dph_total", "asc"]],
            "limit": s.offer_limit,
        }
        if s.verified is not None:
            body["verified"] = {"eq": s.verified}
        if s.min_direct_ports:
            body["direct_port_count"] = {"gte": s.min_direct_ports}
        if s.min_cuda is not None:
            body["cuda_max_good"] = {"gte": s.min_cuda}
        if s.min_inet_down_mbps is not None:
            body["inet_down"] = {"gte": s.min_inet_down_mbps}
        if req.gpus and all(g in VAST_GPU_NAMES for g in req.gpus):
            body["gpu_name"] = {"in": sorted({n for g in req.gpus for n in VAST_GPU_NAMES[g]})}
        if req.min_vram_gb is not None:
            body["gpu_ram"] = {"gte": int(req.min_vram_gb * 1000)}   # MB; 1000 leaves room for 81559-MB H100s
        return body

    def offers(self, req: GpuRequest) -> list[Offer]:
        if req.providers and PROVIDER not in req.providers and "vast" not in req.providers:
            return []
        found: list[Offer] = []
        for market in sorted(req.markets):
            for raw in self._search(self.search_body(req, market)):
                offer = self._to_offer(raw, market)
                if offer is not None and offer_matches(offer, _ignore_provider(req)):
                    found.append(offer)
        found.sort(key=lambda o: (o.price_hr, o.market, o.offer_id or ""))
        return found

    def _search(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        answer = self._api.request("POST", "/bundles/", json=body)
        offers = answer.get("offers") if isinstance(answer, dict) else None
        return [o for o in offers or [] if isinstance(o, dict)]

    def _to_offer(self, raw: dict[str, Any], market: Market) -> Offer | None:
        vram = float(raw.get("gpu_ram") or 0) / 1024.0
        model = resolve_offer_gpu(str(raw.get("gpu_name") or ""), vram_gb=vram or None, provider=PROVIDER)
        if model is None:
            return None
        n = int(raw.get("num_gpus") or 0)
        if n < 1:
            return None
        return Offer(
            provider=PROVIDER, instance_type=_vast_instance_type(raw), region=str(raw.get("geolocation") or "unknown"),
            zone=None, gpu=model.name, gpu_count=n, vram_gb=round(vram, 1),
            vcpus=float(raw.get("cpu_cores_effective") or raw.get("cpu_cores") or 0),
            memory_gb=round(float(raw.get("cpu_ram") or 0) / 1024.0, 1),
            interconnect=Interconnect.NVLINK if float(raw.get("bw_nvlink") or 0) > 0 else Interconnect.PCIE,
            market=market, price_hr=offer_price_hr(raw, market, self.settings.disk_gb),
            price_as_of=self._today(), source="live", availability=Availability.AVAILABLE,
            offer_id=str(raw["id"]), max_disk_gb=float(raw["disk_space"]) if raw.get("disk_space") else None,
        )

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
        kind = "bid" if market is Market.SPOT else "on-demand"
        if spec.offer.offer_id and spec.offer.offer_id.isdigit():
            asks = self._search({"id": {"eq": int(spec.offer.offer_id)}, "rentable": {"eq": True},
                                 "rented": {"eq": False}, "type": kind, "allocated_storage": spec.disk_gb,
                                 "disk_space": {"gte": spec.disk_gb}, "limit": 1})
            if not asks:
                raise InsufficientCapacityError(f"ask {spec.offer.offer_id} is no longer available",
                                                provider=PROVIDER, code="no_such_ask")
            return asks[0]
        # A catalog offer: find the cheapest live ask for the same GPU, count and market, with room for the disk
        # (an ask's disk_space is all the machine has).
        req = GpuRequest(gpus=(spec.offer.gpu,), count=spec.offer.gpu_count, markets=frozenset({market}))
        live = [o for o in self.offers(req) if o.max_disk_gb is None or o.max_disk_gb >= spec.disk_gb]
        if not live:
            raise InsufficientCapacityError(f"no live Vast offer for {spec.offer.gpu_count}x {spec.offer.gpu}",
                                            provider=PROVIDER)
        return self._live_ask(_with_offer(spec, live[0]))

    def bid_for(self, ask: dict[str, Any], spec: LaunchSpec) -> float | None:
        """The interruptible bid ($/h for the machine, disk excluded), or None for on-demand."""
        if spec.offer.market is not Market.SPOT:
            return None
        if spec.max_price_hr is not None:
            disk_hr = disk_cost_hr(spec.disk_gb, float(ask.get("storage_cost") or 0.0))
            return round(max(spec.max_price_hr - disk_hr, 0.001), 4)
        return round(float(ask["min_bid"]) * self.settings.bid_markup, 4)

    def create_body(self, spec: LaunchSpec, ask: dict[str, Any]) -> dict[str, Any]:
        port = self.settings.ssh_container_port
        return {
            "client_id": "me",
            "image": spec.image or self.settings.image,
            "disk": spec.disk_gb,
            "label": spec.name,
            "onstart": _onstart(spec),
            "runtype": "ssh",
            "target_state": "running",
            "env": {f"-p {port}:{port}": "1",
                    **({BOOT_ENV: boot_env_value(spec.startup_script)} if spec.startup_script else {})},
            "price": self.bid_for(ask, spec),
        }

    def _create(self, spec: LaunchSpec) -> Instance:
        ask = self._live_ask(spec)
        try:
            answer = self._create_api.request("PUT", f"/asks/{int(ask['id'])}/", json=self.create_body(spec, ask))
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
                        state=InstanceState.PENDING, instance_type=_vast_instance_type(ask),
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
    from dataclasses import replace

    return replace(req, providers=())


def _with_offer(spec: LaunchSpec, offer: Offer) -> LaunchSpec:
    from dataclasses import replace

    return replace(spec, offer=offer)


__all__: Iterable[str] = ("VastProvider", "map_state", "offer_price_hr", "parse_instance", "translate_error")
