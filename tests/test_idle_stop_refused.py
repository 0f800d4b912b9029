"""An idle stop the cloud refuses for good (AWS cannot stop a one-time spot instance: ``UnsupportedOperation``,
an ``InvalidRequestError``) must not leave the idle machine billing. Before, the attempt stayed
TERMINATE_REQUESTED for a stop and every tick asked the stop again, refused again: the machine ran on, idle, for
good, and ``orch down`` could not end it either (the teardown skips an attempt being ended and only re-asks a stop
in flight). Now such a refusal terminates the machine (``EndCause.IDLE_TERMINATED``); any other failure (a
throttle, a 5xx, credentials to fix) is still asked again."""

from __future__ import annotations

import pytest

from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.store import open_store
from providers.base import InstanceState
from providers.errors import InvalidRequestError, ProviderUnavailableError
from tests.fakes.memory_provider import MemoryProvider
from tests.fakes.memory_store import MemoryStore
from tests.support.clock import ManualClock as Clock
from tests.test_engine import CATALOG, OWNER, ScriptedMonitor, SqlHarness, engine, idle_on_stop_until, live

UNSTOPPABLE = InvalidRequestError("You can't stop the Spot Instance because it is associated with a one-time "
                                  "Spot Instance request", provider="aws", code="UnsupportedOperation")


@pytest.fixture(params=["memory", "sqlite"])
def world(request, tmp_path):  # type: ignore[no-untyped-def]
    clock = Clock()
    store = MemoryStore() if request.param == "memory" else SqlHarness(
        open_store(f"sqlite:///{tmp_path / 'orch.db'}"), OWNER, catalog=CATALOG)
    aws, gcp = MemoryProvider("aws", CATALOG), MemoryProvider("gcp", CATALOG)
    monitor = ScriptedMonitor()
    return clock, store, aws, gcp, monitor, engine(store, {"aws": aws, "gcp": gcp}, CATALOG, clock, monitor=monitor)


def _idle_until_stop_asked(world):  # type: ignore[no-untyped-def]
    """The idle rule's ask to stop the machine, made (the tick of its idle-stop-requested event); the job."""
    return idle_on_stop_until(world, "idle-stop-requested")


def test_an_idle_stop_the_cloud_refuses_for_good_terminates_the_machine(world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, _, rec = world
    aws.fail("stop", *[UNSTOPPABLE] * 100)
    job = _idle_until_stop_asked(world)
    for _ in range(3):
        clock.advance(minutes=1)
        rec.tick()
    assert live(aws, gcp) == []                                # before: still running (and billing), idle
    [attempt] = store.attempts_for_job(job.id)
    assert attempt.state is AttemptState.TERMINATED and attempt.end_cause is EndCause.IDLE_TERMINATED
    assert store.job(job.id).status is JobStatus.STOPPED
    assert store.kinds().count("idle-shutdown") == 1


def test_orch_down_ends_a_machine_whose_idle_stop_the_cloud_refuses(world) -> None:  # type: ignore[no-untyped-def]
    """Torn down while its idle stop is in flight (the first ask failed for now) and the cloud then refuses the
    stop for good: the machine is ended (before: asked to stop, refused, on every tick of ``orch down``)."""
    clock, store, aws, gcp, _, rec = world
    aws.fail("stop", *[ProviderUnavailableError("503", provider="aws")] * aws.retry_attempts, *[UNSTOPPABLE] * 100)
    job = _idle_until_stop_asked(world)
    [attempt] = store.attempts_for_job(job.id)
    assert attempt.state is AttemptState.TERMINATE_REQUESTED and len(live(aws, gcp)) == 1
    store.request_down(job.id)
    for _ in range(3):
        clock.advance(minutes=1)
        rec.tick()
    assert live(aws, gcp) == []


def test_a_transient_stop_failure_is_asked_again_never_a_terminate(world) -> None:  # type: ignore[no-untyped-def]
    """A throttle or 5xx is asked again next tick: the disk is kept, as ``idle.action: stop`` says."""
    clock, store, aws, gcp, _, rec = world
    aws.fail("stop", *[ProviderUnavailableError("503", provider="aws")] * aws.retry_attempts)
    job = _idle_until_stop_asked(world)
    for _ in range(3):
        clock.advance(minutes=1)
        rec.tick()
    assert [i.state for i in live(aws, gcp)] == [InstanceState.STOPPED]
    assert aws.cloud.calls["terminate"] == 0
    [attempt] = store.attempts_for_job(job.id)
    assert attempt.state is AttemptState.TERMINATED and attempt.end_cause is EndCause.IDLE_STOPPED
