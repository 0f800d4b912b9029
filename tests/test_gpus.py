"""GPU name resolution: canonical names, aliases, and the providers' own spellings."""

from __future__ import annotations

import pytest

from providers.gpus import GPU_MODELS, FormFactor, UnknownGpuError, canonical_names, resolve_gpu

REQUIRED = ["H200-141G", "H100-80G", "A100-80G", "A100-40G", "L40S-48G", "L4-24G", "A10G-24G",
            "RTX4090-24G", "RTXA6000-48G", "V100-16G", "V100-32G", "T4-16G"]


def test_registry_has_every_required_model_with_specs() -> None:
    names = canonical_names()
    for name in REQUIRED:
        assert name in names
    by = {m.name: m for m in GPU_MODELS}
    assert by["H100-80G"].vram_gb == 80 and by["H100-80G"].fp8 and by["H100-80G"].bf16
    assert by["A100-80G"].architecture == "ampere" and not by["A100-80G"].fp8
    assert by["V100-16G"].bf16 is False
    assert by["H200-141G"].form_factor is FormFactor.SXM
    assert by["L4-24G"].form_factor is FormFactor.PCIE


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("A100-80G", "A100-80G"),
        ("A100-80GB", "A100-80G"),
        ("a100:80gb", "A100-80G"),
        ("A100 80GB", "A100-80G"),
        ("a100-80g", "A100-80G"),
        ("H100", "H100-80G"),
        ("h100", "H100-80G"),
        ("A100_SXM4", "A100-80G"),                  # Vast.ai
        ("NVIDIA A100 80GB PCIe", "A100-80G"),      # RunPod
        ("8x H100 (80 GB SXM5)", "H100-80G"),       # Lambda
        ("1x A100 (40 GB SXM4)", "A100-40G"),       # Lambda
        ("RTX 4090", "RTX4090-24G"),
        ("NVIDIA GeForce RTX 4090", "RTX4090-24G"),
        ("RTX_A6000", "RTXA6000-48G"),
        ("A6000", "RTXA6000-48G"),
        ("Tesla V100", "V100-16G"),
        ("V100-32GB", "V100-32G"),
        ("T4", "T4-16G"),
        ("L40S", "L40S-48G"),
        ("H200", "H200-141G"),
        ("A10G", "A10G-24G"),
    ],
)
def test_aliases_resolve(spelling: str, canonical: str) -> None:
    assert resolve_gpu(spelling).name == canonical


def test_memory_hint_picks_the_variant() -> None:
    assert resolve_gpu("A100", vram_gb=80).name == "A100-80G"
    assert resolve_gpu("A100_PCIE", vram_gb=40).name == "A100-40G"
    assert resolve_gpu("V100", vram_gb=32).name == "V100-32G"


def test_unknown_gpu_suggests_the_closest() -> None:
    with pytest.raises(UnknownGpuError) as err:
        resolve_gpu("A100-90G")
    assert "A100-80G" in err.value.suggestions
    assert "did you mean" in str(err.value)
    with pytest.raises(UnknownGpuError):
        resolve_gpu("banana")


def test_the_alias_index_maps_every_canonical_name_to_its_own_model() -> None:
    """resolve_gpu answers a canonical name without building the alias index (orch quote's fast path): that
    shortcut is right only while no earlier model's alias normalises to the same key as a canonical name."""
    from providers.gpus import _index, _norm

    assert [m.name for m in GPU_MODELS if _index()[_norm(m.name)] is not m] == []
