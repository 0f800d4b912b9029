"""An in-memory Provider for orchestrator tests (Karpenter-fake style): records calls, fails on demand.

The wire-level fakes (tests/fakes/<cloud>.py) prove the adapters; this one lets daemon and planner
tests drive thousands of instances and exact failure sequences cheaply. It keeps the Provider
contract (idempotent launch by launch id, terminate of missing == success, list by owner, transient
errors retried in place), and tests/contract/harness_memory.py holds it to the same suite as the adapters.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import ClassVar

from providers.base import Capability, GpuRequest, Instance, InstanceState, LaunchSpec, Market, Offer, Provider
from providers.catalog.query import match_offers
from providers.errors import ProviderError


@dataclass
class MemoryCloud:
    """The cloud's state, shareable between several provider objects (as several daemons would)."""

    instances: dict[str, Instance] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    # Per method, what its next calls do: an error to raise, or None for "this call succeeds".
    fail_next: dict[str, list[ProviderError | None]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ids: itertools.count = field(default_factory=lambda: itertools.count(1))  # type: ignore[type-arg]


class MemoryProvider(Provider):
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.SPOT, Capability.TAGS, Capability.STOP,
                                                                Capability.MULTI_NODE})

    #: Calls a transient error is retried for (the adapters' RetrySettings default).
    retry_attempts: int = 6

    def __init__(self, name: str, offers: list[Offer], cloud: MemoryCloud | None = None) -> None:
        self.name = name  # type: ignore[misc]
        self._offers = offers
        self.cloud = cloud or MemoryCloud()

    # --- switches -------------------------------------------------------------------------------
    def fail(self, method: str, *errors: ProviderError | None) -> None:
        self.cloud.fail_next.setdefault(method, []).extend(errors)

    def preempt(self, instance_id: str, reason: str = "spot-reclaimed") -> None:
        with self.cloud.lock:
            inst = self.cloud.instances[instance_id]
            self.cloud.instances[instance_id] = replace(inst, state=InstanceState.PREEMPTED, raw_reason=reason)

    def plant(self, instance: Instance) -> None:
        with self.cloud.lock:
            self.cloud.instances[instance.instance_id] = instance

    def live(self) -> list[Instance]:
        return [i for i in self.cloud.instances.values() if not i.state.is_gone]

    def _maybe_fail(self, method: str) -> None:
        """Play the method's queued outcomes. A retryable error (throttling, 5xx) is retried in place, as the
        adapters retry it (without waiting: no clock here), and raised once ``retry_attempts`` calls failed;
        any other error is raised at once. Every attempt counts in ``cloud.calls``."""
        for attempt in range(1, self.retry_attempts + 1):
            self.cloud.calls[method] += 1
            queue = self.cloud.fail_next.get(method)
            error = queue.pop(0) if queue else None
            if error is None:
                return
            if not error.retryable or attempt == self.retry_attempts:
                raise error

    # --- Provider -------------------------------------------------------------------------------
    def check_credentials(self) -> None:
        self._maybe_fail("check_credentials")

    def offers(self, req: GpuRequest) -> list[Offer]:
        self._maybe_fail("offers")
        return match_offers([o for o in self._offers if o.provider == self.name], req)

    def launch(self, spec: LaunchSpec) -> Instance:
        self._maybe_fail("launch")
        with self.cloud.lock:
            for inst in self.cloud.instances.values():
                if inst.launch_id == spec.launch_id and not inst.state.is_gone:
                    return inst
            n = next(self.cloud.ids)
            iid = f"{self.name}-{n}"
            o = spec.offer
            inst = Instance(
                provider=self.name, instance_id=iid, launch_id=spec.launch_id, owner=spec.owner,
                state=InstanceState.RUNNING, instance_type=o.instance_type, region=o.region, zone=o.zone,
                market=o.market, job=spec.job, raw_state="running", public_ip="127.0.0.1", private_ip=f"10.0.0.{n}",
                price_hr=o.price_hr,
            )
            self.cloud.instances[iid] = inst
            return inst

    def get(self, instance_id: str) -> Instance | None:
        self._maybe_fail("get")
        return self.cloud.instances.get(instance_id)

    def list_instances(self, owner: str) -> list[Instance]:
        self._maybe_fail("list_instances")
        with self.cloud.lock:
            return [i for i in self.cloud.instances.values() if i.owner == owner]

    def terminate(self, instance_id: str) -> None:
        self._maybe_fail("terminate")
        with self.cloud.lock:
            inst = self.cloud.instances.get(instance_id)
            if inst is not None:
                self.cloud.instances[instance_id] = replace(inst, state=InstanceState.TERMINATED,
                                                            raw_state="terminated")

    def stop(self, instance_id: str) -> None:
        self._maybe_fail("stop")
        with self.cloud.lock:
            inst = self.cloud.instances.get(instance_id)
            if inst is not None:
                self.cloud.instances[instance_id] = replace(inst, state=InstanceState.STOPPED, raw_state="stopped")


__all__ = ["Market", "MemoryCloud", "MemoryProvider"]
