"""``orch smoke``: one real machine per provider through orch's own boot path, its first report, and nothing left.

Per provider: a small CPU machine where the provider has one (``CPU_TYPES``: AWS, GCP, Azure), placed where the
provider's cheapest listed offer is (a region orch is configured for) and priced from that table; else the cheapest
on-demand offer the provider lists (``Provider.offers``; any market where it lists no on-demand one): Vast.ai and
Lambda rent only GPU machines, and orch's RunPod adapter launches GPU pods only. The SSH provider's hosts are
the user's own: the first one is reserved (the provider's launch: nothing is bought) and the job started on it
over SSH by the engine's bootstrapper, its agent's first report read by the engine's monitor, and the provider's
terminate ends the launch's processes and frees the host.
Render the boot script with the engine's own renderer and build the launch with the engine's own
``launch_spec_for`` (so a change to either is what smoke sends; a CPU machine is launched with no GPU), launch,
wait until the engine's own store monitor reads the agent's first report, then terminate, wait until the cloud
says the machine is gone, delete what this launch created besides it (per-launch resources, and shared ones that
did not exist before and nothing uses), and list again: whatever of this launch is still there is a leftover.

Teardown runs whatever happened before it (a refused launch, a timeout, Ctrl-C): an ambiguous launch failure
is looked up by its launch id, as the engine does. The cost is the offer's $/h over the time held (launch call
to the cloud saying the machine is gone): a list-price figure, not the bill (minimum charges, disks and traffic
are the provider's; an own machine's is the price set for it in the config). Cloud SDKs and the store are
imported by the caller (the CLI), never at import here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from orchestrator.app.smoke_targets import OVER_SSH, MachineKind, SmokeOptions, SmokeTarget
from orchestrator.engine.hooks import Bootstrapper, Monitor, StartupRenderer, StartupScriptError
from orchestrator.engine.launching import launch_spec_for
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, JobStatus
from providers.base import CloudResource, Market, Offer, Provider, new_launch_id
from providers.errors import ProviderError, ResourceInUseError, ResourceNotFoundError

__all__ = ["SmokeResult", "SmokeSeams", "run_smoke", "smoke_job"]

JOB_NAME = "orch-smoke"


#: While waiting, a progress line at least this often (a real machine takes minutes to boot).
PROGRESS_EVERY_S = 30.0


@dataclass(frozen=True, slots=True)
class SmokeSeams:
    """The engine's renderer of the boot script and its monitor of the store, as ``build_service`` wires them."""

    startup: StartupRenderer
    monitor: Monitor
    #: Starts the job where no boot script does (``OVER_SSH``); None: such a provider cannot be smoked.
    bootstrapper: Bootstrapper | None = None


@dataclass(frozen=True, slots=True)
class SmokeResult:
    provider: str
    offer: Offer | None
    launch_id: str = ""
    instance_id: str = ""
    first_report_s: float | None = None
    held_s: float = 0.0
    cost_usd: float = 0.0
    leftovers: tuple[str, ...] = ()
    error: str = ""
    launched: bool = False

    @property
    def ok(self) -> bool:
        return not self.error and self.first_report_s is not None and not self.leftovers

    @property
    def kind(self) -> MachineKind | None:
        return MachineKind.of(self.offer)

    @property
    def result(self) -> str:
        return "ok" if self.ok else "FAILED"


def smoke_job(offer: Offer, now: datetime) -> JobRecord:
    """The job smoke boots: one command on exactly ``offer``'s GPUs, no checkpoint (its agent reports to the
    daemon's state store), through the same manifest validation as any job. A CPU offer's job asks for no
    GPU: a user's manifest must name one, so it is validated naming one and then has it removed (nothing
    plans this job; the renderer reads the GPUs per node from the offer)."""
    from orchestrator.engine.jobspec import jobspec_from_manifest
    from orchestrator.manifest import parse_text

    market = "spot" if offer.market is Market.SPOT else "on-demand"
    text = (f"apiVersion: orch/v1\nkind: Job\nname: {JOB_NAME}\n"
            f"resources: {{gpu: [{offer.gpu or 'T4'}], count: {max(offer.gpu_count, 1)}}}\nmarket: {market}\n"
            "run: {launcher: command, command: 'echo orch smoke'}\n")
    [(manifest, _)] = parse_text(text, "<orch smoke>")
    if not offer.gpu_count:
        manifest = manifest.model_copy(update={"resources": manifest.resources.model_copy(update={"gpu": []})})
    return JobRecord(id=0, name=JOB_NAME, manifest=manifest, spec=jobspec_from_manifest(manifest, now, [offer]),
                     status=JobStatus.LAUNCHING, desired_active=True, relaunch_count=0, spent_usd=0.0,
                     created_at=now)


