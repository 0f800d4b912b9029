"""Every GPU the providers list today resolves in orch's GPU registry: no offer is dropped for its name.

The published lists are facts copied from the providers' own documents (names only):
- RunPod: the ``GPUTypeId`` enum of RunPod's REST v1 OpenAPI (runpod/docs ``api-reference/openapi.json``
  @ 01242f8510a3aba07200e152c2e33e07bd0a8e3f), the ids RunPod's GraphQL ``gpuTypes`` answers with.
- Lambda: ``gpu_description`` values of Lambda's instance types (the vendored Lambda Cloud OpenAPI 1.8.3 examples,
  tests/fakes/schemas/, and the instance types Lambda's API lists: A10, A100 40/80 GB, H100 SXM5/PCIe, GH200,
  B200, the A6000/RTX 6000 workstation cards and V100).
- Vast: ``gpu_name`` spellings seen in Vast's OpenAPI (vast-ai/docs ``api-reference/openapi.yaml`` @ e758d350:
  RTX_3090/RTX 4090/RTX A5000/H100_SXM examples) and the names orch filters on (VAST_GPU_NAMES).
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest

from providers.gpus import UnknownGpuError, resolve_gpu, resolve_offer_gpu
from providers.vastai.offers import VAST_GPU_NAMES
from tests.fakes.lambda_cloud import DEFAULT_TYPES
from tests.fakes.runpod import default_gpu_types
from tests.fakes.vast import seed_offers

ROOT = Path(__file__).resolve().parents[1]

RUNPOD_GPU_TYPE_IDS = (
    "NVIDIA GeForce RTX 4090", "NVIDIA RTX A5000", "NVIDIA RTX A4000", "NVIDIA GeForce RTX 3090", "NVIDIA RTX A6000",
    "NVIDIA A40", "NVIDIA RTX A4500", "NVIDIA A100 80GB PCIe", "NVIDIA L4", "NVIDIA RTX 4000 Ada Generation",
    "NVIDIA RTX 6000 Ada Generation", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA L40",
    "NVIDIA H100 PCIe", "NVIDIA L40S", "NVIDIA GeForce RTX 3080", "NVIDIA GeForce RTX 3070",
    "NVIDIA GeForce RTX 3080 Ti", "NVIDIA A30", "NVIDIA GeForce RTX 4080", "NVIDIA RTX A2000",
    "NVIDIA GeForce RTX 3090 Ti", "Tesla V100-SXM2-32GB", "NVIDIA GeForce RTX 4070 Ti",
    "NVIDIA RTX 4000 SFF Ada Generation", "NVIDIA RTX 5000 Ada Generation", "Tesla V100-SXM2-16GB",
    "Tesla V100-FHHL-16GB", "Tesla V100-PCIE-16GB", "NVIDIA RTX 2000 Ada Generation", "NVIDIA H100 NVL",
    "NVIDIA A100-SXM4-40GB",
)
#: Listed by RunPod but left out of the registry on purpose (AMD/ROCm: orch's boot and images assume CUDA).
RUNPOD_EXCLUDED = ("AMD Instinct MI300X OAM",)

LAMBDA_GPU_DESCRIPTIONS = {
    "A10 (24 GB PCIe)": "A10-24G", "A100 (40 GB SXM4)": "A100-40G", "A100 (40 GB PCIe)": "A100-40G",
    "A100 (80 GB SXM4)": "A100-80G", "H100 (80 GB SXM5)": "H100-80G", "H100 (80 GB PCIe)": "H100-80G",
    "GH200 (96 GB)": "GH200-96G", "B200 (180 GB SXM6)": "B200-180G", "A6000 (48 GB)": "RTXA6000-48G",
    "RTX A6000 (48 GB)": "RTXA6000-48G", "RTX 6000 (24 GB)": "RTX6000-24G", "Tesla V100 (16 GB)": "V100-16G",
}

VAST_GPU_NAMES_SEEN = {
    "RTX 3090": "RTX3090-24G", "RTX_3090": "RTX3090-24G", "RTX 4090": "RTX4090-24G", "RTX_4090": "RTX4090-24G",
    "RTX 5090": "RTX5090-32G", "RTX A4000": "RTXA4000-16G", "RTX A5000": "RTXA5000-24G", "H100_SXM": "H100-80G",
    "H100 NVL": "H100NVL-94G", "GH200 SXM": "GH200-96G", "RTX 6000Ada": "RTX6000ADA-48G", "A40": "A40-48G",
}


@pytest.mark.parametrize("name", RUNPOD_GPU_TYPE_IDS)
def test_every_runpod_gpu_type_resolves(name: str) -> None:
    resolve_gpu(name)


def test_the_issue_s_dropped_gpus_resolve_to_their_own_models() -> None:
    assert resolve_gpu("NVIDIA RTX A4000").name == "RTXA4000-16G"
    assert resolve_gpu("NVIDIA GeForce RTX 3090").name == "RTX3090-24G"
    assert resolve_gpu("GH200 (96 GB)").name == "GH200-96G"
    # Cards that share a family word are told apart (not folded into the nearest name):
    assert resolve_gpu("NVIDIA GeForce RTX 3090 Ti").name == "RTX3090TI-24G"
    assert resolve_gpu("NVIDIA H100 NVL").name == "H100NVL-94G"
    assert resolve_gpu("RTX 6000 (24 GB)").name == "RTX6000-24G"          # Turing Quadro, not the Ada card
    assert resolve_gpu("NVIDIA RTX 6000 Ada Generation").name == "RTX6000ADA-48G"


@pytest.mark.parametrize(("name", "canonical"), sorted(LAMBDA_GPU_DESCRIPTIONS.items()))
def test_every_lambda_gpu_description_resolves(name: str, canonical: str) -> None:
    assert resolve_gpu(name).name == canonical
    assert resolve_gpu(f"8x {name}").name == canonical      # Lambda's instance-type description form


@pytest.mark.parametrize(("name", "canonical"), sorted(VAST_GPU_NAMES_SEEN.items()))
def test_vast_gpu_names_resolve(name: str, canonical: str) -> None:
    assert resolve_gpu(name).name == canonical


def test_vast_server_side_filter_names_resolve_to_their_key() -> None:
    for canonical, spellings in VAST_GPU_NAMES.items():
        for spelling in spellings:
            family = canonical.split("-")[0]
            assert resolve_gpu(spelling).name.split("-")[0] == family, (canonical, spelling)


def test_shipped_catalog_gpus_are_canonical() -> None:
    with (ROOT / "providers" / "catalog" / "data" / "offers.csv").open() as f:
        gpus = {row["gpu"] for row in csv.DictReader(f)}
    assert gpus
    for gpu in gpus:
        assert resolve_gpu(gpu).name == gpu


def test_every_gpu_the_fakes_serve_resolves() -> None:
    names = [(t.id, t.memoryInGb) for t in default_gpu_types()]
    names += [(t.gpu_description, None) for t in DEFAULT_TYPES]
    names += [(o["gpu_name"], o["gpu_ram"] / 1024) for o in seed_offers()]
    for name, vram in names:
        resolve_gpu(name, vram)


def test_an_unknown_gpu_is_dropped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="providers.gpus"):
        assert resolve_offer_gpu(RUNPOD_EXCLUDED[0], provider="runpod") is None
    assert any("AMD Instinct MI300X OAM" in r.getMessage() and "runpod" in r.getMessage() for r in caplog.records)
    with pytest.raises(UnknownGpuError):
        resolve_gpu(RUNPOD_EXCLUDED[0])
