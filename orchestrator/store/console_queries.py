"""Read-only queries for the web console (orchestrator.console), each returning frozen values.

The console never touches rows or sessions itself: it calls these inside ``store.transaction()`` and
renders what comes back. Its two writes are in ``orchestrator.store.requests``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from orchestrator.config.reach import reach_line
from orchestrator.engine.events import EventKind
from orchestrator.engine.states import FINAL_ATTEMPT_STATES, AttemptState, DesiredState, JobStatus
from orchestrator.manifest.schema import MarketChoice
from orchestrator.store.console_values import (
    AttemptView,
    CheckpointView,
    EventFilter,
    EventPage,
    EventRow,
    Fleet,
    FleetJob,
    FleetNode,
    JobBudget,
    JobDetail,
    UtilPoint,
)
from orchestrator.store.gpu_util import util_since
from orchestrator.store.models import GONE_INSTANCE_STATE_VALUES, Attempt, CheckpointRow, Event, InstanceRow, Job, Spend
from orchestrator.store.requests import open_relaunch_request
from orchestrator.store.spend_series import UNKNOWN_PROVIDER

_LIVE_ATTEMPT_STATES = [s.value for s in AttemptState if s not in FINAL_ATTEMPT_STATES]

# -- manifest facts (the store keeps the canonical manifest JSON) -------------------------------------

def _budget(manifest: Mapping[str, Any]) -> float | None:
    policies = manifest.get("policies") if isinstance(manifest, Mapping) else None
    value = policies.get("budget_usd") if isinstance(policies, Mapping) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _gpu_summary(manifest: Mapping[str, Any]) -> str:
    res = manifest.get("resources") if isinstance(manifest, Mapping) else None
    if not isinstance(res, Mapping):
        return ""
    gpus = res.get("gpu")
    names = ", ".join(str(g) for g in gpus) if isinstance(gpus, list) else str(gpus or "")
    if not names:
        return ""
    per_node = f"{res.get('count', 1)}x {names}"
    nodes = res.get("nodes", 1)
    return per_node if nodes in (1, None) else f"{nodes} nodes of {per_node}"


def _market(manifest: Mapping[str, Any]) -> MarketChoice | None:
    """The manifest's market as its member (None where it names none); ValueError for text that names no member,
    as the job's stored status and desired state are read."""
    value = manifest.get("market") if isinstance(manifest, Mapping) else None
    return MarketChoice(value) if value else None


# -- helpers -------------------------------------------------------------------------------------------

def _spent_by_job(tx: Session, job_ids: Sequence[int]) -> dict[int, float]:
    if not job_ids:
        return {}
    rows = tx.exec(select(Spend.job_id, func.sum(Spend.usd))  # type: ignore[call-overload]
                   .where(col(Spend.job_id).in_(list(job_ids))).group_by(col(Spend.job_id))).all()
    return {int(j): float(s or 0.0) for j, s in rows}


def _last_events(tx: Session, job_ids: Sequence[int], names: Mapping[int, str]) -> dict[int, EventRow]:
    if not job_ids:
        return {}
    latest = (select(func.max(Event.id)).where(col(Event.job_id).in_(list(job_ids)))
              .group_by(col(Event.job_id)))
    return {e.job_id: _event_row(e, names) for e in tx.exec(select(Event).where(col(Event.id).in_(latest)))
            if e.job_id is not None}


def _event_row(e: Event, names: Mapping[int, str]) -> EventRow:
    assert e.id is not None
    return EventRow(e.id, e.ts, names.get(e.job_id) if e.job_id is not None else None, EventKind(e.kind),
                    e.message, e.count, e.last_ts)


def _job_names(tx: Session) -> dict[int, str]:
    return {int(i): n for i, n in tx.exec(select(Job.id, Job.name)).all()}  # type: ignore[call-overload]


# -- fleet ---------------------------------------------------------------------------------------------

