"""Which multi-GPU machines link their GPUs with NVLink/NVSwitch: one rule for the shipped and refreshed rows."""

from __future__ import annotations

from providers.gpus import Interconnect

# Markers in instance type names of multi-GPU machines whose GPUs talk over NVLink/NVSwitch. Else PCIe.
NVLINK_TYPES: dict[str, tuple[str, ...]] = {
    "aws": ("p3.8xlarge", "p3.16xlarge", "p3dn.", "p4d.", "p4de.", "p5.48xlarge", "p5e", "p5en.", "p6-"),
    "gcp": ("a2-", "a3-", "a4-", "n1-standard-8+8xV100", "n1-standard-8+4xV100", "n1-standard-8+2xV100"),
    "azure": ("Standard_ND96", "Standard_NC24rs_v3"),
    "lambda": ("_sxm", "gpu_8x_v100", "gpu_8x_a100", "gpu_4x_a100", "gpu_2x_a100"),
    "runpod": ("H100-SXM", "SXM"),
    "vastai": ("SXM",),
}


def interconnect_for(provider: str, instance_type: str, gpu_count: int) -> Interconnect:
    if gpu_count > 1 and any(marker in instance_type for marker in NVLINK_TYPES.get(provider, ())):
        return Interconnect.NVLINK
    return Interconnect.PCIE