@dataclass
class _Run:
    """One provider's smoke while it runs (what teardown needs, whatever step failed)."""

    name: str
    provider: Provider
    opts: SmokeOptions
    progress: Callable[[str], None]
    clock: Callable[[], float]
    wait: Callable[[float], None]
    launch_id: str = field(default_factory=new_launch_id)
    instance_id: str = ""
    launched_at: float | None = None
    before: frozenset[tuple[object, ...]] = frozenset()


def run_smoke(target: SmokeTarget, provider: Provider, seams: SmokeSeams, opts: SmokeOptions, *,
              progress: Callable[[str], None] = lambda line: None, clock: Callable[[], float] = time.monotonic,
              wait: Callable[[float], None] = time.sleep) -> SmokeResult:
    """Launch ``target.offer`` on ``provider``, wait for the agent's first report, tear down, count leftovers.
    Never raises a ProviderError: every failure is in the result (teardown still ran)."""
    if target.offer is None:
        return SmokeResult(target.provider, None, error=target.problem)
    offer, run = target.offer, _Run(target.provider, provider, opts, progress, clock, wait)
    first: float | None = None
    error = ""
    try:
        first = _launch_and_wait(run, offer, seams)
    except (ProviderError, StartupScriptError, ValueError, TimeoutError) as exc:
        error = _sentence(exc)[:400]
    finally:
        left, gone_at = _tear_down(run) if run.launched_at is not None else ((), None)
    held = (gone_at or clock()) - run.launched_at if run.launched_at is not None else 0.0
    return SmokeResult(run.name, offer, run.launch_id, run.instance_id, first, held,
                       round(offer.price_hr * held / 3600, 6), left, error, launched=run.launched_at is not None)


def _sentence(exc: Exception) -> str:
    """A smoke failure as a user reads it: a sentence saying who failed, never an exception's class name."""
    if isinstance(exc, ProviderError):
        said = "did not answer in time" if exc.retryable else "refused"
        words = str(exc).removeprefix(f"{exc.provider}: ")      # the result's line names the provider already
        return f"the cloud {said}: {words}"
    if isinstance(exc, StartupScriptError):
        return f"no boot script for the machine: {exc}"
    return str(exc) or "no reason given"      # a TimeoutError or ValueError of ours: already a sentence