def fleet(tx: Session, *, now: datetime, util_window: timedelta = timedelta(hours=1)) -> Fleet:
    """Jobs not torn down, plus torn-down ones whose machines are still going, with every machine that may
    still bill (not gone, and either named by its cloud or still asked for by a live attempt), its $/h now
    (quoted, and actual where the cloud reports it) and its GPU utilization per minute since
    ``now - util_window``."""
    rows = list(tx.exec(select(InstanceRow, Attempt)
                        .join(Attempt, col(Attempt.launch_id) == col(InstanceRow.launch_id), isouter=True)
                        .where(col(InstanceRow.state).not_in(GONE_INSTANCE_STATE_VALUES))
                        .order_by(col(InstanceRow.job_id), col(Attempt.generation), col(Attempt.node_rank),
                                  col(InstanceRow.id))).all())
    live = [(i, a) for i, a in rows
            if i.instance_id or (a is not None and a.state in _LIVE_ATTEMPT_STATES)]
    util: dict[int, list[UtilPoint]] = {}
    for m in util_since(tx, [a.id for _, a in live if a is not None and a.id is not None], now - util_window):
        util.setdefault(m.attempt_id, []).append(UtilPoint(m.minute, m.mean_pct, m.max_pct))
    nodes: dict[int, list[FleetNode]] = {}
    for inst, attempt in live:
        if inst.job_id is None:
            continue
        nodes.setdefault(inst.job_id, []).append(_node(inst, attempt, util))
    jobs = [j for j in tx.exec(select(Job).order_by(col(Job.name)))
            if j.desired_state != DesiredState.DELETED.value or j.id in nodes]
    ids = [j.id for j in jobs if j.id is not None]
    names = {j.id: j.name for j in jobs if j.id is not None}
    spent = _spent_by_job(tx, ids)
    last = _last_events(tx, ids, names)
    out = []
    for j in jobs:
        assert j.id is not None
        out.append(FleetJob(j.id, j.name, JobStatus(j.status), j.status_reason, DesiredState(j.desired_state),
                            j.relaunch_count, spent.get(j.id, 0.0), _budget(j.manifest),
                            tuple(nodes.get(j.id, ())), last.get(j.id)))
    return Fleet(now, tuple(out))


def _node(inst: InstanceRow, attempt: Attempt | None, util: Mapping[int, Sequence[UtilPoint]]) -> FleetNode:
    aid = attempt.id if attempt is not None else None
    return FleetNode(
        attempt_id=aid, generation=attempt.generation if attempt else 0, node_rank=attempt.node_rank if attempt else 0,
        launch_id=inst.launch_id, attempt_state=AttemptState(attempt.state) if attempt else None,
        provider=inst.provider, instance_id=inst.instance_id, instance_type=inst.instance_type, region=inst.region,
        zone=inst.zone, market=inst.typed_market, gpu=inst.gpu, gpu_count=inst.gpu_count,
        state=inst.typed_state,
        quoted_hr=float(inst.price_hr or 0.0), actual_hr=inst.actual_price_hr,
        util=tuple(util.get(aid, ())) if aid is not None else ())


# -- budgets -------------------------------------------------------------------------------------------

def job_budgets(tx: Session) -> list[JobBudget]:
    """Every job not torn down, by name: its manifest's budget (None if it sets none) and its spend."""
    jobs = [j for j in tx.exec(select(Job).order_by(col(Job.name)))
            if j.desired_state != DesiredState.DELETED.value]
    spent = _spent_by_job(tx, [j.id for j in jobs if j.id is not None])
    return [JobBudget(j.name, JobStatus(j.status), _budget(j.manifest), spent.get(j.id or 0, 0.0)) for j in jobs]


# -- events --------------------------------------------------------------------------------------------

def event_kinds(tx: Session) -> list[str]:
    return sorted(str(k) for k in tx.exec(select(Event.kind).distinct()))


def job_names(tx: Session) -> list[str]:
    """Every job's name (torn-down ones too: their events stay)."""
    return sorted(str(n) for n in tx.exec(select(Job.name)))


