"""EngineStore on the SQL store (SQLite or PostgreSQL). Every method is its own committed transaction.

With ``lease_owner`` set (several daemons on PostgreSQL), ``begin_tick`` renews this daemon's registration
and takes its share of the jobs (orchestrator/store/fleet.py); the job-scoped reads return only the jobs it
holds, and every write runs the fence in its own transaction (``LeaseLostError`` when this daemon no
longer holds the job at the generation it claimed). ``all_live_launch_ids`` still spans every daemon, so
nobody mistakes another's machine for an orphan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from sqlmodel import Session

from orchestrator.clock import utcnow
from orchestrator.engine.events import EventKind
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, DesiredState, EndCause, JobStatus
from orchestrator.money.spend import reported_price_hr
from orchestrator.store import change_tokens, queries, repo
from orchestrator.store import sqlstore_reads as reads
from orchestrator.store.changes import Counted
from orchestrator.store.db import Store
from orchestrator.store.fleet import Holding, LeaseLostError, lock_unheld
from orchestrator.store.fleet_member import FleetMember
from orchestrator.store.models import Attempt, Job
from orchestrator.store.specs import SpecCache
from orchestrator.store.spend_ledger import SpendCharge
from orchestrator.store.sqlstore_attempts import AttemptReads
from orchestrator.store.sqlstore_reads import Kept, KeptReads, ReadKey
from orchestrator.store.sqlstore_side import SideTables, write_attempt
from orchestrator.store.sqlstore_spend import RowKey, SpendBuffer
from orchestrator.store.stored_offers import OfferBook
from providers.base import Instance, InstanceState, Offer


class SqlEngineStore(SpendBuffer, AttemptReads, KeptReads, SideTables):
    def __init__(self, store: Store, owner: str, *, catalog: Sequence[Offer] = (), lease_owner: str | None = None,
                 lease_ttl: timedelta = timedelta(seconds=90), clock: Callable[[], datetime] = utcnow) -> None:
        self.store = store
        self.owner = owner
        self.lease_owner = lease_owner
        self.lease_ttl = lease_ttl
        #: This daemon's leases (None: the only daemon, on SQLite or a one-shot CLI engine).
        self.fleet = FleetMember(lease_owner, lease_ttl, clock) if lease_owner is not None else None
        self._leased_to = lease_owner     # the job-scoped reads' filter
        self._offers = OfferBook(catalog)
        #: Each job's typed manifest and what the engine derives from it, parsed once per (job, manifest hash).
        self._specs = SpecCache()
        # Hot-path state (see "steady ticks" below): spend rows waiting to be written in one bulk insert, and
        # the tick's reads of jobs/attempts, valid until this store writes a job or an attempt.
        self._pending: dict[RowKey, SpendCharge] = {}
        self._due: set[int] = set()
        self._touched: set[RowKey] = set()
        self._settle: Callable[[], None] | None = None
        self._latest: dict[int, RowKey] = {}
        #: Attempts' spend marks (up to when their spend is stored), read ahead in chunks (a restart asks for
        #: every live attempt's) and kept while this store holds the attempt's job (only the holder accrues).
        self._marks: dict[int, datetime | None] = {}
        self._version = 0
        self._reads: dict[ReadKey, Kept] = {}
        #: Each job's total spend, kept up to date by ``add_spend``. Only the lease holder accrues a job's spend,
        #: so a job's total is re-read whenever this store (re)gains its lease.
        self._spent: dict[int, float] = {}
        self._moved: set[int] = set()
        self._claimed_at = -1       # this store's write count at the last claim (see ``begin_tick``)
        #: Per provider: the kept instance rows and the listing they last agreed with (nothing to write).
        self._agreed: dict[str, tuple[object, list[Instance]]] = {}
        #: PostgreSQL: every daemon's live launch ids, and the live attempts' token they were read under.
        self._live_ids: tuple[object, set[str]] | None = None
        #: PostgreSQL: the change tokens above, kept while the server's count of writers says nobody wrote.
        self._counted = Counted()

    # --- leases --------------------------------------------------------------------------------------
    def begin_tick(self, now: datetime) -> Holding | None:
        try:
            self.flush_due()
        except LeaseLostError:      # accrued under a lapsed lease: the holder charges it from the stored mark
            self.drop_buffer()
        if self.fleet is None:
            self.keep_unchanged_reads()     # other processes may have written since the last tick
            return None
        before = dict(self.fleet.holding.jobs) if self.fleet.holding else {}
        holding = self.fleet.begin(self.store, now, attempts_unchanged=self._claimed_at == self._version)
        self._claimed_at = self._version
        # Jobs change from outside (orch apply, down, the console): kept while their rows are unchanged. A held
        # job's attempts, instance rows, spend marks and totals are written only by its holder (the fence):
        # kept while it holds the same.
        if before != holding.jobs:
            self._spent = {k: v for k, v in self._spent.items() if k in before and holding.jobs.get(k) == before[k]}
            self._reads.clear()
            self._marks.clear()
        self.keep_unchanged_reads(held=frozenset({reads.Read.LIVE_ATTEMPTS, reads.Read.DRAINING,
                                                  reads.Read.INSTANCES}))
        return holding

    def join(self, now: datetime) -> None:
        if self.fleet is not None:
            with self.store.transaction() as tx:
                self.fleet.join(tx, now)

    def _mine(self, job_id: int) -> bool:
        return self.fleet is None or self.fleet.holds(job_id)

    def _unheld(self, tx: Session, job_ids: list[int]) -> list[int]:
        if self.fleet is None:
            return job_ids          # one daemon holds every job (``_mine``): never asked
        return lock_unheld(tx, job_ids)

    def _fence(self, tx: Session, job_id: int | None) -> None:
        """Within ``tx``: this daemon still holds ``job_id`` (None: is still a live member of the fleet)."""
        if self.fleet is not None:
            self.fleet.daemon(tx) if job_id is None else self.fleet.job(tx, job_id)

    # --- steady ticks --------------------------------------------------------------------------------
    # A steady tick (nothing changes) must cost a handful of queries, not a few per instance. Two things
    # make it so: the reads of jobs and live attempts are kept until they may be stale
    # (orchestrator/store/sqlstore_reads.py), and charges are buffered, folded per ledger row, and written
    # a slice at a time (orchestrator/store/sqlstore_spend.py says when; all of them before a read of spend).
    def _jobs(self, tx: Session, active: bool) -> list[JobRecord]:
        # Plain columns; a job's manifest is read (and parsed) only when its hash is new to this process.
        rows = [r for r in queries.job_columns(tx, active=active, lease_owner=self._leased_to) if self._mine(r.id)]
        self._specs.load(tx, [(r.id, r.manifest_hash) for r in rows])
        unknown = [r.id for r in rows if r.id not in self._spent]
        stored = queries.spend_totals(tx, unknown)
        if unknown:     # the stored total and what is buffered
            buffered = self.pending_spend(set(unknown))
            self._spent.update({j: usd + buffered.get(j, 0.0) for j, usd in stored.items()})
        out = []
        for r in rows:
            spec, manifest = self._specs[(r.id, r.manifest_hash)]
            out.append(JobRecord(id=r.id, name=r.name, manifest=manifest, spec=spec, status=JobStatus(r.status),
                                 desired_active=r.desired_state == DesiredState.ACTIVE.value,
                                 relaunch_count=r.relaunch_count, spent_usd=self._spent[r.id],
                                 created_at=r.created_at))
        return out

    def active_jobs(self) -> Sequence[JobRecord]:
        return list(self._cached(reads.ACTIVE_JOBS, lambda tx: self._jobs(tx, True)))

    def jobs_to_tear_down(self) -> Sequence[JobRecord]:
        live_jobs = {a.job_id for a in self.live_attempts()}
        if not live_jobs:
            return []
        return [j for j in self._cached(reads.INACTIVE_JOBS, lambda tx: self._jobs(tx, False)) if j.id in live_jobs]

    def job(self, job_id: int) -> JobRecord:
        self.flush()
        with self.store.transaction() as tx:
            row = tx.get(Job, job_id)
            if row is None:
                raise repo.NotFoundError(f"no job {job_id}")
            spent = repo.total_spend(tx, job_id)
        assert row.id is not None
        spec, manifest = self._specs.of(row.id, row.manifest_hash, row.manifest, row.applied_at)
        return JobRecord(id=row.id, name=row.name, manifest=manifest, spec=spec, status=JobStatus(row.status),
                         desired_active=row.desired_state == DesiredState.ACTIVE.value,
                         relaunch_count=row.relaunch_count, spent_usd=spent, created_at=row.created_at)

    def last_checkpoint(self, job_id: int) -> str | None:
        with self.store.transaction() as tx:
            row = repo.latest_checkpoint(tx, job_id)
            return row.uri if row else None

    # --- writing -------------------------------------------------------------------------------------
    def plan_attempt(self, job_id: int, offer: Offer, launch_id: str, checkpoint: str | None,
                     now: datetime, *, node_rank: int = 0, generation: int | None = None) -> AttemptRecord:
        with self.store.transaction() as tx:
            self._fence(tx, job_id)
            row = write_attempt(tx, self.owner, job_id, offer, launch_id, checkpoint, now, node_rank, generation)
        self._wrote()
        return self._record(row, offer)

    def set_attempt_state(self, attempt_id: int, state: AttemptState, now: datetime, *,
                          instance: Instance | None = None, reason: str | None = None,
                          cause: EndCause | None = None, drain_until: datetime | None = None) -> None:
        with self.store.transaction() as tx:
            # The fence first: a daemon resumed past its lease learns that it lost the job (LeaseLostError), not
            # that the new holder moved the attempt on meanwhile (InvalidTransitionError).
            found = tx.get(Attempt, attempt_id)
            if found is not None:
                self._fence(tx, found.job_id)
            row = repo.transition_attempt(tx, attempt_id, state, reason=reason, cause=cause, drain_until=drain_until,
                                          now=now)
            if instance is not None:
                repo.record_instance(tx, _instance_record(instance, row.launch_id, self.owner, row.job_id), now=now)
        if state.is_final:
            self.attempt_ended(attempt_id)
        self._wrote()

    def set_job_status(self, job_id: int, status: JobStatus, now: datetime, *, relaunched: bool = False) -> None:
        with self.store.transaction() as tx:
            self._fence(tx, job_id)
            repo.set_job_status(tx, job_id, status, now=now)
            if relaunched:
                repo.count_relaunch(tx, job_id, now=now)
        self._wrote()

    def record_checkpoint(self, job_id: int, attempt_id: int, uri: str, step: int | None, at: datetime) -> None:
        with self.store.transaction() as tx:
            self._fence(tx, job_id)
            if not queries.checkpoint_recorded(tx, job_id, uri):
                repo.record_checkpoint(tx, job_id, uri, attempt_id=attempt_id, step=step, committed_at=at)

    def note_liveness(self, attempt_id: int, *, heard_at: datetime | None, unreachable_since: datetime | None,
                      heard_beat: datetime | None = None) -> None:
        with self.store.transaction() as tx:
            self._fence(tx, None)
            queries.set_liveness(tx, attempt_id, heard_at, unreachable_since, heard_beat)
        self._wrote()

    def event(self, kind: EventKind, message: str, now: datetime, *, job_id: int | None = None,
              data: dict[str, object] | None = None) -> None:
        with self.store.transaction() as tx:
            self._fence(tx, job_id)
            repo.record_event(tx, kind, message, job_id=job_id, data=dict(data or {}), ts=now)

    def use_catalog(self, offers: Sequence[Offer]) -> None:
        """The daemon's catalog refresh: attempts' offers come from the fresh rows (the tick's reads are dropped)."""
        self._offers = OfferBook(offers)
        self._reads.clear()

    def observe_instances(self, provider: str, instances: Sequence[Instance], now: datetime) -> None:
        key = ReadKey(reads.Read.INSTANCES, provider)
        rows = self._cached(key, lambda tx: queries.unended_instance_columns(tx, provider, self._leased_to))
        agreed = self._agreed.get(provider)
        if agreed is not None and agreed[0] is rows and agreed[1] == instances:
            return      # the same kept rows and an equal listing (same machines: cheap) agreed last time
        listed = {i.launch_id: i for i in instances if i.launch_id}
        changed: list[repo.InstanceRecord] = []
        gone: list[str] = []        # launch ids the cloud answered for once and no longer lists
        for row in rows:
            inst = listed.get(row.launch_id)
            if inst is None:
                if row.instance_id is not None:
                    gone.append(row.launch_id)
                continue
            price = reported_price_hr(inst.price_hr)
            reported = row.actual_price_hr if price is None else price
            if (row.state, row.raw_state, row.public_ip, row.actual_price_hr) != (
                    inst.state.value, inst.raw_state or None, inst.public_ip, reported):
                changed.append(_instance_record(inst, row.launch_id, self.owner, row.job_id))
        if not (changed or gone):
            self._agreed[provider] = (rows, list(instances))
            return
        self._agreed.pop(provider, None)
        with self.store.transaction() as tx:
            self._fence(tx, None)
            before = change_tokens.change_token(tx)
            for launch_id in gone:
                repo.mark_instance_gone(tx, launch_id, InstanceState.TERMINATED, "not listed", now=now)
            tx.flush()
            repo.update_instances(tx, changed, now=now)     # one statement (a first tick records every price)
            after = change_tokens.change_token(tx)
        self._reads.pop(key, None)
        if gone:
            self._wrote()
            return
        self.wrote_aside(before, after)     # instance columns only: the other reads stay; the attempts' read
        self.patch_live({r.launch_id: r for r in changed})    # carries two of them: patched as written


def _instance_record(inst: Instance, launch_id: str, owner: str, job_id: int | None) -> repo.InstanceRecord:
    return repo.InstanceRecord(
        provider=inst.provider, launch_id=launch_id, owner=owner, job_id=job_id, instance_id=inst.instance_id,
        state=inst.state, raw_state=inst.raw_state or None, public_ip=inst.public_ip, ssh_port=inst.ssh_port,
        ssh_user=inst.ssh_user, host_keys=inst.host_keys or None, actual_price_hr=reported_price_hr(inst.price_hr))
