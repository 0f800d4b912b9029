"""The provider protocol and the typed values that cross it.

``providers`` knows clouds and nothing about jobs. Everything here is a frozen value: adapters return
them, the orchestrator stores and compares them. No dicts cross this boundary.

Owning what we launch: every instance carries orch's ``launch_id`` and ``owner`` in its tags, labels
or name (see ``instance_name``), so that a crash between "the cloud said yes" and "the row was
written" is healed by adoption or garbage collection rather than leaking a paid machine.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

from providers.gpus import Interconnect
from providers.offer import Availability, GpuRequest, Market, Offer, OfferOrigin

if TYPE_CHECKING:
    from providers.fabric import Fabric

__all__ = [
    "TAG_JOB",
    "TAG_LAUNCH_ID",
    "TAG_OWNER",
    "Availability",
    "Capability",
    "CloudResource",
    "GpuRequest",
    "Instance",
    "InstanceState",
    "Interconnect",
    "LaunchSpec",
    "Market",
    "Offer",
    "OfferOrigin",
    "Provider",
    "ResourceKind",
    "instance_name",
    "new_launch_id",
    "parse_instance_name",
]

# Tag keys on clouds that have key/value tags (AWS, Azure). GCP labels use LABEL_* (no ':' allowed).
TAG_LAUNCH_ID = "orch:launch-id"
TAG_OWNER = "orch:owner"
TAG_JOB = "orch:job"
LABEL_LAUNCH_ID = "orch-launch-id"
LABEL_OWNER = "orch-owner"
LABEL_JOB = "orch-job"

# An owner: an RFC 1035 label of at most 31 characters. It ends with a letter or digit because GCE's network tag
# ``orch-<owner>`` (on every VM and in every firewall rule orch makes) must (compute v1 Discovery, Tags.items:
# "Each tag must be 1-63 characters long, and comply with RFC1035"): GCE refuses a tag ending in '-'.
_LABEL_SAFE = re.compile(r"^[a-z](?:[a-z0-9-]{0,29}[a-z0-9])?$")


class Capability(StrEnum):
    SPOT = "spot"                           # can launch an interruptible/spot instance
    STOP = "stop"                           # can stop (not terminate) and keep the disk
    MULTI_NODE = "multi-node"
    PREEMPTION_NOTICE = "preemption-notice"  # the instance gets a notice before reclaim
    TAGS = "tags"                            # key/value tags; otherwise orch encodes ids in the name
    LIVE_OFFERS = "live-offers"              # offers() returns live prices/capacity without launching
    HOST_KEYS = "host-keys"                  # the API exposes the instance's SSH host keys
    CONFIG_OFFERS = "config-offers"          # offers() lists configured machines from settings alone: no cloud call


class InstanceState(StrEnum):
    """The cloud's word for an instance, normalised; ``Instance.raw_state`` keeps the provider's own.

    ``UNREACHABLE``: the cloud has lost contact with the machine (Vast ``unknown``/``offline``: no heartbeat
    from the host; Lambda ``unhealthy``; GCE ``REPAIRING``; Azure ``PowerState/unknown``). It is NOT gone:
    the cloud still lists it, it may bill, and it may come back. Callers give it a grace period before they
    count the node as lost (and then terminate it); they must never read it as PREEMPTED at once.
    """

    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    TERMINATED = "terminated"
    PREEMPTED = "preempted"
    UNREACHABLE = "unreachable"

    @property
    def is_gone(self) -> bool:
        """True when the machine no longer bills compute (it may still bill disk when STOPPED)."""
        return self in GONE_INSTANCE_STATES


#: The one definition of "gone": the machine no longer runs (the store's queries use these values too).
GONE_INSTANCE_STATES: frozenset[InstanceState] = frozenset({InstanceState.TERMINATED, InstanceState.PREEMPTED})

#: The states a machine's compute is billed in, unless its provider says otherwise for the state it lists
#: (``Instance.billing``): running, or unreachable (the cloud lost contact, and still bills). AWS's own table
#: bills only ``running`` among pending/running/stopping/stopped/shutting-down.
COMPUTE_BILLING_STATES: frozenset[InstanceState] = frozenset({InstanceState.RUNNING, InstanceState.UNREACHABLE})

#: The states whose machine is shown burning money now (``orch status``, the console's fleet): asked for, running,
#: stopping, or unreachable (the cloud's still, and still billed). The engine's spend accrual counts its own set.
BURNING_INSTANCE_STATES: frozenset[InstanceState] = frozenset({
    InstanceState.PENDING, InstanceState.RUNNING, InstanceState.STOPPING, InstanceState.UNREACHABLE})


#: The disk a launch rents when neither the job (resources.disk_gb) nor the provider's settings name one.
DEFAULT_DISK_GB = 100


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything a provider needs to launch one instance.

    ``launch_id`` is orch's idempotency key: launching the same spec twice yields one instance.
    ``startup_script`` runs once at first boot (user data, startup-script metadata, custom data).
    ``max_price_hr`` caps a spot/bid price where the market takes one (Azure maxPrice, Vast bid).
    ``gang``: for a job on more than one node, the key its nodes of one start share (the same on every
    node, different for the next start); a cloud that can places them together under it. Empty: one node.
    ``disk_gb``: the job's ``resources.disk_gb``; None when the job names none, and then the provider rents
    its own setting's disk where it has one, else DEFAULT_DISK_GB (:meth:`disk_size`), the disk its offers
    were priced with.
    """

    launch_id: str
    owner: str
    job: str
    offer: Offer
    ssh_public_key: str = ""
    startup_script: str = ""
    image: str | None = None
    disk_gb: int | None = None
    max_price_hr: float | None = None
    node_rank: int = 0
    gang: str = ""

    @property
    def name(self) -> str:
        return instance_name(self.owner, self.launch_id)

    def disk_size(self, setting: int | None = None) -> int:
        """The boot/local disk to rent, GB: the job's, else the provider's ``setting``, else DEFAULT_DISK_GB.
        One rule for every provider, so the disk a quote priced is the disk the launch rents."""
        if self.disk_gb is not None:
            return self.disk_gb
        return setting if setting is not None else DEFAULT_DISK_GB