def event_page(tx: Session, flt: EventFilter, *, page: int = 1, per_page: int = 50) -> EventPage:
    """Events matching ``flt``, newest first, one page of them (``page`` from 1; past the end: the last)."""
    if per_page < 1:
        raise ValueError("per_page must be at least 1")
    conditions: list[Any] = []
    if flt.job is not None:
        conditions.append(col(Event.job_id).in_(select(Job.id).where(Job.name == flt.job)))
    if flt.kinds:
        conditions.append(col(Event.kind).in_(list(flt.kinds)))
    if flt.since is not None:
        conditions.append(col(Event.ts) >= flt.since)
    if flt.until is not None:
        conditions.append(col(Event.ts) < flt.until)
    total = int(tx.exec(select(func.count()).select_from(Event).where(*conditions)).one())
    pages = max(1, -(-total // per_page))
    page = min(max(page, 1), pages)
    rows = tx.exec(select(Event).where(*conditions).order_by(col(Event.ts).desc(), col(Event.id).desc())
                   .offset((page - 1) * per_page).limit(per_page))
    names = _job_names(tx)
    return EventPage(tuple(_event_row(e, names) for e in rows), total, page, per_page)


# -- one job -------------------------------------------------------------------------------------------

def job_detail(tx: Session, name: str, *, event_limit: int = 100) -> JobDetail | None:
    """Everything the job page shows, or None when no job has this name."""
    job = tx.exec(select(Job).where(Job.name == name)).first()
    if job is None or job.id is None:
        return None
    attempts = tuple(_attempt_view(a, i) for a, i in tx.exec(
        select(Attempt, InstanceRow).join(InstanceRow, col(InstanceRow.launch_id) == col(Attempt.launch_id),
                                          isouter=True)
        .where(Attempt.job_id == job.id).order_by(col(Attempt.created_at), col(Attempt.id))).all())
    checkpoints = tuple(CheckpointView(c.uri, c.step, c.committed_at, c.attempt_id) for c in tx.exec(
        select(CheckpointRow).where(CheckpointRow.job_id == job.id)
        .order_by(col(CheckpointRow.committed_at), col(CheckpointRow.id))))
    names = {job.id: job.name}
    events = tuple(_event_row(e, names) for e in tx.exec(
        select(Event).where(Event.job_id == job.id).order_by(col(Event.ts).desc(), col(Event.id).desc())
        .limit(event_limit)))
    total = int(tx.exec(select(func.count()).select_from(Event).where(Event.job_id == job.id)).one())
    return JobDetail(
        id=job.id, name=job.name, status=JobStatus(job.status), status_reason=job.status_reason,
        desired=DesiredState(job.desired_state), relaunches=job.relaunch_count, created_at=job.created_at,
        applied_at=job.applied_at, spent_usd=_spent_by_job(tx, [job.id]).get(job.id, 0.0),
        budget_usd=_budget(job.manifest), gpu=_gpu_summary(job.manifest), market=_market(job.manifest),
        source_path=job.source_path, attempts=attempts, checkpoints=checkpoints, events=events, events_total=total,
        open_relaunch=open_relaunch_request(tx, job.id))


def _attempt_view(a: Attempt, inst: InstanceRow | None) -> AttemptView:
    assert a.id is not None
    return AttemptView(
        id=a.id, generation=a.generation, node_rank=a.node_rank, launch_id=a.launch_id, state=AttemptState(a.state),
        provider=inst.provider if inst else UNKNOWN_PROVIDER, instance_id=inst.instance_id if inst else None,
        instance_type=inst.instance_type if inst else "", region=inst.region if inst else "",
        zone=inst.zone if inst else None, market=inst.typed_market if inst else None,
        quoted_hr=float(inst.price_hr or 0.0) if inst else 0.0, actual_hr=inst.actual_price_hr if inst else None,
        created_at=a.created_at, started_at=a.started_at, ended_at=a.ended_at, reason=a.reason,
        checkpoint_restored=a.checkpoint_restored,
        reach=reach_line(inst.provider, public_ip=inst.public_ip, ssh_user=inst.ssh_user, ssh_port=inst.ssh_port)
        if inst else "")
