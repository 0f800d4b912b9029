"""A validated job manifest, plus the per-launch facts it cannot know, as one node's RenderInput."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.manifest.schema import Launcher as ManifestLauncher
from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.node_state import LOG_CHUNK_BYTES, job_state_uri, launch_state_uri
from orchestrator.runtime.render_input import (
    AgentSettings,
    CheckpointSpec,
    CloudKind,
    CodeShip,
    DataStage,
    Launcher,
    NotifyVia,
    RenderInput,
    ReportSpec,
    ResumeVia,
)
from providers.fabric import Fabric
from providers.gpus import Interconnect

#: torchrun's default rendezvous port, used unless a machine needs another.
DEFAULT_MASTER_PORT = 29500


@dataclass(frozen=True, slots=True)
class LaunchFacts:
    """What orch learns at launch: where the node is, how many GPUs it has, which cloud it is on."""

    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_MASTER_PORT
    gpus_per_node: int | None = None          # the offer's; default the manifest's count
    interconnect: Interconnect | None = None  # the offer's; default the manifest's (or pcie)
    cloud: CloudKind = CloudKind.NONE
    metadata_urls: dict[str, str] = field(default_factory=dict)   # cloud -> base URL override (tests)
    store_endpoint: str = ""                  # S3-compatible endpoint for the checkpoint store
    socket_ifname: str = ""                   # multi-node: the private network's interface (default: a hint)
    fabric: Fabric | None = None              # the machine's RDMA fabric as launched (Instance.fabric)
    work_dir: str = ""
    sample_interval_s: float = 5.0
    #: How often the agent asks the metadata service for a notice: a notice heard a second late costs the
    #: relaunch that second (a local request; the agent's loop turns once a second anyway).
    notice_interval_s: float = 1.0
    #: The attempt's launch id: exported as ORCH_LAUNCH_ID, which marks whose agent runs on the machine (the
    #: SSH bootstrapper's idempotency check greps for it). Empty (``orch render``): not exported.
    launch_id: str = ""
    #: The checkpoint the store expected this launch to restore, exported as ORCH_RESTORE_HINT (informational:
    #: startup.sh restores the store's LATEST, which is never older).
    restore_hint: str = ""
    #: The daemon-wide ``daemon.state_store`` (reports of jobs without a checkpoint store go there).
    state_store: str = ""
    report_interval_s: float = 10.0
    #: The machine IS the job's container (a RunPod or Vast pod started from the manifest's ``image``): the job
    #: runs in place; a VM runs it in ``image`` with ``docker run``.
    in_container: bool = False


def uses_infiniband(manifest: Manifest, facts: LaunchFacts) -> bool:
    """Whether NCCL may use InfiniBand between the nodes: the manifest's ``resources.infiniband`` when set,
    else whether the machine, as launched, is on an InfiniBand or RoCE fabric (only then is IB left on)."""
    if manifest.resources.infiniband is not None:
        return manifest.resources.infiniband
    return facts.fabric is not None and facts.fabric.ib_verbs


def render_input_for(manifest: Manifest, facts: LaunchFacts) -> RenderInput:
    """One node's RenderInput: the validated manifest plus what the launch knows. The ONE mapping from a
    job to what runs on a node (``orch render``, the SSH bootstrapper, the startup script at launch)."""
    ckpt = None
    c = manifest.checkpoint
    if c is not None:
        resume_via = ResumeVia.ARG if c.resume.arg else ResumeVia.ENV
        notify = c.notify
        ckpt = CheckpointSpec(
            local_dir=c.path, store_uri=c.store, store_endpoint=facts.store_endpoint,
            resume_via=resume_via, resume_name=c.resume.arg or c.resume.env or "",
            notify_via=NotifyVia.SIGNAL if notify and notify.signal else NotifyVia.FILE,
            notify_signal=(notify.signal if notify and notify.signal else "SIGUSR1"),
            notify_file=(notify.file if notify and notify.file else ""),
        )
    run = manifest.run
    launcher = Launcher(run.launcher.value)
    args = tuple(run.args)
    if run.config and run.launcher is ManifestLauncher.DEEPSPEED:
        # DeepSpeed's JSON reaches the script as its --deepspeed_config argument, ahead of the script args.
        args = ("--deepspeed_config", run.config, *args)
    accelerate_config = (run.config or "") if run.launcher is ManifestLauncher.ACCELERATE else ""
    return RenderInput(
        job_name=manifest.name, launcher=launcher, script=run.script or "", args=args,
        accelerate_config=accelerate_config,
        command=run.command or "", image="" if facts.in_container else (manifest.image or ""),
        setup=tuple(manifest.setup),
        env=tuple(sorted({**manifest.env, **_launch_env(facts)}.items())), secrets=tuple(sorted(manifest.secrets)),
        data=tuple(DataStage(d.source, d.path) for d in manifest.data), checkpoint=ckpt,
        nodes=manifest.resources.nodes, gpus_per_node=facts.gpus_per_node or manifest.resources.count,
        node_rank=facts.node_rank, master_addr=facts.master_addr, master_port=facts.master_port,
        interconnect=facts.interconnect or Interconnect(manifest.resources.interconnect or Interconnect.PCIE),
        work_dir=facts.work_dir,
        socket_ifname=facts.socket_ifname, infiniband=uses_infiniband(manifest, facts),
        fabric=facts.fabric,
        agent=AgentSettings(
            sample_interval_s=facts.sample_interval_s, notice_interval_s=facts.notice_interval_s,
            cloud=facts.cloud, aws_metadata_url=facts.metadata_urls.get("aws", ""),
            gcp_metadata_url=facts.metadata_urls.get("gcp", ""),
            azure_metadata_url=facts.metadata_urls.get("azure", ""),
        ),
        report=_report(manifest, facts),
        code=_code(manifest, facts),
    )


def _code(manifest: Manifest, facts: LaunchFacts) -> CodeShip | None:
    pin = manifest.code.pin if manifest.code is not None else None
    if pin is None:
        return None
    store = job_state_uri(manifest, facts.state_store) or ""
    return CodeShip(pin.commit, pin.sha256, store_uri=store, store_endpoint=facts.store_endpoint if store else "")


def _report(manifest: Manifest, facts: LaunchFacts) -> ReportSpec | None:
    uri = launch_state_uri(manifest, facts.launch_id, facts.state_store)
    if uri is None:
        return None
    return ReportSpec(uri=uri, endpoint=facts.store_endpoint, interval_s=facts.report_interval_s,
                      log_chunk_bytes=LOG_CHUNK_BYTES)


def _launch_env(facts: LaunchFacts) -> dict[str, str]:
    if not facts.launch_id:
        return {}
    return {"ORCH_LAUNCH_ID": facts.launch_id, "ORCH_RESTORE_HINT": facts.restore_hint}