@dataclass(frozen=True, slots=True)
class Instance:
    """An instance as the cloud reports it now, normalised.

    ``raw_state`` / ``raw_reason`` keep the provider's own words (``Server.SpotInstanceTermination``,
    ``compute.instances.preempted``, Vast ``stopped``...) for the audit log.
    """

    provider: str
    instance_id: str
    launch_id: str | None
    owner: str | None
    state: InstanceState
    instance_type: str
    region: str
    zone: str | None = None
    market: Market = Market.ON_DEMAND
    job: str | None = None
    raw_state: str = ""
    raw_reason: str | None = None
    public_ip: str | None = None
    private_ip: str | None = None
    ssh_port: int = 22
    ssh_user: str = "root"
    host_keys: tuple[str, ...] = ()             # "ssh-ed25519 AAAA..." lines where the API exposes them
    created_at: datetime | None = None
    price_hr: float | None = None
    extra: tuple[tuple[str, str], ...] = field(default=())
    #: The RDMA fabric this machine, as launched, shares with its peers (providers/fabric.py); None: none known.
    fabric: Fabric | None = None
    #: Whether the cloud bills compute for the machine in the state it lists, where the provider's own documentation
    #: says so state by state (Azure bills a VM Starting, Stopping and Stopped-allocated: states orch's
    #: ``InstanceState`` folds together with unbilled ones); None: ``COMPUTE_BILLING_STATES`` decides.
    billing: bool | None = None

    @property
    def bills(self) -> bool:
        """Whether the machine's compute is billed now (see ``billing``)."""
        return self.state in COMPUTE_BILLING_STATES if self.billing is None else self.billing


class ResourceKind(StrEnum):
    """What orch creates besides instances, so that a network admits SSH (and a key can log in)."""

    SECURITY_GROUP = "security-group"                  # AWS: orch-<owner> per VPC, ingress 22
    KEY_PAIR = "key-pair"                              # AWS: orch-<launch id>, the job's public key
    FIREWALL_RULE = "firewall-rule"                    # GCP: per network, for the orch-<owner> network tag
    PUBLIC_IP = "public-ip"                            # Azure: <vm name>-pip, one per VM
    NETWORK_SECURITY_GROUP = "network-security-group"  # Azure: orch-<owner>-ssh-<region>, shared
    NETWORK_INTERFACE = "network-interface"            # Azure: <vm name>-nic, one per VM
    PLACEMENT_GROUP = "placement-group"                # orch-<owner>-<gang>, one per gang: AWS cluster group,
    #                                                    GCP compact placement policy, Azure proximity group
    AVAILABILITY_SET = "availability-set"              # Azure: orch-<owner>-<gang>, an InfiniBand gang's VMs


@dataclass(frozen=True, slots=True)
class CloudResource:
    """A resource orch created besides an instance, as the cloud reports it now.

    ``resource_id`` is the provider's handle, what ``delete_network_resource`` needs (an AWS
    ``<region>/sg-...``, a GCE firewall name, an ARM resource id). ``in_use`` says whether something
    still uses it (an instance, a NIC) at listing time. ``created_at`` is None where the cloud does not
    report a creation time (AWS security groups). ``launch_id`` is set for per-launch resources.
    """

    provider: str
    kind: ResourceKind
    resource_id: str
    name: str
    owner: str | None
    in_use: bool
    created_at: datetime | None = None
    launch_id: str | None = None
    region: str | None = None

    @property
    def key(self) -> tuple[str, ResourceKind, str]:
        """Identity across listings (for a garbage collector's first-seen bookkeeping)."""
        return (self.provider, self.kind, self.resource_id)


