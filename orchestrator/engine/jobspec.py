"""A job as the engine needs it: planning constraints and policies, derived from its manifest."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from orchestrator.idle import IdlePolicy
from orchestrator.planner import PlanRequest


@dataclass(frozen=True, slots=True)
class JobSpec:
    name: str
    plan: PlanRequest
    idle: IdlePolicy = field(default_factory=IdlePolicy)
    max_relaunches: int = 10
    cooldown: timedelta = timedelta(minutes=30)
    budget_usd: float | None = None
    deadline: datetime | None = None
    disk_gb: int = 100
    image: str | None = None
    max_price_hr: float | None = None
