"""The SQL engine store's kept reads: its reads of jobs and live attempts, kept until they may be stale.

A steady tick (nothing changes) must not read and rebuild 10k jobs and attempts (at 10k on SQLite that was
~0.6 s of CPU a tick). A read is kept until:

* this store writes a job or an attempt (``_wrote``; after an instance-only write the attempts' read is
  patched as it was written, ``patch_live``);
* anybody else writes to the database (another process, or another part of this one), which SQLite tells
  (orchestrator/store/change_tokens.py ``change_token``): checked at each tick's start (``keep_unchanged_reads``);
  this store's own writes of rows no read holds (the spend ledger) carry the kept reads over
  (``wrote_aside``);
  on PostgreSQL with several daemons, a fingerprint of the rows of the jobs this daemon holds tells whether
  anybody wrote them (the attempts and instance rows of its jobs only it writes: kept while its holding is
  the same, ``SqlEngineStore.begin_tick``); with one daemon on PostgreSQL nothing is kept across ticks;
* the catalog the attempts' offers are rebuilt from changes (``use_catalog``).

A kept read of jobs carries each job's spend total as of the read; ``keep_unchanged_reads`` brings the
totals that moved up to date (``_spent``, which charges keep current; ``_moved``, which jobs they moved), as
reading them again would: the other records stay the very objects they were (the engine's sync compares them
by identity: orchestrator/engine/sync.py).
Mixed into ``SqlEngineStore``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import Enum
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar

from sqlmodel import Session

from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.store import change_tokens
from orchestrator.store.change_tokens import ChangeToken, HeldJobRows, SqliteChanges
from orchestrator.store.changes import JOBS, Counted
from orchestrator.store.db import Store
from orchestrator.store.fleet_member import FleetMember
from orchestrator.store.instance_rows import InstanceRecord

T = TypeVar("T")


class Read(Enum):
    """What a kept read holds."""

    ACTIVE_JOBS = "active jobs"
    INACTIVE_JOBS = "inactive jobs"
    LIVE_ATTEMPTS = "live attempts"
    DRAINING = "attempts draining after the read's time"
    LIVE_LAUNCH_IDS = "every daemon's live launch ids"
    INSTANCES = "a provider's unended instance rows"


@dataclass(frozen=True, slots=True)
class ReadKey:
    read: Read
    provider: str = ""      # Read.INSTANCES: whose rows


ACTIVE_JOBS, INACTIVE_JOBS = ReadKey(Read.ACTIVE_JOBS), ReadKey(Read.INACTIVE_JOBS)
LIVE_ATTEMPTS, LIVE_LAUNCH_IDS = ReadKey(Read.LIVE_ATTEMPTS), ReadKey(Read.LIVE_LAUNCH_IDS)
DRAINING = ReadKey(Read.DRAINING)

#: The reads of jobs (their spend totals are brought up to date when kept).
JOB_READS = (ACTIVE_JOBS, INACTIVE_JOBS)


def _covers(token: ChangeToken, key: ReadKey) -> bool:
    """PostgreSQL's token covers the jobs' rows only (not, say, every daemon's live launch ids)."""
    return key in JOB_READS or not isinstance(token, HeldJobRows)


class Kept(NamedTuple):
    version: int                # this store's write count when read
    value: Any
    token: ChangeToken | None   # the database's change token before the read (None: none known)


class KeptReads:
    store: Store
    _version: int
    _reads: dict[ReadKey, Kept]
    _spent: dict[int, float]
    _moved: set[int]        # jobs whose ``_spent`` moved since the kept reads were last brought up to date
    _leased_to: str | None
    _counted: Counted
    fleet: FleetMember | None

    def _cached(self, key: ReadKey, load: Callable[[Session], T]) -> T:
        """``load``'s answer, read again only when the kept one may be stale (see the module's docstring)."""
        hit = self._reads.get(key)
        if hit is not None and hit.version == self._version:
            return hit.value  # type: ignore[no-any-return]
        with self.store.transaction() as tx:
            token = self._token(tx)   # before the read: a commit after changes it
            value = load(tx)
        self._reads[key] = Kept(self._version, value, token)
        return value

    def _token(self, tx: Session) -> ChangeToken | None:
        """The database's change token; PostgreSQL's digest of the held job rows is kept while the server's
        count of job writers reads the same (orchestrator/store/changes.py: a steady tick reads one row)."""
        return self._counted.get(tx, "held jobs", JOBS, lambda: self._held_token(tx))

    def _held_token(self, tx: Session) -> ChangeToken | None:
        return change_tokens.change_token(tx, self._leased_to)

    def _wrote(self) -> None:
        self._version += 1

    def keep_unchanged_reads(self, held: frozenset[Read] = frozenset()) -> None:
        """Drop the kept reads unless the database says nobody wrote what they hold since they were read;
        bring the kept jobs' spend totals up to date. ``held``: reads the caller knows only this store writes
        (several daemons: a held job's attempts and instance rows, the fence), kept."""
        if not self._reads:
            return
        # A fleet's claim read the server's counts this tick (before its own writes: a claim's are seen as a
        # change next tick): a steady tick checks against them, in no transaction of its own.
        read = self.fleet.counted.last if self.fleet is not None else None
        token = self._counted.answer(self.store, "held jobs", JOBS, self._held_token, read=read)
        self._reads = {k: v for k, v in self._reads.items()
                       if k.read in held or (token is not None and v.token == token and _covers(token, k))}
        moved, self._moved = self._moved, set()
        if not moved:
            return      # no total moved (a steady tick's charges wait in the engine's meters): the same records
        for key in JOB_READS:
            kept = self._reads.get(key)
            if kept is not None:
                self._reads[key] = kept._replace(value=[self._with_spent(j) if j.id in moved else j
                                                        for j in kept.value])

    def wrote_aside(self, before: ChangeToken | None, after: ChangeToken | None) -> None:
        """This store wrote rows no kept read holds (the spend ledger) between the tokens ``before`` (read in
        the writing transaction before its writes) and ``after`` (after them, before the commit): the
        reads kept at ``before`` stay valid at ``after`` unless another connection committed in between
        (SQLite's tokens tell; with none, or PostgreSQL's, the reads are left as they are)."""
        if not (isinstance(before, SqliteChanges) and isinstance(after, SqliteChanges)) or (
                (before.connection, before.data_version) != (after.connection, after.data_version)):
            return
        self._reads = {k: v._replace(token=after) if v.token == before else v for k, v in self._reads.items()}

    def _with_spent(self, job: JobRecord) -> JobRecord:
        spent = self._spent.get(job.id, job.spent_usd)
        if spent == job.spent_usd:
            return job
        # The constructor, not dataclasses.replace: every running job's total moves each tick, and replace's
        # field introspection was ~15% of a steady tick at 10k jobs (tests/bench/bench_tick.py --profile).
        return JobRecord(id=job.id, name=job.name, manifest=job.manifest, spec=job.spec, status=job.status,
                         desired_active=job.desired_active, relaunch_count=job.relaunch_count, spent_usd=spent,
                         created_at=job.created_at)

    def patch_live(self, written: Mapping[str, InstanceRecord]) -> None:
        """The kept live attempts as a read after ``update_instances(written)`` would give them (the kept
        draining attempts are dropped: read again when next asked)."""
        if written:
            self._reads.pop(DRAINING, None)
        kept = self._reads.get(LIVE_ATTEMPTS)
        if kept is None:
            return
        patched = []
        for a in kept.value:
            rec = written.get(a.launch_id)
            if rec is not None:
                price = a.actual_price_hr if rec.actual_price_hr is None else rec.actual_price_hr
                instance_id = rec.instance_id or a.instance_id
                if (instance_id, price) != (a.instance_id, a.actual_price_hr):
                    a = _with_instance(a, instance_id, price)
            patched.append(a)
        self._reads[LIVE_ATTEMPTS] = kept._replace(value=patched)


_ATTEMPT_FIELDS = tuple(f.name for f in fields(AttemptRecord))
_attempt_values = attrgetter(*_ATTEMPT_FIELDS)
_INSTANCE_ID, _ACTUAL_PRICE = _ATTEMPT_FIELDS.index("instance_id"), _ATTEMPT_FIELDS.index("actual_price_hr")


def _with_instance(a: AttemptRecord, instance_id: str | None, actual_price_hr: float | None) -> AttemptRecord:
    """``dataclasses.replace(a, instance_id=.., actual_price_hr=..)`` at a third of its CPU (a first tick
    patches every live attempt: ~0.1 s at 10k with ``replace``): every field read at once, positionally."""
    values = list(_attempt_values(a))
    values[_INSTANCE_ID], values[_ACTUAL_PRICE] = instance_id, actual_price_hr
    return AttemptRecord(*values)
