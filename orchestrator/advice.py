"""Rules of thumb a careful buyer checks on an offer, as short machine-readable flags."""

from __future__ import annotations

from providers.base import Offer

VCPU_PER_GPU = (2.0, 4.0)
RAM_GB_PER_GPU = (8.0, 16.0)


def rule_of_thumb_flags(offer: Offer) -> list[str]:
    """Flags for vCPU/RAM per GPU outside 2–4 vCPU and 8–16 GB (data loading starves, or you overpay).

    A count of 0 means unknown (a machine of yours whose vcpus/memory_gb the config leaves out): no flag."""
    flags: list[str] = []
    v, r = offer.vcpus_per_gpu, offer.memory_gb_per_gpu
    if 0 < v < VCPU_PER_GPU[0]:
        flags.append("low-vcpu-per-gpu")
    elif v > VCPU_PER_GPU[1]:
        flags.append("high-vcpu-per-gpu")
    if 0 < r < RAM_GB_PER_GPU[0]:
        flags.append("low-ram-per-gpu")
    elif r > RAM_GB_PER_GPU[1]:
        flags.append("high-ram-per-gpu")
    return flags
