"""Settings for the GCP adapter (SDK-free). Credentials are NOT here: Application Default Credentials
(``gcloud auth application-default login``, GOOGLE_APPLICATION_CREDENTIALS, a metadata server) find them.

``project`` may be left unset: the adapter resolves it lazily from ADC's project or GOOGLE_CLOUD_PROJECT,
so importing or validating these settings never touches google.auth.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from providers.fabric import Fabric
from providers.settings_base import RetrySettings, SshIngressSettings

#: A public Deep Learning VM image family with NVIDIA drivers and CUDA (driver installed at first boot).
DEFAULT_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11-py310"


#: How many GPU NICs an A3 High VM takes for GPUDirect-TCPX (one per pair of GPUs): ``gpu_networks`` names as many.
TCPX_GPU_NICS = 4

#: The scope Google recommends with a service account: access is then governed by the account's IAM roles.
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class GpuNetwork(BaseModel):
    """One of the VPC networks (and its subnet in the gang's region) an A3 High VM's GPU NICs sit on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    network: str                               # global/networks/N (or a full URL)
    subnetwork: str                            # regions/R/subnetworks/S


class Settings(RetrySettings, SshIngressSettings):
    """What the GCP adapter needs besides credentials.

    ``ssh_ingress_cidrs``: orch keeps a firewall rule per network admitting TCP 22 from these ranges to its
    instances' ``orch-<owner>`` network tag ([], the default: no SSH rule; the rule admitting traffic among
    those instances is kept either way). ``service_account`` (an email) runs the node as
    that account with ``service_account_scopes``, so the node reaches the checkpoint bucket through its
    identity (the metadata server) and no key rides on it; None: the instance gets no service account.
    ``gpu_networks``: the four VPC networks (one subnet each) the GPU NICs of a multi-node ``a3-highgpu-8g``
    gang sit on for GPUDirect-TCPX (providers/gcp/placement.py); empty: such a gang is refused at launch.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    project: str | None = None                 # None: ADC's project, else GOOGLE_CLOUD_PROJECT
    zones: list[str] = Field(default_factory=list)   # where to launch; a region with none here -> "<region>-a"
    api_endpoint: str | None = None            # e.g. http://127.0.0.1:PORT for the test fake
    network: str = "global/networks/default"
    subnetwork: str | None = None              # regions/R/subnetworks/S; None: the network's auto subnet
    gpu_networks: list[GpuNetwork] = Field(default_factory=list)   # A3 High GPUDirect-TCPX: four, in order
    external_ip: bool = True                   # an ephemeral public IP, so orch can SSH in
    image: str = DEFAULT_IMAGE
    disk_gb: int | None = None                 # when the job names no resources.disk_gb; None: 100
    disk_type: str = "pd-balanced"
    spot_termination_action: str = Field(default="STOP", pattern="^(STOP|DELETE)$")
    ssh_user: str = "root"
    service_account: str | None = None
    service_account_scopes: list[str] = Field(default_factory=lambda: [CLOUD_PLATFORM_SCOPE])
    anonymous_credentials: bool = False        # tests only: no ADC lookup at all
    timeout_s: float = 30.0                    # per HTTP call
    operation_timeout_s: float = 300.0         # how long launch waits for the insert operation


    @property
    def login_user(self) -> str:
        return self.ssh_user

    def fabric_ready(self, fabric: Fabric) -> bool:
        """providers.fabric.FabricSetup: GPUDirect-TCPX needs its four GPU networks; nothing else needs any."""
        return fabric is not Fabric.GPUDIRECT_TCPX or len(self.gpu_networks) == TCPX_GPU_NICS

    def zone_for(self, region: str, zone: str | None = None) -> str:
        """The zone to launch an offer in: its own zone, else the first configured one in its region."""
        if zone:
            return zone
        for z in self.zones:
            if z.rsplit("-", 1)[0] == region:
                return z
        return f"{region}-a"

    def zones_in(self, region: str) -> list[str]:
        return [z for z in self.zones if z.rsplit("-", 1)[0] == region] or [f"{region}-a"]
