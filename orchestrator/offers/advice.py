"""Rules of thumb a careful buyer checks on an offer, as short machine-readable flags."""

from __future__ import annotations

from providers.offer import Offer

#: The seed's rule of thumb: a training GPU wants at least 2-4 vCPU and 8-16 GB of RAM to keep it fed.
#: These are minimums: an offer is flagged below the low end; more is never flagged (it costs, it does not starve).
VCPU_PER_GPU = (2.0, 4.0)
RAM_GB_PER_GPU = (8.0, 16.0)


def rule_of_thumb_flags(offer: Offer) -> list[str]:
    """Flags for fewer than 2 vCPU or less than 8 GB RAM per GPU (data loading starves the GPU).

    Offers whose source does not say their vCPU/RAM (``None``, or 0 for a machine of yours whose vcpus/memory_gb
    the config leaves out) get no flag: unknown is shown as unknown.
    """
    flags: list[str] = []
    v, r = offer.vcpus_per_gpu, offer.memory_gb_per_gpu
    if v and v < VCPU_PER_GPU[0]:
        flags.append("low-vcpu-per-gpu")
    if r and r < RAM_GB_PER_GPU[0]:
        flags.append("low-ram-per-gpu")
    return flags
