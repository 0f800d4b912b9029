"""A manifest's model: block in planning: orch picks GPUs that fit, rejects ones that do not, and warns."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.app.plan import JobPlan, plan_jobs
from orchestrator.engine.jobspec import jobspec_from_manifest
from orchestrator.fit.compat import compat_warnings, image_cuda
from orchestrator.fit.memory import Precision
from orchestrator.manifest import ManifestError, load_manifests
from orchestrator.offers.sources import offer_sources
from providers.catalog import load_catalog
from providers.gpus import gpu_by_name

HEAD = "apiVersion: orch/v1\nkind: Job\nname: {name}\nrun: {{launcher: torchrun, script: train.py}}\n"


def _plan(tmp_path: Path, name: str, body: str) -> JobPlan:
    path = tmp_path / f"{name}.yaml"
    path.write_text(HEAD.format(name=name) + body)
    [jp] = plan_jobs(load_manifests([path]), offer_sources(load_catalog().offers), now=datetime(2026, 1, 1, tzinfo=UTC))
    return jp


def test_model_only_manifest_plans_the_cheapest_offer_that_fits(tmp_path: Path) -> None:
    jp = _plan(tmp_path, "qlora", "model: {name: llama-3-8b, method: qlora}\n")
    chosen = jp.plan.chosen
    assert chosen is not None and chosen.offer.gpu_count == 1
    # the cheapest 1-GPU offer of any GPU with bf16 and enough memory for ~9 GB
    catalog = load_catalog().offers
    fitting = [o for o in catalog if o.gpu_count == 1 and gpu_by_name(o.gpu).bf16]
    assert chosen.offer.price_hr == min(o.price_hr for o in fitting)
    assert not jp.warnings
    # several GPU models stay acceptable, so the engine can fall back to another
    spec = jobspec_from_manifest(load_manifests([tmp_path / "qlora.yaml"])[0].manifest, datetime.now(UTC))
    assert len(spec.plan.gpus) > 3 and spec.plan.fit is not None


def test_requested_gpu_that_does_not_fit_is_rejected_with_a_warning(tmp_path: Path) -> None:
    jp = _plan(tmp_path, "toosmall", "resources: {gpu: [A100-80G, RTX4090]}\nmodel: {params: 7B}\n")
    assert jp.plan.chosen is None
    assert {p.flags[0] for p in jp.plan.rejected} == {"model-does-not-fit"}
    assert any(w.startswith("requested A100-80G x1 does not fit") and "fits on 2x A100-80G (zero3)" in w
               for w in jp.warnings)
    fixed = _plan(tmp_path, "sharded", "resources: {gpu: A100-80G, count: 2}\nmodel: {params: 7B}\n")
    assert fixed.plan.chosen is not None and not any("does not fit" in w for w in fixed.warnings)


def test_overprovisioned_gpu_is_named_with_a_cheaper_fit(tmp_path: Path) -> None:
    jp = _plan(tmp_path, "onh100", "resources: {gpu: H100}\nmodel: {name: llama-3-8b, method: qlora}\n")
    assert jp.plan.chosen is not None and jp.plan.chosen.offer.gpu == "H100-80G"
    [warning] = [w for w in jp.warnings if w.startswith("overprovisioned")]
    assert "fits at $" in warning and "vs H100-80G x1 at $" in warning
    right_sized = _plan(tmp_path, "onl4", "resources: {gpu: L4}\nmodel: {name: llama-3-8b, method: qlora}\n")
    assert not any(w.startswith("overprovisioned") for w in right_sized.warnings)


def test_model_needing_several_machines_says_how_many(tmp_path: Path) -> None:
    jp = _plan(tmp_path, "big", "model: {name: llama-3-70b}\n")
    assert jp.plan.chosen is None
    assert any("set resources.nodes:" in w for w in jp.warnings)
    three = _plan(tmp_path, "big3", "model: {name: llama-3-70b}\nresources: {nodes: 3}\n")
    assert three.plan.chosen is not None and three.plan.chosen.offer.gpu_count == 8


def test_precision_and_cuda_compatibility(tmp_path: Path) -> None:
    jp = _plan(tmp_path, "v100", "resources: {gpu: V100}\nmodel: {params: 1B}\n")
    assert jp.plan.chosen is None and "precision-unsupported" in {p.flags[0] for p in jp.plan.rejected}
    assert any("bf16 needs Ampere or newer" in w for w in jp.warnings)
    old = _plan(tmp_path, "oldcuda", "resources: {gpu: H100}\nimage: pytorch/pytorch:2.1.0-cuda11.7-cudnn8-runtime\n")
    assert any("needs CUDA 11.8 or newer" in w for w in old.warnings)
    assert image_cuda("pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime") == (12, 4)
    assert image_cuda("ghcr.io/x/train:cu121-py310") == (12, 1)
    assert image_cuda("python:3.11") is None
    assert compat_warnings(gpu_by_name("L4-24G"), "x:cuda12.0", Precision.FP8) == [
        "fp8 on ada needs CUDA 12.1+; image has 12.0"]
    assert compat_warnings(gpu_by_name("H100-80G"), "x:cuda12.4", Precision.BF16) == []


def test_manifest_needs_a_gpu_or_a_model(tmp_path: Path) -> None:
    path = tmp_path / "none.yaml"
    path.write_text(HEAD.format(name="none"))
    with pytest.raises(ManifestError) as info:
        load_manifests([path])
    assert "resources.gpu, or a model:" in str(info.value)
    path.write_text(HEAD.format(name="bad") + "model: {params: 8B, method: qlorra, sharding: ddp}\n")
    with pytest.raises(ManifestError) as info:
        load_manifests([path])
    assert "model.method" in str(info.value)


@pytest.mark.parametrize(("params", "needle"), [("1e30", "is over orch's limit, 1000T"), (".inf", "not a finite"),
                                                ("2000T", "is over orch's limit, 1000T")])
def test_manifest_model_params_must_be_a_size_orch_can_answer(tmp_path: Path, params: str, needle: str) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text(HEAD.format(name="huge") + f"model: {{params: {params}}}\n")
    with pytest.raises(ManifestError) as info:
        load_manifests([path])
    assert "model.params" in str(info.value) and needle in str(info.value), str(info.value)
