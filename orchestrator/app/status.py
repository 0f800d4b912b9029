"""``orch status``, ``orch events`` and ``orch logs``' failure line: typed views of the store, no cloud call."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from orchestrator.app.errors import JobsError, no_job_named
from orchestrator.engine.events import EventKind
from orchestrator.engine.states import AttemptState
from providers.base import BURNING_INSTANCE_STATES, InstanceState, Market

if TYPE_CHECKING:
    from sqlmodel import Session

    from orchestrator.engine.failure import Failure
    from orchestrator.engine.states import DesiredState, JobStatus
    from orchestrator.store import Store
    from orchestrator.store.models import Event, InstanceRow, Job

@dataclass(frozen=True, slots=True)
class InstanceView:
    """One machine as the store knows it. ``state`` and ``market`` are the store row's, typed where the row is
    read (``instance_view``). A live attempt the store has no machine row for (``orch down``: the cloud has not
    answered yet) has no ``state``, ``market`` or offer: ``attempt_state`` says where its launch is."""

    job: str | None
    provider: str
    instance_id: str | None
    launch_id: str
    instance_type: str
    region: str
    market: Market | None
    state: InstanceState | None
    price_hr: float                      # quoted: the offer's $/h
    actual_price_hr: float | None = None  # what the cloud reports for the machine, where it does
    attempt_state: AttemptState | None = None

    @property
    def burning(self) -> bool:
        return self.state in BURNING_INSTANCE_STATES

    @property
    def charged_price_hr(self) -> float:
        from orchestrator.money.spend import charged_price_hr

        return charged_price_hr(self.actual_price_hr, self.price_hr)

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "provider": self.provider, "instance_id": self.instance_id,
                "launch_id": self.launch_id, "instance_type": self.instance_type, "region": self.region,
                "market": self.market.value if self.market else "", "state": self._state_word(),
                "price_hr": self.price_hr, "actual_price_hr": self.actual_price_hr,
                "charged_price_hr": self.charged_price_hr, "burning": self.burning}

    def _state_word(self) -> str:
        """The JSON's ``state``: the machine's, else (no machine row yet) its attempt's."""
        if self.state is not None:
            return self.state.value
        return self.attempt_state.value if self.attempt_state is not None else ""


@dataclass(frozen=True, slots=True)
class JobView:
    name: str
    status: JobStatus
    desired_state: DesiredState
    instances: tuple[InstanceView, ...]
    burn_hr: float
    spent_usd: float
    relaunches: int
    last_event: EventView | None
    #: Why it failed (or waits), typed (orchestrator/engine/failure.py): for a failed, pending or recovering job.
    failure: Failure | None = None

    @property
    def current(self) -> InstanceView | None:
        return self.instances[-1] if self.instances else None

    @property
    def still_billing(self) -> bool:
        """True when the job is over or no longer wanted (``orch down``, ``apply --prune``) but a machine of it
        is not confirmed gone (a terminate in flight, refused or unanswered): its stored status may say
        ``stopped`` while that machine still bills, so what is shown must say so."""
        from orchestrator.engine.states import DesiredState

        ending = self.desired_state is not DesiredState.ACTIVE or self.status.is_final
        return ending and bool(self.instances)

    def to_json(self) -> dict[str, Any]:
        cur = self.current
        return {"name": self.name, "status": self.status.value, "desired_state": self.desired_state.value,
                "provider": cur.provider if cur else None, "instance_id": cur.instance_id if cur else None,
                "region": cur.region if cur else None,
                "market": cur.market.value if cur and cur.market else None,
                "burn_usd_per_hour": round(self.burn_hr, 4), "spent_usd": round(self.spent_usd, 4),
                "relaunches": self.relaunches, "still_billing": self.still_billing,
                "live_instances": len(self.instances),
                "last_event": self.last_event.to_json() if self.last_event else None,
                "failure": None if self.failure is None else {
                    "cause": self.failure.cause.value, "first_line": self.failure.first_line,
                    "words": self.failure.words, "fix": self.failure.cause.fix}}


