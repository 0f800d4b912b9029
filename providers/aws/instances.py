"""Reading an EC2 instance back as orch's ``Instance``: ids ``<region>/<ec2 id>``, EC2's state (and a spot
reclaim's reason code) mapped to orch's states, the tags orch set. Pure functions on describe_instances items."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from providers.base import TAG_JOB, TAG_LAUNCH_ID, TAG_OWNER, Instance, InstanceState, Market
from providers.errors import ProviderUnavailableError

from . import fabric as efa

PROVIDER = "aws"

# State reason codes EC2 gives an instance the spot market reclaimed (terminate / stop-hibernate behaviour).
SPOT_REASON_CODES = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})
_STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "shutting-down": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPED,
    "terminated": InstanceState.TERMINATED,
}


def encode_id(region: str, ec2_id: str) -> str:
    return f"{region}/{ec2_id}"


def decode_id(instance_id: str) -> tuple[str, str] | None:
    """(region, ec2 id), or None when the id is not one this adapter made."""
    region, sep, ec2_id = instance_id.partition("/")
    if not sep or not region or not ec2_id.startswith("i-"):
        return None
    return region, ec2_id


def map_state(raw_state: str, reason_code: str | None) -> InstanceState:
    """EC2 state name (+ StateReason.Code) -> orch's state. A spot reclaim reads PREEMPTED in any end state."""
    if reason_code in SPOT_REASON_CODES and raw_state in ("shutting-down", "terminated", "stopping", "stopped"):
        return InstanceState.PREEMPTED
    try:
        return _STATES[raw_state]
    except KeyError:
        raise ProviderUnavailableError(f"unknown EC2 instance state {raw_state!r}", provider=PROVIDER) from None


def to_instance(region: str, raw: dict[str, Any], ssh_user: str = "ubuntu") -> Instance:
    """One describe_instances item -> Instance."""
    tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
    raw_state = raw.get("State", {}).get("Name", "")
    reason = raw.get("StateReason") or {}
    code = reason.get("Code") or None
    launched = raw.get("LaunchTime")
    return Instance(
        provider=PROVIDER,
        instance_id=encode_id(region, raw["InstanceId"]),
        launch_id=tags.get(TAG_LAUNCH_ID),
        owner=tags.get(TAG_OWNER),
        job=tags.get(TAG_JOB),
        state=map_state(raw_state, code),
        instance_type=raw.get("InstanceType", ""),
        region=region,
        zone=(raw.get("Placement") or {}).get("AvailabilityZone"),
        market=Market.SPOT if raw.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND,
        raw_state=raw_state,
        raw_reason=code or raw.get("StateTransitionReason") or None,
        public_ip=raw.get("PublicIpAddress"),
        private_ip=raw.get("PrivateIpAddress"),
        ssh_user=ssh_user,
        created_at=launched if isinstance(launched, datetime) else None,
        extra=(("ec2_instance_id", raw["InstanceId"]),),
        fabric=efa.launched_fabric(tags, raw.get("NetworkInterfaces", [])),
    )