def new_launch_id(store_id: str = "") -> str:
    """A fresh launch id: short, lowercase, DNS- and label-safe (GCP names, Lambda names, Vast labels).

    ``store_id`` (8 hex digits, orchestrator/store/identity.py) rides in it as ``l<12 hex>s<store id>``, so a
    machine's tags name the store that launched it; without one: ``l<12 hex>`` (the form before stores had
    identities)."""
    import secrets  # hashlib behind it costs `orch quote` ~4 ms at import

    return "l" + secrets.token_hex(6) + (f"s{store_id}" if store_id else "")


_LAUNCH_ID_RE = re.compile(r"^l[0-9a-f]{12}(?:s(?P<store>[0-9a-f]{8}))?$")


def launch_store(launch_id: str | None) -> str | None:
    """The store id a launch id carries; None when it carries none (made before stores had identities, or
    not made by ``new_launch_id``)."""
    m = _LAUNCH_ID_RE.fullmatch(launch_id or "")
    return m.group("store") if m else None


def validate_owner(owner: str) -> str:
    if not _LABEL_SAFE.fullmatch(owner):
        raise ValueError(
            f"owner {owner!r} must be lowercase letters, digits and '-', start with a letter, end with a letter or "
            "digit, at most 31 chars"
        )
    return owner


def instance_name(owner: str, launch_id: str) -> str:
    """The instance name that carries orch's ids on clouds without tags: ``orch-<owner>-<launch_id>``."""
    return f"orch-{owner}-{launch_id}"


_NAME_RE = re.compile(r"^orch-(?P<owner>[a-z][a-z0-9-]*)-(?P<launch_id>l[0-9a-f]{12}|[a-z0-9]+)$")


def parse_instance_name(name: str | None) -> tuple[str, str] | None:
    """Inverse of ``instance_name``: (owner, launch_id), or None when orch did not name it."""
    if not name:
        return None
    m = _NAME_RE.fullmatch(name)
    if m is None:
        return None
    return m.group("owner"), m.group("launch_id")


class Provider(ABC):
    """One cloud. Synchronous, small, and honest about what it did.

    Contracts every adapter keeps (tests/contract holds them to it):

    * ``launch`` is idempotent on ``spec.launch_id``: if an instance with that launch id exists it is
      returned and nothing new is created. It returns as soon as the cloud accepted the request, without
      waiting for boot (state PENDING is fine).
    * ``get`` returns None when the cloud no longer knows the instance.
    * ``list_instances(owner)`` returns every instance orch launched for ``owner`` that the cloud still
      reports, found by tag/label/name, including terminated-but-listed ones.
    * ``terminate`` of a missing or already terminated instance succeeds (missing == success).
    * ``list_network_resources(owner)`` returns what orch created for ``owner`` besides instances (security
      groups, firewall rules, public IPs, NSGs, NICs, key pairs), with ``in_use``; ``delete_network_resource``
      deletes one, missing == success, and raises ResourceInUseError while the cloud says it is still used.
      Providers that create nothing besides instances keep the defaults ([] and a no-op).
    * Errors are raised only from providers.errors; transient ones (5xx, throttling) are retried inside
      the adapter with backoff and a deadline; capacity and quota errors are raised at once so the
      planner moves on to the next offer.
    """

    name: ClassVar[str]
    capabilities: ClassVar[frozenset[Capability]]

    @abstractmethod
    def check_credentials(self) -> None:
        """Raise AuthError (with a fix-it hint) unless the provider can be called."""

    @abstractmethod
    def offers(self, req: GpuRequest) -> list[Offer]:
        """Offers matching ``req``: live prices/capacity where the API has them, else catalog offers."""

    @abstractmethod
    def launch(self, spec: LaunchSpec) -> Instance:
        """Create (or find, by launch id) the instance for ``spec``; return without waiting for boot."""

    @abstractmethod
    def get(self, instance_id: str) -> Instance | None:
        """The instance now, or None if the cloud does not know it."""

    @abstractmethod
    def list_instances(self, owner: str) -> list[Instance]:
        """Every instance this owner's orch launched, by tag/label/name."""

    @abstractmethod
    def terminate(self, instance_id: str) -> None:
        """Destroy the instance. Missing means success."""

    def list_network_resources(self, owner: str) -> list[CloudResource]:
        """What orch created for ``owner`` besides instances, found by tag/label/name, with ``in_use``.

        Default: nothing (the provider creates nothing besides instances). See providers.leftovers for
        which of them a garbage collector may delete.
        """
        return []

    def delete_network_resource(self, resource: CloudResource) -> None:  # noqa: B027 - optional, not abstract
        """Delete ``resource``. Idempotent: missing == success. Raises ResourceInUseError while it is used.

        Default: nothing to delete (a provider that creates nothing has nothing of orch's to remove).
        """

    def stop(self, instance_id: str) -> None:
        """Stop, keeping the disk. Only for providers with Capability.STOP."""
        from providers.errors import InvalidRequestError

        raise InvalidRequestError(f"{self.name} cannot stop instances; terminate instead", provider=self.name)

    def close(self) -> None:  # noqa: B027 - optional hook, not abstract on purpose
        """Release clients and connections."""
