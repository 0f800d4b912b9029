"""The tick's facts: what the passive sync found in the clouds, the store and the nodes' reports.

Built once per tick by ``orchestrator.engine.sync`` and handed, read-only, to every active step. The
attempts are as the sync left them: an attempt whose machine the cloud reclaimed is already PREEMPTED here.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from orchestrator.engine.hooks import AgentReport
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, EndCause
from providers.base import Instance, InstanceState

#: Attempt states in which the machine is the job's (from the accepted launch until it is being ended).
HOLDING_STATES = frozenset({AttemptState.LAUNCHED, AttemptState.BOOTSTRAPPING, AttemptState.RUNNING})

#: Why a machine counts as taken from its job: the cloud took it (the sync), or it stopped answering past a
#: liveness deadline (orchestrator/engine/liveness.py). The recovery step decides what follows.
LOSS_CAUSES = frozenset({EndCause.PREEMPTED, EndCause.LOST, EndCause.BOOT_TIMEOUT, EndCause.SILENT,
                         EndCause.UNREACHABLE})


@dataclass(frozen=True, slots=True)
class Observed:
    """One attempt that was live at the tick's start, on a cloud that answered its listing."""

    job: JobRecord
    attempt: AttemptRecord          # after the sync's writes
    before: AttemptState            # its state when the tick started
    instance: Instance | None       # what its provider lists under its launch id (None: nothing)
    agent: AgentReport | None       # its agent's report (RUNNING attempts of active jobs), else None

    @property
    def ended_by_sync(self) -> bool:
        """The sync ended it (the cloud confirmed its termination, reclaimed it or lost it), or the liveness
        step did (its facts carry the ended attempt)."""
        return self.before.is_live and self.attempt.state.is_final

    @property
    def lost(self) -> bool:
        """Its machine was taken this tick (reclaimed, vanished, or ended past a liveness deadline)."""
        return self.ended_by_sync and self.attempt.end_cause in LOSS_CAUSES

    @property
    def machine_running(self) -> bool:
        return self.instance is not None and self.instance.state is InstanceState.RUNNING


@dataclass(frozen=True, slots=True)
class Draining:
    """An ended attempt whose machine drains after a notice (``drain_until`` not yet passed)."""

    attempt: AttemptRecord
    instance: Instance | None       # None or gone: nothing is left to wait for
    agent: AgentReport | None       # None: unreachable

    @property
    def holds_successor(self) -> bool:
        """Still uploading its notice checkpoint: a replacement of the same job waits before starting.

        It waits for the upload, not for the job's exit once the agent has drained it: a drained agent commits
        nothing complete after the drain (AgentReport.drained), so the stopping job (a framework's shutdown
        takes seconds) can no longer move LATEST past what the replacement restores."""
        if self.instance is None or self.instance.state.is_gone or self.agent is None:
            return False
        stopped = self.agent.exit_code is not None or self.agent.drained
        return not (stopped and self.agent.pending_uploads == 0)


@dataclass(frozen=True)
class TickFacts:
    now: datetime
    listed: Mapping[str, tuple[Instance, ...]]     # per provider that answered its listing
    unlistable: frozenset[str]                     # providers whose listing failed: their attempts wait
    jobs: Mapping[int, JobRecord]                  # the active jobs (desired state active)
    observed: tuple[Observed, ...]                 # oldest attempt first
    draining: tuple[Draining, ...]
    #: Jobs with a live attempt after the sync (also on clouds that did not answer).
    held_jobs: frozenset[int]
    #: Ids of the attempts observed afresh this tick; every other one in ``observed`` is the very ``Observed``
    #: of the tick before (same record, machine, job, and no agent report: nothing about it changed), which a
    #: step that judged it then may leave alone unless time alone can change its verdict. None: all are new.
    changed: frozenset[int] | None = None

    def is_new(self, seen: Observed) -> bool:
        """Whether ``seen`` was observed afresh this tick (see ``changed``)."""
        return self.changed is None or seen.attempt.id in self.changed

    def running(self, job_id: int) -> list[Observed]:
        return [o for o in self.observed if o.attempt.job_id == job_id and o.attempt.state is AttemptState.RUNNING]


def same_listings(a: Mapping[str, Sequence[Instance]], b: Mapping[str, Sequence[Instance]]) -> bool:
    """The same providers listing the very same objects, in order (compared by identity, at C speed): a
    steady listing (a same-bytes cache's, the fleet's shared one) hands out the objects of the tick before,
    and the steps that index or scan the whole listing keep what they made of it."""
    return a.keys() == b.keys() and all(len(a[k]) == len(v) and all(map(operator.is_, a[k], v))
                                        for k, v in b.items())
