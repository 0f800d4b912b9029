"""The fleet's spot history: every spot machine of an owner's jobs that was up in a window (the recovery
policy's evidence of each zone's spot, orchestrator/engine/recovery_facts.py). Takes the Session of the
caller's transaction."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from sqlalchemy import or_
from sqlmodel import Session, col, select

from orchestrator.store.models import Attempt, InstanceRow
from providers.base import Market


class SpotHistoryColumns(NamedTuple):
    job_id: int
    started_at: datetime
    ended_at: datetime | None
    state: str
    end_cause: str | None
    zone: str | None
    region: str
    gpu: str


def spot_history_columns(tx: Session, owner: str, since: datetime) -> list[SpotHistoryColumns]:
    """Node 0 of ``owner``'s spot launches whose machine started and was up at some time from ``since`` on
    (not ended, or ended at or after it), oldest start first. ``attempts.ended_at`` is indexed for it."""
    q = (select(Attempt.job_id, Attempt.started_at, Attempt.ended_at, Attempt.state,  # type: ignore[call-overload]
                Attempt.end_cause, InstanceRow.zone, InstanceRow.region, InstanceRow.gpu)
         .join(InstanceRow, InstanceRow.launch_id == Attempt.launch_id)
         .where(InstanceRow.owner == owner, InstanceRow.market == Market.SPOT.value, Attempt.node_rank == 0,
                col(Attempt.started_at).is_not(None),
                or_(col(Attempt.ended_at).is_(None), col(Attempt.ended_at) >= since)))
    return [SpotHistoryColumns(*r) for r in tx.exec(q.order_by(col(Attempt.started_at), col(Attempt.id))).all()]
