"""Everything rendering a node's startup script needs, and nothing else.

``orchestrator.runtime.from_manifest.render_input_for`` maps a validated job manifest plus the launch's
facts onto one node's ``RenderInput`` (the only mapping); the renderer turns one ``RenderInput`` into bytes.
Validation lives in ``__post_init__`` so an impossible input never reaches the renderer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import urlsplit

from providers.fabric import Fabric
from providers.gpus import Interconnect

__all__ = [
    "AgentSettings",
    "CheckpointSpec",
    "CloudKind",
    "DataStage",
    "Launcher",
    "NotifyVia",
    "RenderInput",
    "RenderInputError",
    "ReportSpec",
    "ResumeVia",
]

#: Data sources downloaded over HTTP(S) rather than copied from a store.
URL_SCHEMES = ("https://", "http://")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_SIGNAL = re.compile(r"^SIG[A-Z0-9]+$")


class RenderInputError(ValueError):
    """The input cannot be rendered; the message says which field and why."""


class Launcher(StrEnum):
    TORCHRUN = "torchrun"
    ACCELERATE = "accelerate"
    DEEPSPEED = "deepspeed"
    COMMAND = "command"


class ResumeVia(StrEnum):
    ARG = "arg"  # append ``<name> <path>`` to the script's arguments
    ENV = "env"  # export ``<name>=<path>``


class NotifyVia(StrEnum):
    SIGNAL = "signal"  # the agent sends ``signal`` to the job's process group
    FILE = "file"  # the agent creates ``file``; the script polls for it and deletes it


class CloudKind(StrEnum):
    AWS = "aws"
    GCP = "gcp"
    AZURE = "azure"
    NONE = "none"


@dataclass(frozen=True)
class DataStage:
    """Copy ``source`` (s3://, gs://, az://, file:// or a path) to ``path`` on the node before start, or
    download it (https://, http://): to ``path`` itself, or into ``path`` when it ends with ``/``."""

    source: str
    path: str

    @property
    def is_url(self) -> bool:
        return self.source.startswith(URL_SCHEMES)

    @property
    def download_path(self) -> str:
        """Where a URL's download lands: ``path``, or ``path/<the URL's last segment>`` for a directory."""
        if not self.path.endswith("/"):
            return self.path
        name = urlsplit(self.source).path.rstrip("/").rsplit("/", 1)[-1] or "download"
        return self.path + name


@dataclass(frozen=True)
class CheckpointSpec:
    """Where the script checkpoints, where checkpoints are kept durably, how resume and "now" reach it.

    ``store_endpoint`` is for S3-compatible stores (MinIO, R2, moto); empty means AWS itself.
    """

    local_dir: str
    store_uri: str
    resume_via: ResumeVia = ResumeVia.ARG
    resume_name: str = "--resume-from"
    notify_via: NotifyVia = NotifyVia.FILE
    notify_signal: str = "SIGUSR1"
    notify_file: str = ""  # default: <local_dir>/CHECKPOINT_NOW
    store_endpoint: str = ""

    def __post_init__(self) -> None:
        if not self.local_dir:
            raise RenderInputError("checkpoint.dir must not be empty")
        if not self.store_uri:
            raise RenderInputError("checkpoint.store must not be empty")
        if self.resume_via is ResumeVia.ENV and not _ENV_NAME.fullmatch(self.resume_name):
            raise RenderInputError(f"checkpoint.resume.name {self.resume_name!r} is not an environment variable name")
        if self.resume_via is ResumeVia.ARG and not self.resume_name.startswith("-"):
            raise RenderInputError(f"checkpoint.resume.name {self.resume_name!r} must be a flag such as --resume-from")
        if self.notify_via is NotifyVia.SIGNAL and not _SIGNAL.fullmatch(self.notify_signal):
            raise RenderInputError(f"checkpoint.notify.signal {self.notify_signal!r} must look like SIGUSR1")

    @property
    def request_file(self) -> str:
        """The checkpoint-now file (meaningful when ``notify_via`` is FILE)."""
        return self.notify_file or f"{self.local_dir.rstrip('/')}/CHECKPOINT_NOW"


@dataclass(frozen=True)
class ReportSpec:
    """Where this node's agent reports outbound (orchestrator/runtime/node_state.py): its launch's prefix in
    the report store, the store's S3-compatible endpoint if any, how often it reports at the least."""

    uri: str
    endpoint: str = ""
    interval_s: float = 10.0
    log_chunk_bytes: int = 1 << 20
    #: Booted by its user data: the agent starts the job once orch puts ``start.json`` (node_state.START_OBJECT).
    wait_for_start: bool = False
    #: The job's secrets come from ``secrets.json`` in the report prefix, put by orch before the go
    #: (orchestrator/runtime/node_credentials.py), not from the boot payload.
    secrets_from_store: bool = False

    def __post_init__(self) -> None:
        if not self.uri:
            raise RenderInputError("report store must not be empty")
        if self.interval_s <= 0 or self.log_chunk_bytes < 1:
            raise RenderInputError("report interval and log chunk size must be positive")


@dataclass(frozen=True)
class CodeShip:
    """The pinned code pack a node unpacks into its work dir before ``setup`` (orchestrator/runtime/codepack.py):
    the launch puts it there as ``file``; the agent checks ``sha256`` before unpacking."""

    commit: str
    sha256: str
    #: Where a node that boots by itself fetches it (``<store_uri>/code/<file>``: the job's report store, where
    #: orch puts it once before the go); empty: the launch copies it over SSH.
    store_uri: str = ""
    store_endpoint: str = ""

    @property
    def file(self) -> str:
        return f"code-{self.sha256}.tar.gz"

    @property
    def store_object(self) -> str:
        return f"code/{self.file}"


@dataclass(frozen=True)
class AgentSettings:
    """How the on-node agent runs. Empty metadata URLs mean the cloud's real link-local endpoint."""

    status_path: str = "status.json"  # relative paths are relative to the job's work dir
    sample_interval_s: float = 5.0
    #: How often the agent asks the metadata service for a notice: a notice heard a second late costs the
    #: relaunch that second (a local request; the agent's loop turns once a second anyway).
    notice_interval_s: float = 1.0
    window: int = 120
    cloud: CloudKind = CloudKind.NONE
    aws_metadata_url: str = ""
    gcp_metadata_url: str = ""
    azure_metadata_url: str = ""

    def __post_init__(self) -> None:
        if self.sample_interval_s <= 0 or self.notice_interval_s <= 0:
            raise RenderInputError("agent intervals must be positive")
        if self.window < 1:
            raise RenderInputError("agent.window must be 1 or more")


@dataclass(frozen=True)
class RenderInput:
    """One node's share of one job. Tuples, not lists, and sorted env so rendering is deterministic."""

    job_name: str
    launcher: Launcher
    script: str = ""
    args: tuple[str, ...] = ()
    #: accelerate's config file (the manifest's ``run.config``), relative to the work dir: ``--config_file``.
    accelerate_config: str = ""
    command: str = ""
    image: str = ""
    shm_size: str = "16g"
    setup: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    secrets: tuple[str, ...] = ()
    data: tuple[DataStage, ...] = ()
    checkpoint: CheckpointSpec | None = None
    nodes: int = 1
    gpus_per_node: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    interconnect: Interconnect = Interconnect.PCIE
    socket_ifname: str = ""  # multi-node: NCCL/Gloo interface; empty = a hint that excludes lo/docker
    infiniband: bool = False
    #: The node-to-node fabric the machine is launched on (``Instance.fabric``; None: plain TCP). What the
    #: startup script does for it: orchestrator/runtime/fabric_env.py.
    fabric: Fabric | None = None
    #: A gang's rank > 0 rendered before node 0 exists (a boot script): the launcher reads node 0's address from
    #: ``ORCH_MASTER_ADDR_GIVEN``, which the agent sets from orch's start.json, instead of ``master_addr``.
    master_from_start: bool = False
    work_dir: str = ""  # empty: .orch/jobs/<job_name> under the SSH user's home
    agent: AgentSettings = field(default_factory=AgentSettings)
    report: ReportSpec | None = None  # None: the agent reports over no store (SSH only)
    code: CodeShip | None = None  # None: no code pack (the image or setup brings the code)

    def __post_init__(self) -> None:
        if not _JOB_NAME.fullmatch(self.job_name):
            raise RenderInputError(f"job name {self.job_name!r} must be lowercase letters, digits and '-'")
        if self.launcher is Launcher.COMMAND:
            if not self.command:
                raise RenderInputError("launcher 'command' needs a command")
        elif not self.script:
            raise RenderInputError(f"launcher {self.launcher.value!r} needs a script")
        if self.nodes < 1 or self.gpus_per_node < 0:
            raise RenderInputError("nodes must be >= 1 and gpus per node >= 0")
        if not 0 <= self.node_rank < self.nodes:
            raise RenderInputError(f"node rank {self.node_rank} is outside 0..{self.nodes - 1}")
        if not 0 < self.master_port < 65536:
            raise RenderInputError(f"master port {self.master_port} is not a TCP port")
        if not isinstance(self.interconnect, Interconnect):
            raise RenderInputError(f"interconnect {self.interconnect!r} must be nvlink or pcie")
        names = [k for k, _ in self.env]
        for name in [*names, *self.secrets]:
            if not _ENV_NAME.fullmatch(name):
                raise RenderInputError(f"{name!r} is not an environment variable name")
        if set(names) & set(self.secrets):
            raise RenderInputError(f"{sorted(set(names) & set(self.secrets))} are both env and secrets")
        if list(self.env) != sorted(self.env):
            raise RenderInputError("env must be sorted by name (build it with sorted(mapping.items()))")
        if self.image and self.checkpoint and self.checkpoint.notify_via is NotifyVia.SIGNAL:
            # docker's signal proxy delivers to the container's PID 1 only, never to the training ranks.
            raise RenderInputError("with an image, checkpoint notify must be 'file': docker does not deliver "
                                   "signals to the training processes")

    @property
    def resolved_work_dir(self) -> str:
        return self.work_dir or f".orch/jobs/{self.job_name}"

    @property
    def is_multi_node(self) -> bool:
        return self.nodes > 1
