"""``orch down``: jobs marked for teardown, then the engine (or a running daemon) ticked until their machines
are confirmed gone."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from orchestrator.app.errors import JobsError, no_job_named
from orchestrator.app.status import InstanceView, instance_view
from orchestrator.clock import utcnow

if TYPE_CHECKING:
    from orchestrator.app.launching import Engine
    from orchestrator.store import Store


def mark_down(store: Store, names: Sequence[str] = (), *, everything: bool = False,
              now: datetime | None = None) -> list[str]:
    """Mark jobs for teardown (desired state DELETED) in one transaction; return their names. ``everything``:
    every job not deleted, and every deleted job whose machines are not confirmed gone.

    Raises JobsError when a named job does not exist or nothing matches."""
    from orchestrator.engine.states import DesiredState
    from orchestrator.store import command_queries, repo

    now = now or utcnow()
    with store.transaction() as tx:
        if everything:
            # Every job not deleted, and every deleted one whose machines are not confirmed gone (an earlier
            # down that failed): --all must not leave a billing machine behind as "no jobs to tear down".
            rows = repo.list_jobs(tx, include_deleted=True)
            deleted = [j.id for j in rows if j.desired_state == DesiredState.DELETED.value and j.id is not None]
            unfinished = ({i.job_id for i in command_queries.machine_rows(tx, deleted)}
                          | {a.job_id for a in command_queries.live_attempts_of(tx, deleted)}) if deleted else set()
            targets = [j.name for j in rows
                       if j.desired_state != DesiredState.DELETED.value or j.id in unfinished]
        else:
            missing = [n for n in names if repo.get_job(tx, n) is None]
            if missing:
                raise JobsError(no_job_named(missing, command_queries.job_names(tx).values()))
            targets = list(dict.fromkeys(names))
        for name in targets:
            repo.set_desired_state(tx, name, DesiredState.DELETED, now=now)
    return targets


@dataclass
class DownOutcome:
    jobs: list[str]
    remaining: list[InstanceView]
    errors: list[str] = field(default_factory=list)
    #: The wait ran out its timeout (False: it ended early, as when only machines orch cannot end remain).
    timed_out: bool = False
    #: Seconds the wait took: past the timeout when a tick itself was slow (a cloud's retries, not cut short).
    waited_s: float = 0.0

    @property
    def confirmed(self) -> bool:
        return not self.remaining


def live_machines(store: Store, jobs: Sequence[str]) -> list[InstanceView]:
    """Machines of these jobs the store still believes may exist: a live attempt, or a live instance row."""
    from orchestrator.engine.states import AttemptState
    from orchestrator.store import command_queries

    with store.transaction() as tx:
        ids = command_queries.jobs_named(tx, jobs)
        if not ids:
            return []
        rows = command_queries.machine_rows(tx, list(ids))
        live_attempts = command_queries.live_attempts_of(tx, list(ids))
    out = [instance_view(r, ids) for r in rows]
    known = {v.launch_id for v in out}
    for a in live_attempts:
        if a.launch_id not in known:    # no machine row: the cloud has not answered; the attempt says where it is
            out.append(InstanceView(ids.get(a.job_id), "?", None, a.launch_id, "", "", None, None, 0.0,
                                    attempt_state=AttemptState(a.state)))
    return out


def unmanaged_error(machine: InstanceView) -> str:
    """Why orch cannot end ``machine``: its provider is not in orch's config, so no tick calls that cloud."""
    p = machine.provider
    return (f"{p} {machine.instance_id or machine.launch_id}: {p} is not configured in orch's config, so orch "
            f"cannot terminate it (it may still bill): add providers.{p} back (`orch providers` shows how), "
            f"or terminate it in {p}'s own console")


def wait_down(engine: Engine | None, store: Store, jobs: Sequence[str], *, timeout_s: float = 300.0,
              poll_s: float = 1.0, on_tick: Callable[[list[InstanceView]], None] | None = None,
              on_error: Callable[[str], None] | None = None, configured: Collection[str] | None = None,
              monotonic: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
              ) -> DownOutcome:
    """Tick the engine (or, with ``engine=None``, let a running daemon work) until every machine of
    ``jobs`` is confirmed gone by its provider, or ``timeout_s`` passes. Each distinct error is kept once
    (a refused key fails every tick alike) and handed to ``on_error`` when first met.

    ``configured``: the providers the engine was built with. A machine on any other provider can never be
    ended by these ticks (the engine skips a cloud it has no client for, silently): each is an error at
    once, and once only such machines remain the wait ends instead of running out the clock."""
    started = monotonic()
    deadline = started + timeout_s
    outcome = DownOutcome(list(jobs), live_machines(store, jobs))
    ctx: AbstractContextManager[None] = engine.lock if engine is not None else nullcontext()
    with ctx:
        while True:
            if engine is not None:
                report = engine.tick()
                for error in report.errors:
                    if error not in outcome.errors:
                        outcome.errors.append(error)
                        if on_error:
                            on_error(error)
            outcome.remaining = live_machines(store, jobs)
            # "?": a live attempt with no instance row yet, whose provider this view does not know.
            stranded = [] if configured is None else [
                m for m in outcome.remaining if m.provider != "?" and m.provider not in configured]
            for machine in stranded:
                error = unmanaged_error(machine)
                if error not in outcome.errors:
                    outcome.errors.append(error)
                    if on_error:
                        on_error(error)
            if on_tick:
                on_tick(outcome.remaining)
            now = monotonic()
            outcome.waited_s = now - started
            if len(stranded) == len(outcome.remaining):
                return outcome
            if now >= deadline:
                outcome.timed_out = True
                return outcome
            sleep(poll_s)
