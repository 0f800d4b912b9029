"""EngineStore on the SQL store (SQLite or PostgreSQL). Every method is its own committed transaction.

With ``lease_owner`` set (several daemons on PostgreSQL), ``begin_tick`` claims or renews row leases
(``SELECT ... FOR UPDATE SKIP LOCKED``) and the job-scoped reads return only the jobs this daemon
holds; ``all_live_launch_ids`` still spans every daemon, so nobody mistakes another's machine for an
orphan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

from sqlmodel import Session

from orchestrator.engine.jobspec import JobSpec, jobspec_from_manifest
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.stored_offers import OfferBook
from orchestrator.manifest.schema import Manifest
from orchestrator.store import queries, repo
from orchestrator.store.db import Store
from orchestrator.store.leases import claim_jobs
from orchestrator.store.models import AttemptState, DesiredState, EndCause, Job, JobStatus
from orchestrator.store.queries import AttemptColumns, SpendRow
from providers.base import Instance, Offer

T = TypeVar("T")


class SqlEngineStore:
    def __init__(self, store: Store, owner: str, *, catalog: Sequence[Offer] = (), lease_owner: str | None = None,
                 lease_ttl: timedelta = timedelta(seconds=90)) -> None:
        self.store = store
        self.owner = owner
        self.lease_owner = lease_owner
        self.lease_ttl = lease_ttl
        self._offers = OfferBook(catalog)
        #: Each job's typed manifest and what the engine derives from it, parsed once per (job, manifest hash).
        self._specs: dict[tuple[int, str], tuple[JobSpec, Manifest]] = {}
        self._leased: set[int] | None = None
        # Hot-path state (see "steady ticks" below): spend rows waiting to be written in one bulk insert, and
        # the tick's reads of jobs/attempts, valid until this store writes a job or an attempt.
        self._pending_spend: list[SpendRow] = []
        self._version = 0
        self._reads: dict[str, tuple[int, object]] = {}
        #: Each job's total spend, kept up to date by ``flush``. Only the lease holder accrues a job's spend,
        #: so a job's total is re-read whenever this store (re)gains its lease.
        self._spent: dict[int, float] = {}

    # --- leases --------------------------------------------------------------------------------------
    def begin_tick(self, now: datetime) -> None:
        self.flush()
        self._reads.clear()     # other processes may have written since the last tick
        if self.lease_owner is None:
            return
        with self.store.transaction() as tx:
            leased = {j.id for j in claim_jobs(tx, self.lease_owner, ttl=self.lease_ttl, now=now)
                      if j.id is not None}
        self._spent = {k: v for k, v in self._spent.items() if self._leased is not None and k in self._leased
                       and k in leased}
        self._leased = leased

    def _mine(self, job_id: int) -> bool:
        return self._leased is None or job_id in self._leased

    # --- reading -------------------------------------------------------------------------------------
    def _spec(self, row: Job) -> tuple[JobSpec, Manifest]:
        key = (row.id or 0, row.manifest_hash)
        found = self._specs.get(key)
        if found is None:
            manifest = Manifest.model_validate(row.manifest)
            found = self._specs[key] = (jobspec_from_manifest(manifest, row.applied_at), manifest)
        return found

    # --- steady ticks --------------------------------------------------------------------------------
    # A steady tick (nothing changes) must cost a handful of queries, not a few per instance. Two things
    # make it so: the tick's reads of jobs and live attempts are kept until this store writes a job or an
    # attempt (``_version``), and spend rows are written in one bulk insert (``flush``) before any read of
    # spend and at the start of every tick. A process killed before a flush loses no money: the next one
    # continues from ``spend_mark`` (the last STORED interval end) and accrues the lost interval again.
    def _cached(self, key: str, load: Callable[[], T]) -> T:
        hit = self._reads.get(key)
        if hit is not None and hit[0] == self._version:
            return hit[1]  # type: ignore[return-value]
        value = load()
        self._reads[key] = (self._version, value)
        return value

    def _wrote(self) -> None:
        self._version += 1

    def flush(self) -> None:
        """Write the buffered spend rows (one transaction, one bulk insert)."""
        if not self._pending_spend:
            return
        rows, self._pending_spend = self._pending_spend, []
        with self.store.transaction() as tx:
            queries.insert_spend(tx, rows)
        for row in rows:
            if row.job_id in self._spent:
                self._spent[row.job_id] += row.usd

    def _jobs(self, active: bool) -> list[JobRecord]:
        self.flush()
        with self.store.transaction() as tx:
            # Plain columns; a job's manifest is read (and parsed) only when its hash is new to this process.
            rows = [r for r in queries.job_columns(tx, active=active) if self._mine(r.id)]
            for full in queries.jobs_by_ids(tx, [r.id for r in rows if (r.id, r.manifest_hash) not in self._specs]):
                self._spec(full)
            self._spent.update(queries.spend_totals(tx, [r.id for r in rows if r.id not in self._spent]))
        out = []
        for r in rows:
            spec, manifest = self._specs[(r.id, r.manifest_hash)]
            out.append(JobRecord(id=r.id, name=r.name, manifest=manifest, spec=spec, status=JobStatus(r.status),
                                 desired_active=r.desired_state == DesiredState.ACTIVE.value,
                                 relaunch_count=r.relaunch_count, spent_usd=self._spent[r.id],
                                 created_at=r.created_at))
        return out

    def active_jobs(self) -> Sequence[JobRecord]:
        return list(self._cached("active", lambda: self._jobs(True)))

    def jobs_to_tear_down(self) -> Sequence[JobRecord]:
        live_jobs = {a.job_id for a in self.live_attempts()}
        if not live_jobs:
            return []
        return [j for j in self._cached("inactive", lambda: self._jobs(False)) if j.id in live_jobs]

    def job(self, job_id: int) -> JobRecord:
        self.flush()
        with self.store.transaction() as tx:
            row = tx.get(Job, job_id)
            if row is None:
                raise repo.NotFoundError(f"no job {job_id}")
            spent = repo.total_spend(tx, job_id)
        assert row.id is not None
        spec, manifest = self._spec(row)
        return JobRecord(id=row.id, name=row.name, manifest=manifest, spec=spec, status=JobStatus(row.status),
                         desired_active=row.desired_state == DesiredState.ACTIVE.value,
                         relaunch_count=row.relaunch_count, spent_usd=spent, created_at=row.created_at)

    def _record(self, r: AttemptColumns, offer: Offer | None = None) -> AttemptRecord:
        return AttemptRecord(id=r.id, job_id=r.job_id, launch_id=r.launch_id, state=AttemptState(r.state),
                             offer=offer or self._offers.of(r), instance_id=r.instance_id, created_at=r.created_at,
                             started_at=r.started_at, ended_at=r.ended_at, checkpoint_restored=r.checkpoint_restored,
                             reason=r.reason, node_rank=r.node_rank, generation=r.generation,
                             end_cause=EndCause(r.end_cause) if r.end_cause else None, drain_until=r.drain_until,
                             heard_at=r.heard_at, unreachable_since=r.unreachable_since)

    def _attempts(self, read: Callable[[Session], list[AttemptColumns]]) -> list[AttemptRecord]:
        with self.store.transaction() as tx:
            rows = read(tx)
        return [self._record(r) for r in rows]

    def live_attempts(self) -> Sequence[AttemptRecord]:
        def load() -> list[AttemptRecord]:
            return [a for a in self._attempts(queries.live_attempt_columns) if self._mine(a.job_id)]

        return list(self._cached("live", load))

    def draining_attempts(self, now: datetime) -> Sequence[AttemptRecord]:
        found = self._attempts(lambda tx: queries.draining_attempt_columns(tx, now))
        return [a for a in found if self._mine(a.job_id)]

    def all_live_launch_ids(self) -> set[str]:
        with self.store.transaction() as tx:
            return queries.live_launch_ids(tx)

    def attempts_for_job(self, job_id: int) -> Sequence[AttemptRecord]:
        return self._attempts(lambda tx: queries.job_attempt_columns(tx, job_id))

    def attempt_by_launch_id(self, launch_id: str) -> AttemptRecord | None:
        found = self._attempts(lambda tx: queries.attempt_columns_by_launch_ids(tx, [launch_id]))
        return found[0] if found else None

    def attempts_by_launch_ids(self, launch_ids: Sequence[str]) -> dict[str, AttemptRecord]:
        found = self._attempts(lambda tx: queries.attempt_columns_by_launch_ids(tx, launch_ids))
        return {a.launch_id: a for a in found}

    def last_checkpoint(self, job_id: int) -> str | None:
        with self.store.transaction() as tx:
            row = repo.latest_checkpoint(tx, job_id)
            return row.uri if row else None

    def spend_mark(self, attempt_id: int) -> datetime | None:
        self.flush()
        with self.store.transaction() as tx:
            return repo.last_spend_until(tx, attempt_id)

    # --- writing -------------------------------------------------------------------------------------
    def plan_attempt(self, job_id: int, offer: Offer, launch_id: str, checkpoint: str | None,
                     now: datetime, *, node_rank: int = 0, generation: int | None = None) -> AttemptRecord:
        with self.store.transaction() as tx:
            if generation is None:
                generation = (repo.latest_generation(tx, job_id) or 0) + 1
            repo.create_attempt(tx, job_id, launch_id, generation=generation, node_rank=node_rank,
                                checkpoint_restored=checkpoint, now=now)
            repo.record_instance(tx, repo.InstanceRecord(
                provider=offer.provider, launch_id=launch_id, owner=self.owner, job_id=job_id,
                instance_type=offer.instance_type, region=offer.region, zone=offer.zone, market=offer.market.value,
                price_hr=offer.price_hr, gpu=offer.gpu, gpu_count=offer.gpu_count, state="pending"), now=now)
            [row] = queries.attempt_columns_by_launch_ids(tx, [launch_id])
        self._wrote()
        return self._record(row, offer)

    def set_attempt_state(self, attempt_id: int, state: AttemptState, now: datetime, *,
                          instance: Instance | None = None, reason: str | None = None,
                          cause: EndCause | None = None, drain_until: datetime | None = None) -> None:
        with self.store.transaction() as tx:
            row = repo.transition_attempt(tx, attempt_id, state, reason=reason, cause=cause, drain_until=drain_until,
                                          now=now)
            if instance is not None:
                repo.record_instance(tx, _instance_record(instance, row.launch_id, self.owner, row.job_id), now=now)
        self._wrote()

    def set_job_status(self, job_id: int, status: JobStatus, now: datetime, *, relaunched: bool = False) -> None:
        with self.store.transaction() as tx:
            repo.set_job_status(tx, job_id, status, now=now)
            if relaunched:
                repo.count_relaunch(tx, job_id, now=now)
        self._wrote()

    def add_spend(self, job_id: int, attempt_id: int, usd: float, since: datetime, until: datetime) -> None:
        """Buffered (see "steady ticks"): written by the next ``flush``, before any read of spend."""
        if until < since or usd < 0:
            raise ValueError("spend must be a non-negative amount over a forward interval")
        self._pending_spend.append(SpendRow(job_id, attempt_id, since, until, usd))

    def record_checkpoint(self, job_id: int, attempt_id: int, uri: str, step: int | None, at: datetime) -> None:
        with self.store.transaction() as tx:
            if not queries.checkpoint_recorded(tx, job_id, uri):
                repo.record_checkpoint(tx, job_id, uri, attempt_id=attempt_id, step=step, committed_at=at)

    def note_liveness(self, attempt_id: int, *, heard_at: datetime | None,
                      unreachable_since: datetime | None) -> None:
        with self.store.transaction() as tx:
            queries.set_liveness(tx, attempt_id, heard_at, unreachable_since)
        self._wrote()

    def event(self, kind: str, message: str, now: datetime, *, job_id: int | None = None,
              data: dict[str, object] | None = None) -> None:
        with self.store.transaction() as tx:
            repo.record_event(tx, kind, message, job_id=job_id, data=dict(data or {}), ts=now)

    def observe_instances(self, provider: str, instances: Sequence[Instance], now: datetime) -> None:
        listed = {i.launch_id: i for i in instances if i.launch_id}
        changed = False
        with self.store.transaction() as tx:
            for row in queries.unended_instance_columns(tx, provider):
                inst = listed.get(row.launch_id)
                if inst is None:
                    if row.instance_id is not None:     # the cloud answered once and no longer lists it
                        repo.mark_instance_gone(tx, row.launch_id, "terminated", "not listed", now=now)
                        changed = True
                    continue
                if (row.state, row.raw_state, row.public_ip) != (inst.state.value, inst.raw_state or None,
                                                                 inst.public_ip):
                    repo.record_instance(tx, _instance_record(inst, row.launch_id, self.owner, row.job_id), now=now)
                    changed = True
        if changed:
            self._wrote()


def _instance_record(inst: Instance, launch_id: str, owner: str, job_id: int | None) -> repo.InstanceRecord:
    return repo.InstanceRecord(
        provider=inst.provider, launch_id=launch_id, owner=owner, job_id=job_id, instance_id=inst.instance_id,
        state=inst.state.value, raw_state=inst.raw_state or None, public_ip=inst.public_ip, ssh_port=inst.ssh_port,
        ssh_user=inst.ssh_user, host_keys=inst.host_keys or None)
