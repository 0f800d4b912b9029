"""Live list prices from RunPod (GraphQL ``gpuTypes``, public) and Lambda (``GET /instance-types``, with the
user's Lambda API key), laid over gpuhunt's daily rows of those providers.

* RunPod's ``securePrice`` / ``communityPrice`` are per-GPU prices for the whole cloud, so they reprice every
  row of that GPU type and cloud (each data centre's row), stamped now.
* Lambda's instance types carry the price now and the regions with capacity now: every row of a type is
  repriced, and a region with capacity that the rows lack gets a row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from providers.base import Market, Offer
from providers.catalog.interconnect import interconnect_for
from providers.catalog.refresh.http import call_json
from providers.catalog.refresh.model import RefreshContext, SourceError, SourceSkipped, StepResult
from providers.gpus import UnknownGpuError, resolve_gpu

RUNPOD_GPU_TYPES = "query GpuTypes { gpuTypes { id displayName memoryInGb securePrice communityPrice } }"
_RUNPOD_TYPE = re.compile(r"^(?P<count>\d+)x_(?P<id>.+)_(?P<cloud>SECURE|COMMUNITY)$")


def runpod_prices(answer: Any) -> dict[tuple[str, str], float]:
    """(gpu type id, SECURE|COMMUNITY) -> $/GPU-hour, from a ``gpuTypes`` answer. Raises SourceError."""
    if not isinstance(answer, dict) or answer.get("errors"):
        raise SourceError(f"runpod gpuTypes: {str((answer or {}).get('errors'))[:200]}")
    types = (answer.get("data") or {}).get("gpuTypes")
    if not isinstance(types, list):
        raise SourceError("runpod gpuTypes: no 'gpuTypes' list in the answer")
    prices: dict[tuple[str, str], float] = {}
    for g in types:
        if not isinstance(g, dict) or not g.get("id"):
            continue
        for cloud, field in (("SECURE", "securePrice"), ("COMMUNITY", "communityPrice")):
            value = g.get(field)
            if isinstance(value, int | float) and value > 0:
                prices[(str(g["id"]), cloud)] = float(value)
    return prices


@dataclass(frozen=True, slots=True)
class RunpodGpuTypes:
    name: str = "runpod gpuTypes"

    def run(self, rows: list[Offer], ctx: RefreshContext) -> StepResult:
        prices = runpod_prices(call_json(ctx.client, "POST", ctx.settings.runpod_url,
                                         json={"query": RUNPOD_GPU_TYPES}))
        if not prices:
            raise SourceError("runpod gpuTypes: no GPU type has a price")
        out: list[Offer] = []
        repriced = 0
        for o in rows:
            m = _RUNPOD_TYPE.match(o.instance_type)
            per_gpu = prices.get((m.group("id"), m.group("cloud"))) if m else None
            if per_gpu is None:
                out.append(o)
                continue
            repriced += 1
            out.append(replace(o, price_hr=round(per_gpu * o.gpu_count, 6), price_as_of=ctx.now.date(),
                               price_as_of_approximate=False, captured_at=ctx.now, price_source=self.name))
        return StepResult(out, f"runpod gpuTypes (live): {repriced} of {len(rows)} rows repriced "
                               f"({len(prices)} GPU type prices)")


def lambda_types(answer: Any) -> list[dict[str, Any]]:
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, dict):
        raise SourceError("lambda instance-types: no 'data' object in the answer")
    return [v for v in data.values() if isinstance(v, dict) and isinstance(v.get("instance_type"), dict)]


def lambda_offer(itype: dict[str, Any], region: str, ctx: RefreshContext) -> Offer | None:
    """A row for a Lambda instance type in ``region``, or None for one orch's GPU registry does not know."""
    specs = itype.get("specs") or {}
    try:
        gpus = int(specs.get("gpus") or 0)
        model = resolve_gpu(str(itype.get("gpu_description") or itype.get("description") or ""))
        price = float(itype["price_cents_per_hour"]) / 100
    except (UnknownGpuError, KeyError, TypeError, ValueError):
        return None
    if gpus < 1 or price <= 0:
        return None
    name = str(itype["name"])
    return Offer(
        provider="lambda", instance_type=name, region=region, zone=None, gpu=model.name, gpu_count=gpus,
        vram_gb=float(model.vram_gb), vcpus=float(specs.get("vcpus") or 0) or None,
        memory_gb=float(specs.get("memory_gib") or 0) or None, interconnect=interconnect_for("lambda", name, gpus),
        market=Market.ON_DEMAND, price_hr=price, price_as_of=ctx.now.date(), captured_at=ctx.now,
        price_source="lambda instance-types",
    )


@dataclass(frozen=True, slots=True)
class LambdaInstanceTypes:
    name: str = "lambda instance-types"

    def run(self, rows: list[Offer], ctx: RefreshContext) -> StepResult:
        key = ctx.settings.lambda_api_key
        if not key:
            raise SourceSkipped("live prices: no Lambda API key ($LAMBDA_API_KEY); gpuhunt's daily rows kept")
        answer = call_json(ctx.client, "GET", ctx.settings.lambda_url.rstrip("/") + "/instance-types",
                           headers={"Authorization": f"Bearer {key}"})
        live: dict[str, tuple[Offer, set[str]]] = {}
        for entry in lambda_types(answer):
            offer = lambda_offer(entry["instance_type"], "", ctx)
            if offer is not None:
                regions = {str(r.get("name")) for r in entry.get("regions_with_capacity_available") or []
                           if isinstance(r, dict) and r.get("name")}
                live[offer.instance_type] = (offer, regions)
        out: list[Offer] = []
        for o in rows:
            if o.instance_type in live:
                fresh = live[o.instance_type][0]
                o = replace(o, price_hr=fresh.price_hr, price_as_of=fresh.price_as_of, captured_at=fresh.captured_at,
                            price_as_of_approximate=False, price_source=fresh.price_source)
            out.append(o)
        have = {(o.instance_type, o.region) for o in out}
        added = [replace(offer, region=r) for name, (offer, regions) in sorted(live.items())
                 for r in sorted(regions) if (name, r) not in have]
        return StepResult(out + added, f"lambda instance-types (live): {len(live)} types repriced, "
                                       f"{len(added)} regions with capacity added")
