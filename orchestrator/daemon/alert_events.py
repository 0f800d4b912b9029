"""The ONE place store events become alerts.

The engine and the store already write an event for everything an alert is about; this module reads
them (their kinds and typed data, never their message text) and says which alert, if any, each makes:

==========================  =================================================================
event kind                  alert
==========================  =================================================================
``preempted``               ``preempted``
``recovering``, then the    ``relaunched`` (on the new machine's provider), once per recovery
job's next ``launched``
``idle-shutdown``           ``idle-stopped``
``boot-timeout``            ``boot-failed`` (a node that never reported within its boot timeout)
``node-silent``             ``node-silent`` (its agent silent past the heartbeat timeout: ended)
``node-unreachable``        ``node-unreachable`` (listed unreachable past the grace: ended)
``relaunch-cap``            ``relaunch-cap`` (lost again after ``max_relaunches``: the job failed)
``budget-stop``             ``budget-stop`` (the job's own ``budget_usd`` spent: stopped)
``budget-threshold``        ``budget-threshold`` (orchestrator.store.budget_watch writes it once per
                            threshold per month)
``budget-overrun``          ``budget-threshold`` (a budget's burn went over its $/h ceiling; once
                            per overrun, across daemons)
``budget-cap-stop``         ``budget-cap-stop`` (a budget at its monthly cap ended a job's
                            machines: ``stop_at_cap``; once per job)
``job.status`` to           ``job-finished`` / ``job-failed``
succeeded / failed
==========================  =================================================================
"""

from __future__ import annotations

import threading

from orchestrator.alerts.model import Alert, AlertKind
from orchestrator.engine.events import EventKind
from orchestrator.engine.states import JobStatus
from orchestrator.store.listen import CommittedEvent

_DIRECT = {
    EventKind.PREEMPTED: AlertKind.PREEMPTED,
    EventKind.IDLE_SHUTDOWN: AlertKind.IDLE_STOPPED,
    EventKind.BOOT_TIMEOUT: AlertKind.BOOT_FAILED,
    EventKind.NODE_SILENT: AlertKind.NODE_SILENT,
    EventKind.NODE_UNREACHABLE: AlertKind.NODE_UNREACHABLE,
    EventKind.RELAUNCH_CAP: AlertKind.RELAUNCH_CAP,
    EventKind.BUDGET_STOP: AlertKind.BUDGET_STOP,
    EventKind.BUDGET_THRESHOLD: AlertKind.BUDGET_THRESHOLD,
    EventKind.BUDGET_OVERRUN: AlertKind.BUDGET_THRESHOLD,
    EventKind.BUDGET_CAP_STOP: AlertKind.BUDGET_CAP_STOP,
}
_RECOVERING = EventKind.RECOVERING
_LAUNCHED = EventKind.LAUNCHED
_JOB_STATUS = EventKind.JOB_STATUS
_FINAL = {JobStatus.SUCCEEDED: AlertKind.JOB_FINISHED, JobStatus.FAILED: AlertKind.JOB_FAILED}

#: Every event kind that can lead to an alert: what the alert listener asks the store for.
EVENT_KINDS: frozenset[EventKind] = frozenset((*_DIRECT, _RECOVERING, _LAUNCHED, _JOB_STATUS))


class AlertMapper:
    """Turns committed events into alerts. Remembers, per job, a recovery whose relaunch has not been
    launched yet (in memory: after a restart, a relaunch already under way is not alerted)."""

    def __init__(self) -> None:
        self._recovering: set[int] = set()
        self._lock = threading.Lock()

    def alert_for(self, event: CommittedEvent) -> Alert | None:
        kind = _DIRECT.get(event.kind) or self._stateful(event)
        if kind is None:
            return None
        return Alert(kind, event.job, event.provider, event.message, event.ts)

    def _stateful(self, event: CommittedEvent) -> AlertKind | None:
        if event.kind is _JOB_STATUS:
            try:
                to = JobStatus(str(event.data.get("to")))
            except ValueError:
                return None
            return _FINAL.get(to)
        if event.job_id is None:
            return None
        with self._lock:
            if event.kind is _RECOVERING:
                self._recovering.add(event.job_id)
                return None
            if event.kind is _LAUNCHED and event.job_id in self._recovering:
                self._recovering.discard(event.job_id)
                return AlertKind.RELAUNCHED
        return None
