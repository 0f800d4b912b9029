"""Settings for the SSH provider: machines you already own, declared in orch's config.

SDK-free (pydantic only). Example (``~/.config/orch/config.yaml``)::

    providers:
      ssh:
        key_path: ~/.ssh/id_ed25519          # default client key for every host
        price_hr: 0.0                        # internal price per host-hour (default 0)
        hosts:
          - name: box1
            address: 10.0.0.5
            user: ubuntu
            gpu: RTX4090                     # canonical name or alias (providers.gpus)
            gpu_count: 2
            vcpus: 32
            memory_gb: 128
            disk_gb: 2000                    # optional: lets orch plan jobs by their disk_gb
            host_key: "ssh-ed25519 AAAAC3Nz..."   # or host_key_fingerprint: "SHA256:..."

See docs/providers/ssh.md for the host key rules and what launch/terminate mean here.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from providers.gpus import Interconnect, resolve_gpu

_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def orch_data_dir() -> Path:
    """orch's data dir (same rule as orchestrator.config.file.data_dir; providers must not import orchestrator)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "orch"


class HostSettings(BaseModel):
    """One machine. ``name`` is its instance id and offer instance_type; it must be unique."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    address: str
    port: int = Field(22, ge=1, le=65535)
    user: str = "root"
    key_path: Path | None = None            # None: the provider-wide key_path
    gpu: str
    gpu_count: int = Field(1, ge=1)
    vcpus: float = Field(0.0, ge=0)
    memory_gb: float = Field(0.0, ge=0)
    disk_gb: float | None = Field(None, ge=0)  # free local disk for jobs; None: not declared (not planned by it)
    region: str = "onprem"
    interconnect: Interconnect | None = None   # None: the GPU model's usual one (PCIe for a single GPU)
    infiniband: bool = False                # the site's hosts share an InfiniBand (or RoCE) fabric NCCL can use
    price_hr: float | None = Field(None, ge=0)  # None: the provider-wide price_hr
    host_key: str | None = None              # "ssh-ed25519 AAAA..." (ssh-keyscan / /etc/ssh/*.pub)
    host_key_fingerprint: str | None = None  # "SHA256:..." (ssh-keygen -lf)
    workdir: str | None = None               # where orch works on the machine; None: the login dir

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _HOST_NAME.fullmatch(v):
            raise ValueError("host name must be letters, digits, '.', '_' or '-' (at most 63), e.g. 'box1'")
        return v

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v: str) -> str:
        return resolve_gpu(v).name

    @field_validator("host_key")
    @classmethod
    def _host_key(cls, v: str | None) -> str | None:
        if v is None:
            return None
        parts = v.split()
        try:
            if len(parts) < 2:
                raise ValueError
            base64.b64decode(parts[1], validate=True)
        except (ValueError, binascii.Error):
            raise ValueError("host_key must be a public key line like 'ssh-ed25519 AAAA...'") from None
        return f"{parts[0]} {parts[1]}"

    @field_validator("host_key_fingerprint")
    @classmethod
    def _fingerprint(cls, v: str | None) -> str | None:
        if v is None:
            return None
        v = v.strip()
        if not v.startswith("SHA256:") or len(v) < 20:
            raise ValueError("host_key_fingerprint must look like 'SHA256:...' (ssh-keygen -lf KEY.pub)")
        return v.rstrip("=")

    @property
    def vram_gb(self) -> float:
        return float(resolve_gpu(self.gpu).vram_gb)

    @property
    def resolved_interconnect(self) -> Interconnect:
        """The declared link, else PCIe for one GPU (no peer to link to: the catalog's one-GPU rows say PCIe
        too, so ``--interconnect`` filters a one-GPU host as it filters a cloud's), else the model's usual one."""
        if self.interconnect is not None:
            return self.interconnect
        return Interconnect.PCIE if self.gpu_count == 1 else resolve_gpu(self.gpu).default_interconnect


class Settings(BaseModel):
    """What the SSH provider needs: the hosts, a client key, where reservations and host keys live."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hosts: tuple[HostSettings, ...] = ()
    key_path: Path = Path("~/.ssh/id_ed25519")
    price_hr: float = Field(0.0, ge=0)          # internal price of a host-hour unless a host sets its own
    verify_command: str = "nvidia-smi -L"       # must exit 0 on a usable machine
    verify_timeout_s: float = Field(30.0, gt=0)
    stop_grace_s: float = Field(10.0, ge=0, le=600)  # SIGTERM -> SIGKILL when a launch ends (providers/ssh/cleanup.py)
    state_dir: Path | None = None               # reservations; None: <orch data dir>/ssh
    known_hosts: Path | None = None             # pinned host keys; None: <orch data dir>/known_hosts
    connect_timeout_s: float = Field(10.0, gt=0)
    auth_timeout_s: float = Field(15.0, gt=0)
    reconnect_deadline_s: float = Field(20.0, ge=0)

    @model_validator(mode="after")
    def _unique_names(self) -> Settings:
        names = [h.name for h in self.hosts]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"host names must be unique; repeated: {', '.join(dupes)}")
        return self

    @property
    def state_path(self) -> Path:
        return (self.state_dir or orch_data_dir() / "ssh").expanduser()

    @property
    def known_hosts_path(self) -> Path:
        return (self.known_hosts or orch_data_dir() / "known_hosts").expanduser()

    def host(self, name: str) -> HostSettings | None:
        return next((h for h in self.hosts if h.name == name), None)

    def host_key_path(self, host: HostSettings) -> Path:
        return (host.key_path or self.key_path).expanduser()

    def host_price(self, host: HostSettings) -> float:
        return self.price_hr if host.price_hr is None else host.price_hr
