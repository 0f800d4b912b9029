"""One launch request to one cloud, written to the store before and after (the crash-safety rule).

PLANNED -> (startup script rendered) -> LAUNCH_REQUESTED -> the provider's launch call -> LAUNCHED with the
instance. A boot script that cannot be built (over the provider's limit, a secret or store credential missing) ends
the attempt before any cloud call: nothing is launched that could not start. The launch id is the idempotency
key: a request the cloud never saw (orch died before asking) is asked again with the same id; one the cloud did
see is adopted by the sync.
"""

from __future__ import annotations

from datetime import datetime

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.crashpoints import crashpoint
from orchestrator.engine.ending import clean_up_launch
from orchestrator.engine.events import EventKind
from orchestrator.engine.failure import of_provider_error
from orchestrator.engine.hooks import StartupScriptError
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, EndCause
from orchestrator.engine.tick import TickLog
from providers.base import Instance, InstanceState, LaunchSpec
from providers.errors import MOVE_ON_ERRORS, ProviderError


def request_launch(deps: EngineDeps, job: JobRecord, attempt: AttemptRecord, now: datetime, log: TickLog) -> bool:
    """Ask the attempt's provider for its machine: True once the cloud accepted (LAUNCHED), False when it
    refused or failed (the attempt FAILED; the next offer may take it)."""
    provider = deps.providers[attempt.offer.provider]
    script = _startup_script(deps, job, attempt, now, log)
    if script is None:
        return False
    deps.store.set_attempt_state(attempt.id, AttemptState.LAUNCH_REQUESTED, now)
    crashpoint("before-launch-call")
    spec = launch_spec_for(job, attempt, owner=deps.config.owner, ssh_public_key=deps.config.ssh_public_key,
                           script=script)
    try:
        inst = provider.launch(spec)
    except MOVE_ON_ERRORS as exc:
        failure = of_provider_error(exc)
        deps.store.set_attempt_state(attempt.id, AttemptState.FAILED, now,
                                     reason=(failure.headline() if failure else str(exc))[:300],
                                     cause=EndCause.LAUNCH_REFUSED)
        deps.store.event(EventKind.LAUNCH_REFUSED, f"{provider.name} {attempt.offer.instance_type} "
                         f"{attempt.offer.region}: {exc}; trying the next offer", now, job_id=job.id,
                         data=failure.to_data() if failure else None)
        log.ended.add(attempt.id)
        return False
    except ProviderError as exc:
        # Ambiguous failure: the cloud may have created it anyway. Leave nothing behind.
        clean_up_launch(deps, provider, attempt.launch_id, log)
        failure = of_provider_error(exc)
        deps.store.set_attempt_state(attempt.id, AttemptState.FAILED, now,
                                     reason=(failure.headline() if failure else str(exc))[:300],
                                     cause=EndCause.LAUNCH_FAILED)
        # A provider's error names its provider already ("runpod: ..."): said once, not "runpod: runpod: ...".
        said = str(exc) if exc.provider == provider.name else f"{provider.name}: {exc}"
        deps.store.event(EventKind.LAUNCH_FAILED, said, now, job_id=job.id,
                         data=failure.to_data() if failure else None)
        log.report.errors.append(f"launch {attempt.launch_id}: {exc}")
        log.ended.add(attempt.id)
        return False
    crashpoint("after-launch-call")
    deps.store.set_attempt_state(attempt.id, AttemptState.LAUNCHED, now, instance=inst)
    crashpoint("after-launched-written")
    deps.store.event(EventKind.LAUNCHED, f"{provider.name} {inst.instance_id} ({attempt.offer.instance_type}, "
                     f"{attempt.offer.market.value}, ${attempt.offer.price_hr:.2f}/h) launch {attempt.launch_id}",
                     now, job_id=job.id)
    log.report.launched += 1
    _stage_early(deps, job, attempt, inst, log)
    return True


def _stage_early(deps: EngineDeps, job: JobRecord, attempt: AttemptRecord, inst: Instance, log: TickLog) -> None:
    """A machine that is up as soon as it is launched (own machines) has its launch staged now, on the
    bootstrapper's own thread (``stage``: files put, agent started ahead of its go): the next tick's start step
    only gives the go, or, for a replacement, waits for the predecessor's commit with everything else done.
    Node 0 only: a gang's other ranks are rendered with node 0's address, known at their start."""
    stage = getattr(deps.hooks.bootstrapper, "stage", None)
    if stage is None or attempt.node_rank != 0 or inst.state is not InstanceState.RUNNING:
        return
    try:
        stage(job, attempt, inst)
    except Exception as exc:  # the start step stages (or starts) itself; a staging bug must not stop the tick
        log.report.errors.append(f"stage {attempt.launch_id}: {exc}")


def gang_key(job: JobRecord, attempt: AttemptRecord) -> str:
    """The key one start of a multi-node job shares on every node (the cloud's placement group is named
    after it): job and generation. Empty for a single-node job, which needs no placement."""
    return f"j{job.id}-g{attempt.generation}" if job.spec.plan.nodes > 1 else ""


def launch_spec_for(job: JobRecord, attempt: AttemptRecord, *, owner: str, ssh_public_key: str,
                    script: str) -> LaunchSpec:
    """The ONE mapping from a job's attempt (and its rendered boot script) to the provider's LaunchSpec: the
    engine's launches and ``orch smoke`` (orchestrator/app/smoke.py) both send what this returns."""
    return LaunchSpec(
        launch_id=attempt.launch_id, owner=owner, job=job.name, offer=attempt.offer, ssh_public_key=ssh_public_key,
        startup_script=script, image=job.spec.image, disk_gb=job.spec.disk_gb, max_price_hr=job.spec.max_price_hr,
        node_rank=attempt.node_rank, gang=gang_key(job, attempt),
    )


def _startup_script(deps: EngineDeps, job: JobRecord, attempt: AttemptRecord, now: datetime,
                    log: TickLog) -> str | None:
    """The script the machine boots with, or None when it cannot be built: the attempt is then ended with no
    cloud call (a machine with no way to start would bill until the engine gave up on it), an event says why,
    and the caller moves on (another provider's limits may take it; else the job waits, PENDING)."""
    try:
        return deps.hooks.startup.render(job, attempt)
    except StartupScriptError as exc:
        deps.store.set_attempt_state(attempt.id, AttemptState.FAILED, now, reason=f"boot script: {exc}"[:300],
                                     cause=EndCause.LAUNCH_REFUSED)
        deps.store.event(EventKind.STARTUP_SCRIPT, f"not launched on {attempt.offer.provider} "
                         f"{attempt.offer.instance_type} (launch {attempt.launch_id}): {exc}", now, job_id=job.id)
        log.report.errors.append(f"startup script {attempt.launch_id}: {exc}")
        log.ended.add(attempt.id)
        log.unbootable.add((job.id, attempt.offer.provider))
        return None
