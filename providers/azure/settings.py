"""Settings for the Azure adapter. SDK-free: importing this module must not import azure.*.

Credentials are deliberately absent: ``DefaultAzureCredential`` finds them (AZURE_CLIENT_ID /
AZURE_TENANT_ID / AZURE_CLIENT_SECRET, managed identity, ``az login``). ``static_token`` exists for
tests against a local fake ARM over http:// only; it is excluded from repr and serialisation.
"""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from providers.settings_base import RetrySettings, SshIngressSettings

_USER_IDENTITY = re.compile(r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/"
                            r"Microsoft\.ManagedIdentity/userAssignedIdentities/[^/]+$", re.IGNORECASE)


#: OSProfile.adminUsername values Azure refuses ("The Admin Username specified is not allowed."): the REST spec's
#: description lists them (azure-mgmt-compute's OSProfile docstring), with a Linux length of 1 to 64; compared without
#: case, as azure-cli's check of the same list does. A VM created with one fails after its NIC and IP are made.
DISALLOWED_ADMIN_USERNAMES = frozenset({
    "administrator", "admin", "user", "user1", "test", "user2", "test1", "user3", "admin1", "1", "123", "a",
    "actuser", "adm", "admin2", "aspnet", "backup", "console", "david", "guest", "john", "owner", "root", "server",
    "sql", "support", "support_388945a0", "sys", "test2", "test3", "user4", "user5"})
ADMIN_USERNAME_MAX = 64


def _env_subscription() -> str | None:
    return os.environ.get("AZURE_SUBSCRIPTION_ID") or None


def _env_resource_group() -> str | None:
    return os.environ.get("ORCH_AZURE_RESOURCE_GROUP") or None


class ImageRef(BaseModel):
    """A marketplace image. The default is Microsoft's Ubuntu 22.04 Data Science VM (NVIDIA drivers, CUDA)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    publisher: str = "microsoft-dsvm"
    offer: str = "ubuntu-hpc"
    sku: str = "2204"
    version: str = "latest"


class Settings(RetrySettings, SshIngressSettings):
    """What the Azure adapter needs besides credentials.

    Every VM orch creates lives in ``resource_group`` (its id is the VM name) and gets one NIC in
    ``subnet_id`` (an existing subnet's full resource id). The region comes from the offer.
    ``base_url`` points both ARM clients at another endpoint (tests: the fake ARM); None means Azure.
    ``create_wait_s`` bounds how long ``launch`` waits on the create operation so that allocation
    failures surface as InsufficientCapacityError; past it, launch returns a PENDING instance.
    ``public_ip``: each VM's NIC gets a Standard static public IP and a shared NSG admitting traffic from
    inside the virtual network and TCP 22 from ``ssh_ingress_cidrs`` only (none by default); False for a
    daemon inside the VNet (private address only; the subnet's own rules apply).
    ``managed_identity``: ``"system"`` (a system-assigned identity) or a user-assigned identity's resource
    id; the node reaches the checkpoint store through it, so no credentials ride on the VM.
    ``ib_image``: the image of a multi-node gang on an InfiniBand (ND) size, whatever ``image`` says: it must
    carry the InfiniBand drivers (the default, Microsoft's Ubuntu HPC image, does; providers/azure/placement.py).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    subscription_id: str | None = Field(default_factory=_env_subscription)
    resource_group: str | None = Field(default_factory=_env_resource_group)
    subnet_id: str | None = None
    image: ImageRef = Field(default_factory=ImageRef)
    ib_image: ImageRef = Field(default_factory=ImageRef)
    admin_username: str = Field("orch", min_length=1, max_length=ADMIN_USERNAME_MAX)
    os_disk_type: str = "Premium_LRS"
    public_ip: bool = True
    managed_identity: str | None = None
    base_url: str | None = None
    static_token: str | None = Field(default=None, repr=False, exclude=True)
    polling_interval_s: float = Field(default=15.0, ge=0)
    create_wait_s: float = Field(default=20.0, ge=0)
    delete_wait_s: float = Field(default=180.0, ge=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    read_timeout_s: float = Field(default=60.0, gt=0)

    @field_validator("admin_username")
    @classmethod
    def _admin_username(cls, value: str) -> str:
        if value.lower() in DISALLOWED_ADMIN_USERNAMES:
            raise ValueError(f"Azure reserves the admin username {value!r} (as it does root, admin, administrator, "
                             "user, test and others) and refuses the VM: choose another, e.g. orch")
        return value

    @field_validator("managed_identity")
    @classmethod
    def _identity(cls, value: str | None) -> str | None:
        if value is None or value == "system" or _USER_IDENTITY.match(value):
            return value
        raise ValueError("managed_identity is 'system' or a user-assigned identity's resource id "
                         "(/subscriptions/S/resourceGroups/G/providers/Microsoft.ManagedIdentity/"
                         "userAssignedIdentities/NAME)")

    @property
    def login_user(self) -> str:
        return self.admin_username
