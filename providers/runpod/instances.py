"""Reading a RunPod pod back as orch's ``Instance``: its desiredStatus mapped to orch's states, orch's ids from
the pod name, the public ssh port, the hourly cost. Pure functions on GraphQL pod dicts."""

from __future__ import annotations

from typing import Any

from providers.base import Instance, InstanceState, parse_instance_name

from .errors import PROVIDER

SSH_PRIVATE_PORTS = (22, 10022)


def map_state(pod: dict[str, Any]) -> InstanceState:
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


def to_instance(pod: dict[str, Any]) -> Instance:
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
        state=map_state(pod),
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