@dataclass(frozen=True, slots=True)
class StatusReport:
    jobs: tuple[JobView, ...]
    instances: tuple[InstanceView, ...]   # live ones
    #: What the jobs not listed spent: deleted ones (``orch down``, ``apply --prune``) whose machines are gone.
    #: Their money was paid all the same, so the whole store's total counts it (0.0 for one named job's report).
    deleted_spent_usd: float = 0.0

    @property
    def burn_hr(self) -> float:
        return sum((i.charged_price_hr for i in self.instances if i.burning), 0.0)   # 0.0, not 0: --json types

    @property
    def jobs_spent_usd(self) -> float:
        """What the jobs listed spent."""
        return sum((j.spent_usd for j in self.jobs), 0.0)

    @property
    def spent_usd(self) -> float:
        """Everything the report covers spent: the jobs listed and the deleted ones (the bill)."""
        return self.jobs_spent_usd + self.deleted_spent_usd

    def to_json(self) -> dict[str, Any]:
        return {"jobs": [j.to_json() for j in self.jobs], "instances": [i.to_json() for i in self.instances],
                "totals": {"burn_usd_per_hour": round(self.burn_hr, 4), "spent_usd": round(self.spent_usd, 4),
                           "jobs_spent_usd": round(self.jobs_spent_usd, 4),
                           "deleted_spent_usd": round(self.deleted_spent_usd, 4),
                           "jobs": len(self.jobs), "live_instances": len(self.instances)}}


def status(store: Store, job: str | None = None) -> StatusReport:
    """Jobs (all not deleted, or the one named; a named deleted job is shown too, and so is a deleted job
    whose machines are not confirmed gone), their live machines, money burning now and spent so far (for the
    whole store, the deleted jobs not shown count in ``deleted_spent_usd``). Raises JobsError when ``job`` names
    no job."""
    from orchestrator.engine.states import DesiredState, JobStatus
    from orchestrator.store import command_queries, repo

    with store.transaction() as tx:
        if job is not None:
            row = repo.get_job(tx, job)
            if row is None:
                raise JobsError(no_job_named([job], command_queries.job_names(tx).values()))
            rows = [row]
        else:
            rows = repo.list_jobs(tx)
        names = command_queries.job_names(tx)
        machines = command_queries.machine_rows(tx)
        live = [instance_view(i, names) for i in machines]
        if job is None:
            # A deleted job whose machine is not confirmed gone (a failed `orch down`) still bills: shown.
            shown = {r.id for r in rows}
            billing = {i.job_id for i in machines if i.job_id is not None and i.job_id not in shown}
            if billing:
                rows = sorted([*rows, *(r for r in repo.list_jobs(tx, include_deleted=True) if r.id in billing)],
                              key=lambda r: r.name)
        failures = _failures(tx, rows)
        spent = repo.spend_by_job(tx)
        views: list[JobView] = []
        for r in rows:
            mine = tuple(i for i in live if i.job == r.name)
            last = command_queries.last_event(tx, r.id or 0)
            views.append(JobView(r.name, JobStatus(r.status), DesiredState(r.desired_state), mine,
                                 sum((i.charged_price_hr for i in mine if i.burning), 0.0), spent.get(r.id or 0, 0.0),
                                 r.relaunch_count, _event_view(last, names) if last else None,
                                 failures.get(r.id or 0)))
    if job is not None:
        return StatusReport(tuple(views), tuple(i for i in live if i.job == job))
    listed = {r.id for r in rows}
    return StatusReport(tuple(views), tuple(live), sum((usd for i, usd in spent.items() if i not in listed), 0.0))


