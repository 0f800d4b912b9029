"""Catalog instance types <-> GCE machine types and accelerators. Accelerator-optimized types (a2, a3, g2)
bring their GPUs; the catalog spells an N1 machine with attached GPUs as ``n1-standard-8+4xT4``. SDK-free."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from providers.errors import InvalidRequestError

if TYPE_CHECKING:
    from google.cloud import compute_v1

#: Catalog GPU names on N1 (``n1-standard-8+4xT4``) -> GCE acceleratorType names.
N1_ACCELERATORS = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
                   "P4": "nvidia-tesla-p4", "K80": "nvidia-tesla-k80"}
_N1_TYPE = re.compile(r"^(?P<machine>[a-z0-9]+-[a-z0-9-]+)\+(?P<count>\d+)x(?P<gpu>[A-Za-z0-9]+)$")


def machine_shape(instance_type: str) -> tuple[str, str | None, int]:
    """(machineType, acceleratorType or None, count). Accelerator-optimized types (a2, a3, g2) bring their
    GPUs; catalog N1 types spell the attached GPUs as ``n1-standard-8+4xT4``."""
    m = _N1_TYPE.fullmatch(instance_type)
    if m is None:
        return instance_type, None, 0
    gpu = m.group("gpu").upper()
    if gpu not in N1_ACCELERATORS:
        raise InvalidRequestError(f"unknown N1 accelerator {gpu!r} in {instance_type!r}", provider="gcp")
    return m.group("machine"), N1_ACCELERATORS[gpu], int(m.group("count"))


def catalog_type(machine: str, accelerators: list[compute_v1.AcceleratorConfig]) -> str:
    """Inverse of machine_shape, so an N1 instance reads back with the catalog's instance type."""
    names = {v: k for k, v in N1_ACCELERATORS.items()}
    for acc in accelerators:
        gpu = names.get(acc.accelerator_type.rsplit("/", 1)[-1])
        if gpu:
            return f"{machine}+{acc.accelerator_count}x{gpu}"
    return machine

