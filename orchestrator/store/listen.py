"""Event listeners on the store: code that must hear of events (alerts) without the writers knowing it.

Every event is written through a store transaction (the engine's ``store.event``, the repo's own job and
attempt events, the CLI's). A listener names the event kinds it wants; the store collects those events as
they are flushed and hands them over once the transaction has COMMITTED (a rolled-back event never
reaches anyone), with the job's name and provider resolved. Listeners are called on the writer's thread
and must return at once (orchestrator.daemon.alerts queues and returns); one that raises is logged and
never disturbs the writer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session as OrmSession
from sqlmodel import Session, col, select

from orchestrator.engine.events import EventKind
from orchestrator.store.models import Event, InstanceRow, Job

log = logging.getLogger("orch.store")

_KINDS = "orch.listen.kinds"
_FOUND = "orch.listen.found"


@dataclass(frozen=True, slots=True)
class CommittedEvent:
    id: int
    ts: datetime
    kind: EventKind
    job_id: int | None
    job: str | None            # the job's name
    provider: str | None       # the event's own ``provider``, else the provider of the job's newest machine
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Listeners decide on the kind (alerts): text, even a member's, is refused here, not carried on.
        if not isinstance(self.kind, EventKind):
            raise TypeError(f"CommittedEvent.kind must be an EventKind, not {self.kind!r}")


class EventListener(Protocol):
    #: The event kinds this listener is given (the rest cost it nothing).
    kinds: frozenset[EventKind]

    def __call__(self, events: Sequence[CommittedEvent]) -> None:
        """Take committed events; must return at once (queue, do not send)."""
        ...

    def close(self) -> None:
        """The store is closing: finish what is quick, give up the rest."""
        ...


@event.listens_for(OrmSession, "after_flush")
def _collect(session: OrmSession, _context: object) -> None:
    kinds = session.info.get(_KINDS)
    if not kinds:
        return
    # after_flush still lists the flushed rows as new, with their ids assigned.
    session.info[_FOUND].extend(o for o in session.new if isinstance(o, Event) and o.kind in kinds)


class EventFeed:
    """The listeners of one store, and the delivery of a committed transaction's events to them."""

    def __init__(self) -> None:
        self.listeners: list[EventListener] = []

    def kinds(self) -> frozenset[EventKind]:
        return frozenset().union(*(listener.kinds for listener in self.listeners)) if self.listeners else frozenset()

    def watch(self, session: Session) -> None:
        """Collect the wanted events this session flushes."""
        kinds = self.kinds()
        if kinds:
            session.info[_KINDS] = kinds
            session.info[_FOUND] = []

    def deliver(self, session: Session, engine: Engine) -> None:
        """After ``session`` committed: hand its collected events to the listeners."""
        found: list[Event] = session.info.pop(_FOUND, None) or []
        session.info.pop(_KINDS, None)
        if not found:
            return
        try:
            events = _resolve(found, engine)
        except Exception:  # the writer's transaction is committed: never fail it for a listener
            log.exception("could not read the jobs of committed events for their listeners")
            return
        for listener in self.listeners:
            mine = [e for e in events if e.kind in listener.kinds]
            if not mine:
                continue
            try:
                listener(mine)
            except Exception:
                log.exception("an event listener failed")

    def close(self) -> None:
        for listener in self.listeners:
            try:
                listener.close()
            except Exception:
                log.exception("closing an event listener failed")
        self.listeners.clear()


def _resolve(rows: Sequence[Event], engine: Engine) -> list[CommittedEvent]:
    job_ids = sorted({r.job_id for r in rows if r.job_id is not None})
    names: dict[int, str] = {}
    providers: dict[int, str] = {}
    if job_ids:
        with Session(engine) as s:
            names = {int(i): n for i, n in s.exec(select(Job.id, Job.name).where(col(Job.id).in_(job_ids)))}
            for job_id, provider in s.exec(select(InstanceRow.job_id, InstanceRow.provider)  # type: ignore[call-overload]
                                           .where(col(InstanceRow.job_id).in_(job_ids)).order_by(col(InstanceRow.id))):
                providers[int(job_id)] = provider     # the newest machine's, by insertion order
    out: list[CommittedEvent] = []
    for r in rows:
        data = dict(r.data or {})
        own = data.get("provider")
        provider = own if isinstance(own, str) else providers.get(r.job_id) if r.job_id is not None else None
        out.append(CommittedEvent(int(r.id or 0), r.ts, EventKind(r.kind), r.job_id,
                                  names.get(r.job_id) if r.job_id is not None else None, provider, r.message, data))
    return out
