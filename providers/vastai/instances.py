"""Reading a Vast instance back as orch's ``Instance``: Vast's statuses mapped to orch's states (an outbid
interruptible reads PREEMPTED), orch's ids from the label, the ssh endpoint (direct or Vast's proxy). Pure
functions on the API's instance dicts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from providers.base import Instance, InstanceState, Market, parse_instance_name

from .errors import PROVIDER


def vast_instance_type(raw: dict[str, Any]) -> str:
    """The instance type orch gives a Vast machine (an ask or an instance): ``<gpus>x-<gpu_name>-<cpus>-<ram>``."""
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
        owner=ids[0] if ids else None, state=state, instance_type=vast_instance_type(raw),
        region=str(raw.get("geolocation") or "unknown"), market=Market.SPOT if raw.get("is_bid") else Market.ON_DEMAND,
        raw_state=raw_state, raw_reason=reason, public_ip=ip, ssh_port=port,
        created_at=datetime.fromtimestamp(float(start), UTC) if start else None,
        price_hr=float(raw["dph_total"]) if raw.get("dph_total") is not None else None, extra=extra,
    )


