"""Ending machines, written to the store before and after: the one way every step ends an attempt."""

from __future__ import annotations

from datetime import datetime

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.crashpoints import crashpoint
from orchestrator.engine.ports import AttemptRecord
from orchestrator.engine.states import AttemptState, EndCause
from orchestrator.engine.tick import TickLog
from providers.base import Provider
from providers.errors import InstanceNotFoundError, ProviderError


def terminate(provider: Provider, instance_id: str, log: TickLog) -> bool:
    """Ask the cloud to end a machine; one already gone is success, other errors are reported (the next
    tick asks again: TERMINATE_REQUESTED stays until the cloud confirms). False: the cloud refused."""
    try:
        provider.terminate(instance_id)
    except InstanceNotFoundError:
        pass
    except ProviderError as exc:
        log.report.errors.append(f"terminate {provider.name} {instance_id}: {exc}")
        return False
    return True


def end_attempt(deps: EngineDeps, attempt: AttemptRecord, final: AttemptState, cause: EndCause, reason: str,
                now: datetime, log: TickLog, *, drain_until: datetime | None = None) -> None:
    """End ``attempt`` for ``cause``: TERMINATE_REQUESTED, the terminate call, then ``final``.

    Without a machine (never launched, or the cloud may still be creating it) it goes straight to ``final``;
    the sweep ends whatever shows up later. With ``drain_until`` the machine is left running (a notice's
    drain): the sweep ends it then.
    """
    log.ended.add(attempt.id)
    provider = deps.providers.get(attempt.offer.provider)
    if drain_until is None and attempt.instance_id and provider is not None:
        deps.store.set_attempt_state(attempt.id, AttemptState.TERMINATE_REQUESTED, now, reason=reason, cause=cause)
        crashpoint("after-terminate-requested")
        terminate(provider, attempt.instance_id, log)
    deps.store.set_attempt_state(attempt.id, final, now, reason=reason, cause=cause, drain_until=drain_until)


def request_termination(deps: EngineDeps, attempt: AttemptRecord, cause: EndCause, reason: str, now: datetime,
                        log: TickLog) -> None:
    """TERMINATE_REQUESTED and the terminate call; the sync confirms it (TERMINATED) once the cloud says so."""
    log.ended.add(attempt.id)
    deps.store.set_attempt_state(attempt.id, AttemptState.TERMINATE_REQUESTED, now, reason=reason, cause=cause)
    crashpoint("after-terminate-requested")
    provider = deps.providers.get(attempt.offer.provider)
    if attempt.instance_id and provider is not None:
        terminate(provider, attempt.instance_id, log)


def clean_up_launch(deps: EngineDeps, provider: Provider, launch_id: str, log: TickLog) -> None:
    """After an ambiguous launch error: end whatever the cloud created under ``launch_id``."""
    try:
        for inst in provider.list_instances(deps.config.owner):
            if inst.launch_id == launch_id and not inst.state.is_gone:
                terminate(provider, inst.instance_id, log)
    except ProviderError as exc:
        log.report.errors.append(f"cleanup {launch_id}: {exc} (the orphan collector will retry)")
