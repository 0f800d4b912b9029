"""``orch smoke``'s targets: per provider, the machine it would launch (a small CPU one where orch knows the
provider's type and price, else the cheapest listed offer) and the most that may cost. Reads offers; launches
nothing (the run is ``smoke.py``'s).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from enum import StrEnum

from providers.base import Availability, GpuRequest, Market, Offer, Provider
from providers.errors import ProviderError
from providers.gpus import Interconnect

#: Providers whose machines boot no script of orch's: the user's own hosts, reserved (nothing is launched) and
#: started over SSH by the engine's bootstrapper, and stopped by the provider's terminate (the launch's processes
#: ended, the host freed).
OVER_SSH = {"ssh": "your own machine: nothing launched, orch starts the agent over SSH and stops it after"}


@dataclass(frozen=True, slots=True)
class CpuType:
    """A small CPU machine type and its on-demand Linux list price per hour in ``priced_in``."""

    instance_type: str
    vcpus: float
    memory_gb: float
    price_hr: float
    priced_in: str
    source: str


#: The machine smoke boots where a provider rents CPU machines: 2 vCPUs, enough for the boot and the agent,
#: none burstable (a T-class machine in "unlimited" mode bills CPU credits on top of its price). Prices are
#: the providers' published on-demand Linux list prices in ``priced_in`` (other regions differ by some per
#: cent), as of ``CPU_PRICES_AS_OF``; the catalog holds GPU machines only, so it cannot price these.
CPU_TYPES: dict[str, CpuType] = {
    "aws": CpuType("m5.large", 2, 8, 0.096, "us-east-1", "https://aws.amazon.com/ec2/pricing/on-demand/"),
    "gcp": CpuType("e2-standard-2", 2, 8, 0.067006, "us-central1",
                   "https://cloud.google.com/compute/vm-instance-pricing"),
    "azure": CpuType("Standard_D2s_v5", 2, 8, 0.096, "eastus",
                     "https://azure.microsoft.com/pricing/details/virtual-machines/linux/"),
}
CPU_PRICES_AS_OF = date(2024, 6, 1)
#: Why a provider gets a GPU machine: it has no CPU machine orch can launch.
NO_CPU = {"vastai": "Vast.ai rents GPU machines only", "lambda": "Lambda rents GPU machines only",
          "runpod": "orch's RunPod adapter launches GPU pods only"}


@dataclass(frozen=True, slots=True)
class SmokeOptions:
    owner: str
    ssh_public_key: str = ""
    timeout_s: float = 900.0            # launch call -> the agent's first report
    teardown_timeout_s: float = 600.0   # terminate -> the cloud lists it gone, and its resources deleted
    poll_s: float = 5.0                 # between two cloud/store reads while waiting

    @property
    def max_hours(self) -> float:
        return (self.timeout_s + self.teardown_timeout_s) / 3600


class MachineKind(StrEnum):
    """What a smoke machine is: the table's KIND column and the JSON's ``kind``."""

    CPU = "cpu"
    GPU = "gpu"

    @classmethod
    def of(cls, offer: Offer | None) -> MachineKind | None:
        """The offer's kind; None where there is no machine."""
        return None if offer is None else cls.GPU if offer.gpu_count else cls.CPU


@dataclass(frozen=True, slots=True)
class SmokeTarget:
    """What smoke would launch on one provider; ``problem`` says why it launches nothing there."""

    provider: str
    offer: Offer | None
    max_cost_usd: float = 0.0
    problem: str = ""
    note: str = ""      # why a GPU machine (the provider has no CPU one)

    @property
    def kind(self) -> MachineKind | None:
        """What the machine is (None when there is none)."""
        return MachineKind.of(self.offer)


def choose_offer(offers: Iterable[Offer]) -> Offer | None:
    """The cheapest offer, on-demand first (a spot machine may be taken back mid-smoke); none known to be out
    of capacity. Ties: fewer GPUs, then by name, so the choice is stable."""
    usable = [o for o in offers if o.availability is not Availability.NOT_AVAILABLE]
    pool = [o for o in usable if o.market is Market.ON_DEMAND] or usable
    return min(pool, key=lambda o: (o.price_hr, o.gpu_count, o.instance_type, o.region, o.zone or ""), default=None)


def cpu_offer(provider: str, place: Offer) -> Offer | None:
    """``CPU_TYPES[provider]`` as an on-demand offer with no GPUs, in ``place``'s region and zone (a place the
    provider is configured for); None where the provider has no CPU type."""
    cpu = CPU_TYPES.get(provider)
    if cpu is None:
        return None
    return Offer(provider=provider, instance_type=cpu.instance_type, region=place.region, zone=place.zone, gpu="",
                 gpu_count=0, vram_gb=0.0, vcpus=cpu.vcpus, memory_gb=cpu.memory_gb, interconnect=Interconnect.PCIE,
                 market=Market.ON_DEMAND, price_hr=cpu.price_hr, price_as_of=CPU_PRICES_AS_OF,
                 price_as_of_approximate=place.region != cpu.priced_in,
                 price_source=f"orch smoke's table: {cpu.source} ({cpu.priced_in})")


def plan_targets(providers: Mapping[str, Provider], opts: SmokeOptions) -> list[SmokeTarget]:
    """Per provider, the machine smoke would launch (a CPU one where ``CPU_TYPES`` has one, in the place of the
    provider's cheapest listed offer) and the most it may cost (its $/h over both timeouts). Asks each provider
    for its offers (a read: nothing is launched)."""
    targets = []
    for name, provider in providers.items():
        try:
            offer = choose_offer(_listed(name, provider))
        except ProviderError as exc:
            targets.append(SmokeTarget(name, None, problem=f"listing offers: {exc}"))
            continue
        if offer is None:
            targets.append(SmokeTarget(name, None, problem="the provider lists no offer"))
            continue
        cpu = cpu_offer(name, offer)
        why_gpu = NO_CPU.get(name, "no CPU machine type known to orch smoke")
        note = OVER_SSH.get(name) or ("" if cpu else f"GPU: {why_gpu}")
        offer = cpu or offer
        targets.append(SmokeTarget(name, offer, round(offer.price_hr * opts.max_hours, 4), note=note))
    return targets


def _listed(name: str, provider: Provider) -> list[Offer]:
    """The provider's one-GPU offers; for your own hosts (listed from the config alone: no call goes out), those
    of the fewest GPUs any host has, up to 16 (a host of 2 GPUs was "the provider lists no offer")."""
    for count in range(1, 17) if name in OVER_SSH else (1,):
        found = provider.offers(GpuRequest(count=count))
        if found:
            return found
    return []