def failures_by_job(tx: Session, jobs: Sequence[tuple[int, JobStatus]]) -> dict[int, Failure]:
    """The typed failure (orchestrator/engine/failure.py) of each ``(job id, status)`` for which it is still
    news (failed, or waiting after it), from the newest failure event's data."""
    from orchestrator.engine.failure import FAILURE_EVENTS, FAILURE_STATUSES, Failure
    from orchestrator.store.command_queries import last_failures

    ids = [job_id for job_id, status in jobs if status in FAILURE_STATUSES]
    found = {job_id: Failure.from_data(e.data) for job_id, e in last_failures(tx, ids, FAILURE_EVENTS).items()}
    return {job_id: f for job_id, f in found.items() if f is not None}


def _failures(tx: Session, rows: Sequence[Job]) -> dict[int, Failure]:
    from orchestrator.engine.states import JobStatus

    return failures_by_job(tx, [(r.id, JobStatus(r.status)) for r in rows if r.id is not None])


def job_failure(store: Store, name: str) -> Failure | None:
    """The named job's typed failure, where it is still news (``orch logs`` says it); None otherwise."""
    from orchestrator.store import repo

    with store.transaction() as tx:
        row = repo.get_job(tx, name)
        return _failures(tx, [row]).get(row.id or 0) if row is not None else None


def instance_view(i: InstanceRow, names: Mapping[int, str]) -> InstanceView:
    """The row typed: its state and market are the members their stored text names (ValueError otherwise)."""
    return InstanceView(names.get(i.job_id or 0), i.provider, i.instance_id, i.launch_id, i.instance_type, i.region,
                        i.typed_market, i.typed_state, float(i.price_hr or 0.0), i.actual_price_hr)


def _event_view(e: Event, names: Mapping[int, str]) -> EventView:
    # The store refuses a kind that is not a member when it writes one (orchestrator/store/history.py).
    return EventView(int(e.id or 0), e.ts, names.get(e.job_id or 0), EventKind(e.kind), e.message,
                     dict(e.data or {}), e.count, e.last_ts)


@dataclass(frozen=True, slots=True)
class EventView:
    id: int
    ts: datetime
    job: str | None
    kind: EventKind
    message: str
    data: dict[str, Any] = field(default_factory=dict)
    #: How many times this condition was seen (a waiting job's ``no-offer`` is one event, counted) and when last.
    count: int = 1
    last_ts: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "ts": self.ts.isoformat(), "job": self.job, "kind": self.kind.value,
                "message": self.message, "data": self.data, "count": self.count,
                "last_ts": (self.last_ts or self.ts).isoformat()}

    def line(self) -> str:
        again = f" (x{self.count}, last {self.last_ts or self.ts:%Y-%m-%d %H:%M:%S})" if self.count > 1 else ""
        return f"{self.ts:%Y-%m-%d %H:%M:%S} {self.job or '-':<16} {self.kind.value:<16} {self.message}{again}"


def events(store: Store, job: str | None = None, *, after_id: int | None = None,
           limit: int | None = None) -> list[EventView]:
    """The append-only event log, oldest first (all events, or one job's). Raises JobsError for an
    unknown job name."""
    from orchestrator.store import command_queries, repo

    with store.transaction() as tx:
        job_id: int | None = None
        if job is not None:
            row = repo.get_job(tx, job)
            if row is None:
                raise JobsError(no_job_named([job], command_queries.job_names(tx).values()))
            job_id = row.id
        names = command_queries.job_names(tx)
        rows = repo.list_events(tx, job_id=job_id, after_id=after_id, limit=limit)
        return [_event_view(e, names) for e in rows]


def follow(store: Store, job: str | None = None, *, after_id: int | None = None, poll_s: float = 1.0,
           max_wait_s: float | None = None, monotonic: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> Iterator[EventView]:
    """Events after ``after_id`` as they are appended, polling every ``poll_s``; ends after ``max_wait_s``
    with no new event (None: never; the caller stops it with Ctrl-C)."""
    last = after_id
    quiet_since = monotonic()
    while True:
        batch = events(store, job, after_id=last)
        for e in batch:
            last = e.id
            yield e
        if batch:
            quiet_since = monotonic()
        elif max_wait_s is not None and monotonic() - quiet_since >= max_wait_s:
            return
        sleep(poll_s)
