"""Reading a Lambda instance back as orch's ``Instance``: its status mapped to orch's states, orch's ids from
the instance name, the price; and the decoder of a GET /instances answer into orch's machines. Pure."""

from __future__ import annotations

import json
from typing import Any

from providers.base import Instance, InstanceState, parse_instance_name

from .errors import PROVIDER

STATES = {
    "booting": InstanceState.PENDING,
    "active": InstanceState.RUNNING,
    "unhealthy": InstanceState.UNREACHABLE,  # failing Lambda's health checks: still billed, may recover
    "terminating": InstanceState.STOPPING,
    "terminated": InstanceState.TERMINATED,
    "preempted": InstanceState.PREEMPTED,  # in the 1.8.3 InstanceStatus enum; Lambda sells no spot today
}


def orch_instances(body: bytes) -> tuple[Instance, ...] | None:
    """The machines of a GET /instances answer named by orch (any owner's), or None when it is not the
    ``{"data": [...]}`` envelope. A ValueError: not JSON."""
    doc = json.loads(body)
    if not isinstance(doc, dict) or "data" not in doc:
        return None
    # The name parsed once per machine (a daemon's first listing decodes every machine: ~10% of it twice).
    return tuple(_named(raw, ids) for raw in doc["data"] if (ids := parse_instance_name(raw.get("name"))))


def to_instance(raw: dict[str, Any]) -> Instance:
    """The machine ``raw``, orch's ids parsed from its name (None when it is not orch's)."""
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
