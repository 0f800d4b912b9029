"""What one machine of one attempt adds to a job's manifest to render what runs there: ``LaunchFacts``.

The manifest cannot know where it will run; the attempt knows the node rank, the launch id, the
checkpoint the store expects it to restore, node 0's address, and the offer's GPUs; ``NodeSettings``
(per provider or machine) know the rest. ``orchestrator.runtime.from_manifest.render_input_for`` maps the
manifest plus these facts onto one node's RenderInput: the one render path for the SSH bootstrapper, the
monitor and the startup script a machine boots with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.runtime.from_manifest import DEFAULT_MASTER_PORT, LaunchFacts
from orchestrator.runtime.render_input import CloudKind
from providers.fabric import Fabric

__all__ = ["CONTAINER_PROVIDERS", "NodeSettings", "launch_facts", "node_settings_for"]

#: Providers whose machine IS the job's container (a pod started from the manifest's ``image``): orch's boot and
#: the job run inside it, with no Docker. VM clouds boot their machine image and run the job in ``image``.
CONTAINER_PROVIDERS = frozenset({"runpod", "vastai"})


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """Facts about one machine that no manifest can know. Defaults leave the rendered value alone.

    ``cloud`` None: derived from the provider name (aws, gcp, azure; every other provider polls
    nothing). Metadata URLs: empty means the cloud's real link-local address. ``master_port``: where a
    machine cannot use the default port (several test "machines" share one loopback).
    """

    cloud: CloudKind | None = None
    aws_metadata_url: str = ""
    gcp_metadata_url: str = ""
    azure_metadata_url: str = ""
    master_port: int | None = None
    store_endpoint: str = ""          # an S3-compatible endpoint for the checkpoint store (MinIO, R2, tests)
    socket_ifname: str = ""           # multi-node: the interface of the machine's private network (NCCL, gloo)
    sample_interval_s: float = 5.0
    #: How often the agent asks the metadata service for a notice: a notice heard a second late costs the
    #: relaunch that second (a local request; the agent's loop turns once a second anyway).
    notice_interval_s: float = 1.0
    report_interval_s: float = 10.0   # the agent reports to the store at least this often (its heartbeat)


def node_settings_for(table: Mapping[str, NodeSettings], provider: str, instance_id: str | None = None
                      ) -> NodeSettings:
    """``"<provider>/<instance id>"`` first, then ``"<provider>"``, else defaults."""
    return ((table.get(f"{provider}/{instance_id}") if instance_id else None) or table.get(provider)
            or NodeSettings())


def _cloud_of(provider: str) -> CloudKind:
    try:
        return CloudKind(provider)
    except ValueError:
        return CloudKind.NONE


def launch_facts(job: JobRecord, attempt: AttemptRecord, node: NodeSettings = NodeSettings(),
                 master: NodeSettings | None = None, *, fabric: Fabric | None = None,
                 state_store: str = "") -> LaunchFacts:
    """The facts of ``attempt`` on its machine (pure). A rank > 0 of a gang joins node 0's rendezvous:
    ``attempt.master_addr`` (the engine fills it from node 0's instance) and node 0's ``master`` settings'
    port. Before node 0 is known (a boot script rendered at launch) the address is loopback. ``fabric``: the
    machine's RDMA fabric as launched (``Instance.fabric``), unknown before the machine exists. ``state_store``:
    the daemon-wide report store for jobs without a checkpoint store."""
    port_from = master if attempt.node_rank > 0 and master is not None else node
    urls = {"aws": node.aws_metadata_url, "gcp": node.gcp_metadata_url, "azure": node.azure_metadata_url}
    return LaunchFacts(
        node_rank=attempt.node_rank, master_addr=attempt.master_addr or "127.0.0.1",
        master_port=port_from.master_port or DEFAULT_MASTER_PORT, gpus_per_node=attempt.offer.gpu_count,
        interconnect=attempt.offer.interconnect, cloud=node.cloud or _cloud_of(attempt.offer.provider),
        metadata_urls={k: v for k, v in urls.items() if v}, store_endpoint=node.store_endpoint,
        socket_ifname=node.socket_ifname, fabric=fabric, sample_interval_s=node.sample_interval_s,
        notice_interval_s=node.notice_interval_s, launch_id=attempt.launch_id,
        restore_hint=attempt.checkpoint_restored or "", state_store=state_store,
        report_interval_s=node.report_interval_s, in_container=attempt.offer.provider in CONTAINER_PROVIDERS,
    )
