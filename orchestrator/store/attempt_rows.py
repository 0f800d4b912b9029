"""The attempts' rows: one per machine per launch of a job (a generation), moved along their state machine.

Gathered into ``repo``'s namespace with the jobs, machines and history (store/repo.py); each operation takes the
Session of the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func
from sqlmodel import Session, col, select

from orchestrator.clock import utcnow
from orchestrator.engine.events import EventKind
from orchestrator.engine.states import ATTEMPT_TRANSITIONS, AttemptState, EndCause
from orchestrator.redaction import safe_line
from orchestrator.store.history import append_event
from orchestrator.store.models import Attempt
from orchestrator.store.row_errors import InvalidTransitionError, NotFoundError


def create_attempt(tx: Session, job_id: int, launch_id: str, *, generation: int = 0, node_rank: int = 0,
                   checkpoint_restored: str | None = None, now: datetime | None = None) -> Attempt:
    now = now or utcnow()
    attempt = Attempt(job_id=job_id, launch_id=launch_id, generation=generation, node_rank=node_rank,
                      checkpoint_restored=checkpoint_restored, created_at=now, updated_at=now)
    tx.add(attempt)
    tx.flush()
    return attempt


def get_attempt(tx: Session, attempt_id: int) -> Attempt | None:
    return tx.get(Attempt, attempt_id)


def get_attempt_by_launch_id(tx: Session, launch_id: str) -> Attempt | None:
    return tx.exec(select(Attempt).where(Attempt.launch_id == launch_id)).first()


def list_attempts(tx: Session, job_id: int, *, generation: int | None = None,
                  states: Sequence[AttemptState] | None = None) -> list[Attempt]:
    query = select(Attempt).where(Attempt.job_id == job_id)
    if generation is not None:
        query = query.where(Attempt.generation == generation)
    if states is not None:
        query = query.where(col(Attempt.state).in_([s.value for s in states]))
    return list(tx.exec(query.order_by(col(Attempt.generation), col(Attempt.node_rank))))


def latest_generation(tx: Session, job_id: int) -> int | None:
    return tx.exec(select(func.max(Attempt.generation)).where(Attempt.job_id == job_id)).first()


def transition_attempt(tx: Session, attempt: Attempt | int, to: AttemptState, *, reason: str | None = None,
                       cause: EndCause | None = None, drain_until: datetime | None = None,
                       exit_code: int | None = None, now: datetime | None = None) -> Attempt:
    """Move an attempt along its state machine (engine.states.ATTEMPT_TRANSITIONS); same state is a no-op.

    Sets ``started_at`` on reaching running and ``ended_at`` on reaching an end state. ``cause`` and
    ``drain_until``, when given, are kept (a later step that gives none leaves them as they are).
    Raises InvalidTransitionError for a step backwards or out of an end state.
    """
    now = now or utcnow()
    row = tx.get(Attempt, attempt if isinstance(attempt, int) else attempt.id)
    if row is None:
        raise NotFoundError(f"no attempt {attempt!r}")
    current = AttemptState(row.state)
    if current is to:
        return row
    if to not in ATTEMPT_TRANSITIONS[current]:
        raise InvalidTransitionError(f"attempt {row.launch_id}: cannot go from {current.value} to {to.value}")
    row.state = to.value
    row.updated_at = now
    if to is AttemptState.RUNNING and row.started_at is None:
        row.started_at = now
    if to.is_final:
        row.ended_at = now
    if reason is not None:
        row.reason = safe_line(reason, 4000)
    if cause is not None:
        row.end_cause = cause.value
    if drain_until is not None:
        row.drain_until = drain_until
    if exit_code is not None:
        row.exit_code = exit_code
    tx.add(row)
    append_event(tx, EventKind.ATTEMPT_STATE, f"attempt {row.launch_id}: {current.value} -> {to.value}"
           + (f" ({reason})" if reason else ""), row.job_id,
           {"launch_id": row.launch_id, "from": current.value, "to": to.value, "reason": reason,
            "cause": row.end_cause, "exit_code": exit_code}, now)
    return row
