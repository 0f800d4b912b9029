"""Software facts a GPU must match: the CUDA version in the job's image, and bf16/fp8 support.

The minimum CUDA per architecture is the first CUDA Toolkit release that compiles for it (NVIDIA CUDA
Toolkit release notes; the "CUDA GPUs" compute-capability list): Volta sm_70 9.0 (dropped in 13.0), Turing
sm_75 10.0, A100 sm_80 11.0, other Ampere sm_86 11.1, Ada sm_89 and Hopper sm_90 11.8, Blackwell sm_100 12.8.
FP8 matrix multiplies need cuBLASLt support: Hopper from 11.8, Ada from 12.1 (Transformer Engine's
requirement). Provider images' drivers are not in the catalog, so they are not checked.
"""

from __future__ import annotations

import re

from orchestrator.fit.memory import Precision
from providers.gpus import GpuModel

_MIN_CUDA = {"volta": (9, 0), "turing": (10, 0), "ampere": (11, 1), "ada": (11, 8), "hopper": (11, 8),
             "blackwell": (12, 8)}
_MAX_CUDA_MAJOR = {"volta": 12}
_FP8_CUDA = {"hopper": (11, 8), "ada": (12, 1), "blackwell": (12, 8)}
_CUDA_RE = re.compile(r"cuda[-_]?(\d{2})\.(\d)|\bcu(\d{2})(\d)\b", re.IGNORECASE)


def image_cuda(image: str) -> tuple[int, int] | None:
    """The CUDA version an image's tag names (``...-cuda12.4-...``, ``...cu121...``), or None."""
    tag = image.rpartition(":")[2] if ":" in image else image
    m = _CUDA_RE.search(tag)
    if not m:
        return None
    major, minor = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    return int(major), int(minor)


def min_cuda(gpu: GpuModel) -> tuple[int, int] | None:
    if gpu.name.startswith("A100"):
        return (11, 0)
    return _MIN_CUDA.get(gpu.architecture)


def compat_warnings(gpu: GpuModel, image: str | None, precision: Precision | None) -> list[str]:
    """Every mismatch between the image / precision and ``gpu``, one sentence each."""
    out: list[str] = []
    if precision is Precision.BF16 and not gpu.bf16:
        out.append(f"bf16 needs Ampere or newer; {gpu.name} is {gpu.architecture}: use fp16")
    if precision is Precision.FP8 and not gpu.fp8:
        out.append(f"fp8 needs Hopper, Ada or Blackwell; {gpu.name} is {gpu.architecture}")
    cuda = image_cuda(image) if image else None
    if cuda is None:
        return out
    text = f"{cuda[0]}.{cuda[1]}"
    floor = min_cuda(gpu)
    if floor and cuda < floor:
        out.append(f"image {image} has CUDA {text}; {gpu.name} ({gpu.architecture}) needs CUDA "
                   f"{floor[0]}.{floor[1]} or newer")
    ceiling = _MAX_CUDA_MAJOR.get(gpu.architecture)
    if ceiling is not None and cuda[0] > ceiling:
        out.append(f"image {image} has CUDA {text}, which no longer supports {gpu.architecture} ({gpu.name})")
    fp8_floor = _FP8_CUDA.get(gpu.architecture)
    if precision is Precision.FP8 and fp8_floor and cuda < fp8_floor:
        out.append(f"fp8 on {gpu.architecture} needs CUDA {fp8_floor[0]}.{fp8_floor[1]}+; image has {text}")
    return out
