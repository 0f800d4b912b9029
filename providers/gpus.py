"""The GPU registry: canonical GPU names, their specs, and alias resolution.

Every layer speaks canonical names (``A100-80G``); providers' own spellings (``A100_SXM4``,
``NVIDIA A100 80GB PCIe``, ``8x H100 (80 GB SXM5)``) are resolved here and nowhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cache


class FormFactor(StrEnum):
    SXM = "sxm"
    PCIE = "pcie"


class Interconnect(StrEnum):
    NVLINK = "nvlink"
    PCIE = "pcie"


@dataclass(frozen=True, slots=True)
class GpuModel:
    """A GPU model as a buyer compares them. ``form_factor`` is the usual one in clouds."""

    name: str
    vram_gb: int
    architecture: str
    bf16: bool
    fp8: bool
    form_factor: FormFactor
    aliases: tuple[str, ...] = ()

    @property
    def default_interconnect(self) -> Interconnect:
        return Interconnect.NVLINK if self.form_factor is FormFactor.SXM else Interconnect.PCIE


GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel("B200-180G", 180, "blackwell", True, True, FormFactor.SXM, ("B200",)),
    GpuModel("H200-141G", 141, "hopper", True, True, FormFactor.SXM, ("H200", "H200 SXM", "H200_SXM")),
    GpuModel(
        "H100-80G", 80, "hopper", True, True, FormFactor.SXM,
        ("H100", "H100 SXM", "H100 SXM5", "H100_SXM", "H100_SXM5", "H100 PCIe", "H100_PCIE", "H100 80GB HBM3",
         "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "H100 80 GB SXM5", "H100 80 GB PCIe"),
    ),
    GpuModel(
        "A100-80G", 80, "ampere", True, False, FormFactor.SXM,
        ("A100-80GB", "A100_SXM4", "A100 SXM4 80GB", "A100 80GB", "A100 SXM4", "A100 PCIE 80GB",
         "NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-80GB", "A100 80 GB SXM4", "A100 80 GB PCIe"),
    ),
    GpuModel(
        "A100-40G", 40, "ampere", True, False, FormFactor.SXM,
        ("A100", "A100 40GB", "A100 SXM4 40GB", "A100_PCIE", "A100 PCIE", "A100 PCIE 40GB",
         "NVIDIA A100-SXM4-40GB", "A100 40 GB SXM4", "A100 40 GB PCIe"),
    ),
    GpuModel("L40S-48G", 48, "ada", True, True, FormFactor.PCIE, ("L40S", "NVIDIA L40S")),
    GpuModel("L40-48G", 48, "ada", True, True, FormFactor.PCIE, ("L40", "NVIDIA L40")),
    GpuModel("L4-24G", 24, "ada", True, True, FormFactor.PCIE, ("L4", "NVIDIA L4")),
    GpuModel("A10G-24G", 24, "ampere", True, False, FormFactor.PCIE, ("A10G", "NVIDIA A10G")),
    GpuModel("A10-24G", 24, "ampere", True, False, FormFactor.PCIE, ("A10", "NVIDIA A10", "A10 24 GB PCIe")),
    GpuModel(
        "RTX4090-24G", 24, "ada", True, True, FormFactor.PCIE,
        ("RTX4090", "RTX 4090", "RTX_4090", "GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ),
    GpuModel(
        "RTXA6000-48G", 48, "ampere", True, False, FormFactor.PCIE,
        ("RTXA6000", "RTX A6000", "RTX_A6000", "A6000", "NVIDIA RTX A6000", "A6000 48 GB PCIe"),
    ),
    GpuModel(
        "V100-16G", 16, "volta", False, False, FormFactor.SXM,
        ("V100", "V100 16GB", "Tesla V100", "Tesla V100-SXM2-16GB", "V100 16 GB SXM2", "V100 16 GB"),
    ),
    GpuModel(
        "V100-32G", 32, "volta", False, False, FormFactor.SXM,
        ("V100-32GB", "V100 32GB", "Tesla V100-SXM2-32GB", "V100 32 GB SXM2"),
    ),
    GpuModel("T4-16G", 16, "turing", False, False, FormFactor.PCIE, ("T4", "Tesla T4", "NVIDIA T4")),
)


def _norm(text: str) -> str:
    """Fold case, vendor words and punctuation so that spellings compare equal."""
    t = text.lower().strip()
    t = re.sub(r"^\s*\d+\s*x\s*", "", t)  # Lambda's "8x H100 (...)" count prefix
    t = re.sub(r"\b(nvidia|geforce|tesla)\b", " ", t)
    t = re.sub(r"\bgib\b|\bgb\b", "g", t)
    t = re.sub(r"[^a-z0-9]+", "", t)
    return t


def _build_index() -> dict[str, GpuModel]:
    index: dict[str, GpuModel] = {}
    for model in GPU_MODELS:
        for spelling in (model.name, *model.aliases):
            index.setdefault(_norm(spelling), model)
        # "A100-80G" also answers to "A100-80GB", "a100:80gb", "A100 80GB": all normalise alike.
    return index


_BY_NAME = {m.name: m for m in GPU_MODELS}


@cache
def _index() -> dict[str, GpuModel]:
    return _build_index()


#: Names longer than this are compared with nothing (no GPU is called that): a megabyte of name costs no
#: more than a typo.
MAX_SUGGEST_LEN = 64


def short_name(name: str, limit: int = 40) -> str:
    """``name`` quoted for a message, cut short when long (user input: keep messages one line)."""
    if len(name) <= limit and name.isprintable():
        return repr(name)
    return repr(name[:limit].encode("unicode_escape").decode()) + f"... ({len(name)} characters)"


class UnknownGpuError(ValueError):
    """A GPU name that no model or alias matches; ``suggestions`` holds the closest canonical names."""

    def __init__(self, name: str, suggestions: list[str]) -> None:
        self.name = name
        self.suggestions = suggestions
        hint = f" (did you mean {' or '.join(suggestions)}?)" if suggestions else ""
        super().__init__(f"unknown GPU {short_name(name)}{hint}")


def _strip_form_factor_words(norm: str) -> str:
    return re.sub(r"(sxm[0-9]?|pcie|hbm[0-9e]*|nvl)", "", norm)


def resolve_gpu(name: str, vram_gb: float | None = None) -> GpuModel:
    """Return the model that ``name`` (canonical, alias or provider spelling) denotes.

    Matching is case- and punctuation-insensitive. Where a provider's name does not say the memory
    (Vast ``A100_PCIE`` comes in 40 and 80 GB), ``vram_gb`` picks the variant of that family with the
    nearest memory. Raises UnknownGpuError with suggestions.
    """
    if len(name) > 200:   # no spelling of any GPU is this long: answer at once, whatever the length
        raise UnknownGpuError(name, [])
    key = _norm(name)
    model = _index().get(key)
    if model is None:
        # Provider spellings add form-factor words and memory in any order: "A100 SXM4 80GB".
        stripped = _strip_form_factor_words(key)
        model = next((m for c, m in _index().items() if _strip_form_factor_words(c) == stripped), None)
    if model is None:
        raise UnknownGpuError(name, suggest_gpus(name))
    if vram_gb is not None:
        family = [m for m in GPU_MODELS if m.name.split("-")[0] == model.name.split("-")[0]]
        model = min(family, key=lambda m: abs(m.vram_gb - vram_gb))
    return model


def suggest_gpus(name: str, n: int = 2) -> list[str]:
    """The ``n`` canonical names closest to ``name``; none for a name longer than MAX_SUGGEST_LEN."""
    import difflib

    if len(name) > MAX_SUGGEST_LEN:
        return []
    key = _norm(name)
    scored: dict[str, float] = {}
    for spelling, model in _index().items():
        ratio = difflib.SequenceMatcher(None, key, spelling).ratio()
        if ratio > scored.get(model.name, 0.0):
            scored[model.name] = ratio
    ranked = sorted(scored.items(), key=lambda kv: -kv[1])
    return [name for name, score in ranked[:n] if score >= 0.5]


def gpu_by_name(canonical: str) -> GpuModel:
    return _BY_NAME[canonical]


def canonical_names() -> list[str]:
    return [m.name for m in GPU_MODELS]
