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
         "NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-80GB", "A100 80 GB SXM4", "A100 80 GB PCIe", "A100X"),
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
        ("V100", "V100 16GB", "Tesla V100", "Tesla V100-SXM2-16GB", "V100 16 GB SXM2", "V100 16 GB",
         "Tesla V100-FHHL-16GB", "Tesla V100-PCIE-16GB"),
    ),
    GpuModel(
        "V100-32G", 32, "volta", False, False, FormFactor.SXM,
        ("V100-32GB", "V100 32GB", "Tesla V100-SXM2-32GB", "V100 32 GB SXM2"),
    ),
    GpuModel("T4-16G", 16, "turing", False, False, FormFactor.PCIE, ("T4", "Tesla T4", "NVIDIA T4")),
    # The rest of what RunPod (REST v1 ``GPUTypeId`` enum), Lambda (instance types' gpu_description) and Vast
    # (gpu_name) list today. A name missing here drops the offer, so each provider's published list is pinned
    # by tests/test_gpu_registry_coverage.py. Left out on purpose: AMD's MI300X (RunPod lists it), because orch's
    # boot and job images assume NVIDIA/CUDA; its offers are dropped with a logged warning, not silently.
    GpuModel("GH200-96G", 96, "hopper", True, True, FormFactor.SXM, ("GH200", "GH200 96GB", "GH200 SXM",
                                                                       "NVIDIA GH200 480GB")),
    GpuModel("H100NVL-94G", 94, "hopper", True, True, FormFactor.PCIE, ("H100 NVL", "H100NVL", "NVIDIA H100 NVL")),
    GpuModel("RTXPRO6000-96G", 96, "blackwell", True, True, FormFactor.PCIE,
             ("RTX PRO 6000", "RTX PRO 6000 Blackwell", "NVIDIA RTX PRO 6000 Blackwell Server Edition",
              "RTX PRO 6000 WS", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition")),
    GpuModel("RTX5090-32G", 32, "blackwell", True, True, FormFactor.PCIE,
             ("RTX5090", "RTX 5090", "RTX_5090", "NVIDIA GeForce RTX 5090")),
    GpuModel("RTX6000ADA-48G", 48, "ada", True, True, FormFactor.PCIE,
             ("RTX 6000 Ada", "RTX 6000Ada", "RTX_6000ADA", "RTX 6000 Ada Generation",
              "NVIDIA RTX 6000 Ada Generation")),
    GpuModel("RTX5000ADA-32G", 32, "ada", True, True, FormFactor.PCIE,
             ("RTX 5000 Ada", "RTX 5000Ada", "RTX 5000 Ada Generation", "NVIDIA RTX 5000 Ada Generation")),
    GpuModel("RTX4000ADA-20G", 20, "ada", True, True, FormFactor.PCIE,
             ("RTX 4000 Ada", "RTX 4000Ada", "RTX 4000 Ada Generation", "NVIDIA RTX 4000 Ada Generation",
              "RTX 4000 SFF Ada", "NVIDIA RTX 4000 SFF Ada Generation")),
    GpuModel("RTX2000ADA-16G", 16, "ada", True, True, FormFactor.PCIE,
             ("RTX 2000 Ada", "RTX 2000 Ada Generation", "NVIDIA RTX 2000 Ada Generation")),
    GpuModel("RTX4080-16G", 16, "ada", True, True, FormFactor.PCIE,
             ("RTX4080", "RTX 4080", "RTX_4080", "NVIDIA GeForce RTX 4080", "RTX 4080S", "RTX 4080 SUPER")),
    GpuModel("RTX4070TI-12G", 12, "ada", True, True, FormFactor.PCIE,
             ("RTX 4070 Ti", "RTX 4070Ti", "RTX_4070_TI", "NVIDIA GeForce RTX 4070 Ti")),
    GpuModel("RTX3090TI-24G", 24, "ampere", True, False, FormFactor.PCIE,
             ("RTX 3090 Ti", "RTX 3090Ti", "RTX_3090_TI", "NVIDIA GeForce RTX 3090 Ti")),
    GpuModel("RTX3090-24G", 24, "ampere", True, False, FormFactor.PCIE,
             ("RTX3090", "RTX 3090", "RTX_3090", "NVIDIA GeForce RTX 3090")),
    GpuModel("RTX3080TI-12G", 12, "ampere", True, False, FormFactor.PCIE,
             ("RTX 3080 Ti", "RTX 3080Ti", "RTX_3080_TI", "NVIDIA GeForce RTX 3080 Ti")),
    GpuModel("RTX3080-10G", 10, "ampere", True, False, FormFactor.PCIE,
             ("RTX3080", "RTX 3080", "RTX_3080", "NVIDIA GeForce RTX 3080")),
    GpuModel("RTX3070-8G", 8, "ampere", True, False, FormFactor.PCIE,
             ("RTX3070", "RTX 3070", "RTX_3070", "NVIDIA GeForce RTX 3070")),
    GpuModel("RTXA5000-24G", 24, "ampere", True, False, FormFactor.PCIE,
             ("RTXA5000", "RTX A5000", "RTX_A5000", "A5000", "NVIDIA RTX A5000")),
    GpuModel("RTXA4500-20G", 20, "ampere", True, False, FormFactor.PCIE,
             ("RTXA4500", "RTX A4500", "RTX_A4500", "A4500", "NVIDIA RTX A4500")),
    GpuModel("RTXA4000-16G", 16, "ampere", True, False, FormFactor.PCIE,
             ("RTXA4000", "RTX A4000", "RTX_A4000", "A4000", "NVIDIA RTX A4000")),
    GpuModel("RTXA2000-12G", 12, "ampere", True, False, FormFactor.PCIE,
             ("RTXA2000", "RTX A2000", "RTX_A2000", "A2000", "NVIDIA RTX A2000")),
    GpuModel("A40-48G", 48, "ampere", True, False, FormFactor.PCIE, ("A40", "NVIDIA A40")),
    GpuModel("A30-24G", 24, "ampere", True, False, FormFactor.PCIE, ("A30", "NVIDIA A30")),
    # Lambda's "RTX 6000 (24 GB)" is the Turing Quadro RTX 6000, not the 48 GB Ada card.
    GpuModel("RTX6000-24G", 24, "turing", False, False, FormFactor.PCIE,
             ("Quadro RTX 6000", "RTX 6000", "Q RTX 6000", "RTX 6000 24 GB")),
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
    # A canonical name is itself (tests/test_gpus.py holds the alias index to that), found without building
    # the alias index: ~200 spellings normalised by pattern, a few ms of every `orch quote --gpu A100-80G`.
    model = _BY_NAME.get(name)
    if model is None:
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


def resolve_offer_gpu(name: str, vram_gb: float | None = None, *, provider: str) -> GpuModel | None:
    """``resolve_gpu`` for a provider's listing: None for a GPU orch does not know, logged once per name.

    An offer left out this way is never silent: the warning names the provider and its spelling, so a
    GPU a provider starts listing shows up in the log instead of vanishing from every plan."""
    try:
        return resolve_gpu(name, vram_gb)
    except UnknownGpuError:
        _warn_unknown(provider, name[:80])
        return None


@cache
def _warn_unknown(provider: str, name: str) -> None:
    import logging

    logging.getLogger(__name__).warning("%s lists GPU %r, which orch's GPU registry does not know: its offers "
                                        "are left out (add it to providers/gpus.py)", provider, name)


def gpu_by_name(canonical: str) -> GpuModel:
    return _BY_NAME[canonical]


def canonical_names() -> list[str]:
    return [m.name for m in GPU_MODELS]