def _launch_and_wait(run: _Run, offer: Offer, seams: SmokeSeams) -> float:
    job = smoke_job(offer, datetime.now(UTC))
    attempt = AttemptRecord(id=0, job_id=0, launch_id=run.launch_id, state=AttemptState.PLANNED, offer=offer)
    over_ssh = run.name in OVER_SSH
    if over_ssh and seams.bootstrapper is None:
        raise ValueError("no bootstrapper to start the job over SSH")
    script = "" if over_ssh else seams.startup.render(job, attempt)
    if not script and not over_ssh:
        raise StartupScriptError("orch renders no boot script for this job here (no state store to report to?)")
    spec = launch_spec_for(job, attempt, owner=run.opts.owner, ssh_public_key=run.opts.ssh_public_key, script=script)
    run.before = frozenset(r.key for r in run.provider.list_network_resources(run.opts.owner))
    kind = f"{offer.gpu_count}x {offer.gpu}" if offer.gpu_count else "CPU"
    how = "starting the agent over SSH" if over_ssh else f"boot script {len(script.encode())} B"
    run.progress(f"{run.name}: {'reserving' if over_ssh else 'launching'} {offer.instance_type} ({kind}) in "
                 f"{offer.zone or offer.region} ({offer.market.value}, ${offer.price_hr:.3f}/h), launch "
                 f"{run.launch_id}, {how}")
    run.launched_at = run.clock()
    inst = run.provider.launch(spec)
    run.instance_id = inst.instance_id
    attempt = replace(attempt, state=AttemptState.LAUNCHED, instance_id=inst.instance_id)
    deadline, said, said_at = run.launched_at + run.opts.timeout_s, "", run.launched_at
    started = not over_ssh      # a boot script starts the job by itself
    while True:
        now = run.provider.get(inst.instance_id)
        if now is None or now.state.is_gone:
            raise ProviderError(f"the machine is {now.state.value if now else 'gone'} before its agent reported")
        if not started and seams.bootstrapper is not None:
            started = seams.bootstrapper.start(job, attempt, now)    # False: not reachable yet, asked again
        if started and seams.monitor.read(job, attempt, now) is not None:
            took = run.clock() - run.launched_at
            run.progress(f"{run.name}: first report from the agent after {took:.1f}s")
            return took
        elapsed = run.clock() - run.launched_at
        if run.clock() > deadline:
            raise TimeoutError(f"no report from the agent within {run.opts.timeout_s:g}s (machine {now.state.value})")
        line = f"{run.name}: {inst.instance_id} {now.state.value}, waiting for the agent's first report"
        if line != said or run.clock() - said_at >= PROGRESS_EVERY_S:   # a change, else a sign of life
            run.progress(f"{line} ({elapsed:.0f}s)")
            said, said_at = line, run.clock()
        run.wait(run.opts.poll_s)


def _tear_down(run: _Run) -> tuple[tuple[str, ...], float | None]:
    """Terminate, wait until gone, delete what this launch created; the leftovers and when it was gone."""
    p, owner, gone_at = run.provider, run.opts.owner, None
    deadline = run.clock() + run.opts.teardown_timeout_s
    run.progress(f"{run.name}: tearing down launch {run.launch_id}")
    try:
        for instance_id in _live(run):
            p.terminate(instance_id)              # idempotent; returns before the machine is gone
        while (live := _live(run)) and run.clock() <= deadline:
            run.wait(run.opts.poll_s)
        gone_at = None if live else run.clock()
        while run.clock() <= deadline:
            mine = [r for r in p.list_network_resources(owner) if _made_here(run, r)]
            if not mine or not _delete(p, mine):
                break
            run.wait(run.opts.poll_s)
        left = [f"instance {i}" for i in _live(run)]
        left += [f"{r.kind.value} {r.name}{' (in use)' if r.in_use else ''}"
                 for r in p.list_network_resources(owner) if _made_here(run, r)]
    except ProviderError as exc:
        return (f"not verified: {_sentence(exc)}"[:300],), gone_at
    return tuple(left), gone_at


def _live(run: _Run) -> list[str]:
    """Instances of this launch the cloud still runs (found by launch id: an ambiguous launch may have made one)."""
    listed = [i for i in run.provider.list_instances(run.opts.owner) if i.launch_id == run.launch_id]
    ids = {i.instance_id for i in listed if not i.state.is_gone}
    if run.instance_id and run.instance_id not in {i.instance_id for i in listed}:
        inst = run.provider.get(run.instance_id)
        if inst is not None and not inst.state.is_gone:
            ids.add(run.instance_id)
    return sorted(ids)


def _made_here(run: _Run, res: CloudResource) -> bool:
    """This launch's own resources, and shared ones (a security group per VPC) that appeared with it."""
    return res.launch_id == run.launch_id or (res.launch_id is None and res.key not in run.before)


def _delete(provider: Provider, resources: list[CloudResource]) -> bool:
    """Delete each; True when one is still in use (ask again after a poll), False when all went."""
    busy = False
    for res in resources:
        try:
            provider.delete_network_resource(res)
        except ResourceNotFoundError:
            continue
        except ResourceInUseError:
            busy = True
    return busy
