"""EngineStore on the SQL store (SQLite or PostgreSQL). Every method is its own committed transaction.

With ``lease_owner`` set (several daemons on PostgreSQL), ``begin_tick`` claims or renews row leases
(``SELECT ... FOR UPDATE SKIP LOCKED``) and the job-scoped reads return only the jobs this daemon
holds; ``all_live_launch_ids`` still spans every daemon, so nobody mistakes another's machine for an
orphan.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import func
from sqlmodel import col, select

from orchestrator.engine.jobspec import JobSpec, jobspec_from_manifest
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.manifest.schema import Manifest
from orchestrator.store import repo
from orchestrator.store.db import Store
from orchestrator.store.leases import claim_jobs
from orchestrator.store.models import (
    FINAL_ATTEMPT_STATES,
    GONE_INSTANCE_STATE_VALUES,
    Attempt,
    AttemptState,
    CheckpointRow,
    DesiredState,
    EndCause,
    InstanceRow,
    Job,
    JobStatus,
    Spend,
)
from providers.base import Instance, Market, Offer
from providers.gpus import Interconnect, gpu_by_name

_LIVE_STATES = [s.value for s in AttemptState if s not in FINAL_ATTEMPT_STATES]


class SqlEngineStore:
    def __init__(self, store: Store, owner: str, *, catalog: Sequence[Offer] = (), lease_owner: str | None = None,
                 lease_ttl: timedelta = timedelta(seconds=90)) -> None:
        self.store = store
        self.owner = owner
        self.lease_owner = lease_owner
        self.lease_ttl = lease_ttl
        self._catalog = {o.key: o for o in catalog}
        #: Each job's typed manifest and what the engine derives from it, parsed once per (job, manifest hash).
        self._specs: dict[tuple[int, str], tuple[JobSpec, Manifest]] = {}
        self._leased: set[int] | None = None
        # Hot-path state (see "steady ticks" below): spend rows waiting to be written in one bulk insert, and
        # the tick's reads of jobs/attempts, valid until this store writes a job or an attempt.
        self._pending_spend: list[dict[str, object]] = []
        self._version = 0
        self._reads: dict[str, tuple[int, object]] = {}
        #: Each job's total spend, kept up to date by ``flush``. Only the lease holder accrues a job's spend,
        #: so a job's total is re-read whenever this store (re)gains its lease.
        self._spent: dict[int, float] = {}
        self._built_offers: dict[tuple[object, ...], Offer] = {}

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

    def _record(self, row: Job, spent: float) -> JobRecord:
        assert row.id is not None
        spec, manifest = self._spec(row)
        return JobRecord(id=row.id, name=row.name, manifest=manifest, spec=spec, status=JobStatus(row.status),
                         desired_active=row.desired_state == DesiredState.ACTIVE.value,
                         relaunch_count=row.relaunch_count, spent_usd=spent, created_at=row.created_at)

    # --- steady ticks --------------------------------------------------------------------------------
    # A steady tick (nothing changes) must cost a handful of queries, not a few per instance. Two things
    # make it so: the tick's reads of jobs and live attempts are kept until this store writes a job or an
    # attempt (``_version``), and spend rows are written in one bulk insert (``flush``) before any read of
    # spend and at the start of every tick. A process killed before a flush loses no money: the next one
    # continues from ``spend_mark`` (the last STORED interval end) and accrues the lost interval again.
    def _cached(self, key: str, load):  # type: ignore[no-untyped-def]
        hit = self._reads.get(key)
        if hit is not None and hit[0] == self._version:
            return hit[1]
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
        from sqlalchemy import insert

        with self.store.transaction() as tx:
            tx.execute(insert(Spend), rows)
        for row in rows:
            job_id = int(row["job_id"])  # type: ignore[call-overload]
            if job_id in self._spent:
                self._spent[job_id] += float(row["usd"])  # type: ignore[arg-type]

    def _jobs(self, where_active: bool) -> list[JobRecord]:
        self.flush()
        with self.store.transaction() as tx:
            # Plain columns; a job's manifest is read (and parsed) only when its hash is new to this process.
            q = select(Job.id, Job.name, Job.manifest_hash, Job.status, Job.desired_state,  # type: ignore[call-overload]
                       Job.relaunch_count, Job.created_at)
            q = (q.where(Job.desired_state == DesiredState.ACTIVE.value) if where_active
                 else q.where(Job.desired_state != DesiredState.ACTIVE.value))
            rows = [r for r in tx.exec(q.order_by(col(Job.id))).all() if self._mine(r[0])]
            missing = [r[0] for r in rows if (r[0], r[2]) not in self._specs]
            for i in range(0, len(missing), 500):
                for full in tx.exec(select(Job).where(col(Job.id).in_(missing[i:i + 500]))):
                    self._spec(full)
            unknown = [r[0] for r in rows if r[0] not in self._spent]
            for i in range(0, len(unknown), 500):
                chunk = unknown[i:i + 500]
                sums = dict(tx.exec(select(Spend.job_id, func.sum(Spend.usd))  # type: ignore[call-overload]
                                    .where(col(Spend.job_id).in_(chunk)).group_by(col(Spend.job_id))).all())
                for job_id in chunk:
                    self._spent[job_id] = float(sums.get(job_id) or 0.0)
        out = []
        for job_id, name, manifest_hash, status, desired, relaunches, created in rows:
            spec, manifest = self._specs[(job_id, manifest_hash)]
            out.append(JobRecord(id=job_id, name=name, manifest=manifest, spec=spec, status=JobStatus(status),
                                 desired_active=desired == DesiredState.ACTIVE.value, relaunch_count=relaunches,
                                 spent_usd=self._spent[job_id], created_at=created))
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
        return self._record(row, spent)

    def _offer(self, inst: InstanceRow) -> Offer:
        return self._offer_of(inst.provider, inst.instance_type, inst.region, inst.zone, inst.market, inst.gpu,
                              inst.gpu_count, inst.price_hr, inst.created_at)

    def _offer_of(self, provider: str, instance_type: str, region: str, zone: str | None, market_s: str, gpu: str,
                  gpu_count: int, price_hr: float, created_at: datetime) -> Offer:
        market = Market(market_s)
        known = self._catalog.get((provider, instance_type, region, zone, market))
        if known is not None:
            return known
        key = (provider, instance_type, region, zone, market_s, gpu, gpu_count, price_hr)
        cached = self._built_offers.get(key)
        if cached is not None:
            return cached
        try:
            model = gpu_by_name(gpu)
            vram, link = float(model.vram_gb), model.default_interconnect
        except KeyError:
            vram, link = 0.0, Interconnect.PCIE
        offer = Offer(provider, instance_type, region, zone, gpu, max(gpu_count, 1), vram, 0.0, 0.0, link, market,
                      price_hr, created_at.date(), True, "store")
        self._built_offers[key] = offer
        return offer

    def _attempts(self, q: object) -> list[AttemptRecord]:
        # Plain columns, not ORM rows (the live attempts are read every tick, one per instance).
        with self.store.transaction() as tx:
            rows = tx.exec(q).all()  # type: ignore[call-overload]
        return [AttemptRecord(id=r[0], job_id=r[1], launch_id=r[2], state=AttemptState(r[3]),
                              offer=self._offer_of(*r[11:20]), instance_id=r[10], created_at=r[4], started_at=r[5],
                              ended_at=r[6], checkpoint_restored=r[7], reason=r[8], node_rank=r[9],
                              generation=r[20], end_cause=EndCause(r[21]) if r[21] else None, drain_until=r[22])
                for r in rows]

    def _attempt(self, a: Attempt, inst: InstanceRow) -> AttemptRecord:
        assert a.id is not None
        return AttemptRecord(id=a.id, job_id=a.job_id, launch_id=a.launch_id, state=AttemptState(a.state),
                             offer=self._offer(inst), instance_id=inst.instance_id, created_at=a.created_at,
                             started_at=a.started_at, ended_at=a.ended_at, checkpoint_restored=a.checkpoint_restored,
                             reason=a.reason, node_rank=a.node_rank, generation=a.generation,
                             end_cause=EndCause(a.end_cause) if a.end_cause else None, drain_until=a.drain_until)

    def _joined(self):  # type: ignore[no-untyped-def]
        return (select(Attempt.id, Attempt.job_id, Attempt.launch_id, Attempt.state,  # type: ignore[call-overload]
                       Attempt.created_at, Attempt.started_at, Attempt.ended_at, Attempt.checkpoint_restored,
                       Attempt.reason, Attempt.node_rank, InstanceRow.instance_id,
                       InstanceRow.provider, InstanceRow.instance_type, InstanceRow.region, InstanceRow.zone,
                       InstanceRow.market, InstanceRow.gpu, InstanceRow.gpu_count, InstanceRow.price_hr,
                       InstanceRow.created_at, Attempt.generation, Attempt.end_cause, Attempt.drain_until)
                .join(InstanceRow, InstanceRow.launch_id == Attempt.launch_id))

    def live_attempts(self) -> Sequence[AttemptRecord]:
        def load() -> list[AttemptRecord]:
            found = self._attempts(self._joined().where(col(Attempt.state).in_(_LIVE_STATES))
                                   .order_by(col(Attempt.id)))
            return [a for a in found if self._mine(a.job_id)]

        return list(self._cached("live", load))

    def draining_attempts(self, now: datetime) -> Sequence[AttemptRecord]:
        found = self._attempts(self._joined().where(col(Attempt.drain_until) > now).order_by(col(Attempt.id)))
        return [a for a in found if self._mine(a.job_id)]

    def all_live_launch_ids(self) -> set[str]:
        with self.store.transaction() as tx:
            return set(tx.exec(select(Attempt.launch_id).where(col(Attempt.state).in_(_LIVE_STATES))))

    def attempts_for_job(self, job_id: int) -> Sequence[AttemptRecord]:
        return self._attempts(self._joined().where(Attempt.job_id == job_id).order_by(col(Attempt.id)))

    def attempt_by_launch_id(self, launch_id: str) -> AttemptRecord | None:
        found = self._attempts(self._joined().where(Attempt.launch_id == launch_id))
        return found[0] if found else None

    def attempts_by_launch_ids(self, launch_ids: Sequence[str]) -> dict[str, AttemptRecord]:
        out: dict[str, AttemptRecord] = {}
        ids = list(dict.fromkeys(launch_ids))
        for i in range(0, len(ids), 500):
            for a in self._attempts(self._joined().where(col(Attempt.launch_id).in_(ids[i:i + 500]))):
                out[a.launch_id] = a
        return out

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
            a = repo.create_attempt(tx, job_id, launch_id, generation=generation, node_rank=node_rank,
                                    checkpoint_restored=checkpoint, now=now)
            inst = repo.record_instance(tx, repo.InstanceRecord(
                provider=offer.provider, launch_id=launch_id, owner=self.owner, job_id=job_id,
                instance_type=offer.instance_type, region=offer.region, zone=offer.zone, market=offer.market.value,
                price_hr=offer.price_hr, gpu=offer.gpu, gpu_count=offer.gpu_count, state="pending"), now=now)
            record = self._attempt(a, inst)
        self._wrote()
        return AttemptRecord(**{**{f: getattr(record, f) for f in record.__dataclass_fields__}, "offer": offer})

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
        self._pending_spend.append({"job_id": job_id, "attempt_id": attempt_id, "from_ts": since, "to_ts": until,
                                    "usd": usd})

    def record_checkpoint(self, job_id: int, attempt_id: int, uri: str, step: int | None, at: datetime) -> None:
        with self.store.transaction() as tx:
            exists = tx.exec(select(CheckpointRow.id).where(CheckpointRow.job_id == job_id,
                                                            CheckpointRow.uri == uri)).first()
            if exists is None:
                repo.record_checkpoint(tx, job_id, uri, attempt_id=attempt_id, step=step, committed_at=at)

    def event(self, kind: str, message: str, now: datetime, *, job_id: int | None = None,
              data: dict[str, object] | None = None) -> None:
        with self.store.transaction() as tx:
            repo.record_event(tx, kind, message, job_id=job_id, data=dict(data or {}), ts=now)

    def observe_instances(self, provider: str, instances: Sequence[Instance], now: datetime) -> None:
        listed = {i.launch_id: i for i in instances if i.launch_id}
        with self.store.transaction() as tx:
            # Plain columns, not ORM rows: this runs for every instance of every tick.
            rows = tx.exec(select(InstanceRow.launch_id, InstanceRow.instance_id, InstanceRow.state,  # type: ignore[call-overload]
                                  InstanceRow.raw_state, InstanceRow.public_ip, InstanceRow.job_id)
                           .where(InstanceRow.provider == provider,
                                  col(InstanceRow.state).not_in(GONE_INSTANCE_STATE_VALUES))).all()
            changed = False
            for launch_id, instance_id, state, raw_state, public_ip, job_id in rows:
                inst = listed.get(launch_id)
                if inst is None:
                    if instance_id is not None:     # the cloud answered once and no longer lists it
                        repo.mark_instance_gone(tx, launch_id, "terminated", "not listed", now=now)
                        changed = True
                    continue
                if (state, raw_state, public_ip) != (inst.state.value, inst.raw_state or None, inst.public_ip):
                    repo.record_instance(tx, _instance_record(inst, launch_id, self.owner, job_id), now=now)
                    changed = True
        if changed:
            self._wrote()


def _instance_record(inst: Instance, launch_id: str, owner: str, job_id: int | None) -> repo.InstanceRecord:
    return repo.InstanceRecord(
        provider=inst.provider, launch_id=launch_id, owner=owner, job_id=job_id, instance_id=inst.instance_id,
        state=inst.state.value, raw_state=inst.raw_state or None, public_ip=inst.public_ip, ssh_port=inst.ssh_port,
        ssh_user=inst.ssh_user, host_keys=inst.host_keys or None)
