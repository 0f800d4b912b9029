"""Must hold (issue 27): orch's REAL launch of every shipped example is accepted by every provider's
spec-validating fake, and the fake really checked it against the vendored contract.

The launch is built by the engine's own code path: the example manifest -> ``jobspec_from_manifest`` -> the
engine's boot script renderer (``ManifestStartupRenderer.render``, which refuses what is over the provider's
limit) -> the engine's ``launch_spec_for`` -> the real adapter -> the fake on 127.0.0.1. Each example is sent
with its ``image:`` and without one, single-node and (where the provider launches multi-node jobs) as a
two-node gang, always with a checkpoint store and secrets (the node's scoped store credential goes into the boot
script, the biggest case; the secrets reach the node through its store, never the boot payload). The manifests'
``providers:``/``regions:`` choices are dropped so every provider gets every example: what is checked is the
request, not the planner.

"Validated" means: the fake ran its contract check on each launch request (EC2: botocore's model and the
AMI/user-data limits; GCE: the Discovery document; Azure: the REST spec's bodies; Vast: its OpenAPI
create_request and the 4,048-character onstart; Lambda: its OpenAPI InstanceLaunchRequest and 1 MB user
data; RunPod: the schema derived from its client) and refused nothing. SSH is not here: its machines are
the user's own, started over SSH with no launch request and no published contract to hold it to.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.engine.jobspec import jobspec_from_manifest
from orchestrator.engine.launching import launch_spec_for
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.boot import boot_env
from orchestrator.runtime.startup import ManifestStartupRenderer
from providers.base import Capability, Market, Offer, new_launch_id
from tests.contract.harness import ProviderHarness
from tests.test_boot_sizes import DRY, ENVIRON

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
PROVIDERS = ("aws", "gcp", "azure", "vastai", "lambda", "runpod")
IMAGE = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"
STATE_STORE = "s3://orch-state/examples"
OWNER = "examples"


def _public_key() -> str:
    """A real OpenSSH ed25519 public key (EC2 and Lambda check the form of what they are given)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public = Ed25519PrivateKey.generate().public_key()
    return public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode() + " orch"


PUBLIC_KEY = _public_key()


def _validated(harness: ProviderHarness) -> int:
    """How many launch requests the provider's fake has checked against its vendored contract."""
    fake: Any = harness.fake  # type: ignore[attr-defined]  # every harness here keeps its fake
    counts: dict[str, Callable[[], int]] = {
        "aws": lambda: fake.validated["RunInstances"],
        "gcp": lambda: fake.validated,
        "azure": lambda: fake.validated["virtualmachines"],
        "vastai": lambda: fake.state.validated,
        "lambda": lambda: fake.validated,
        "runpod": lambda: fake.validated,
    }
    return counts[harness.name]()


def _refusals(harness: ProviderHarness) -> list[Any]:
    fake: Any = harness.fake  # type: ignore[attr-defined]  # every harness here keeps its fake
    return list(fake.state.refusals if harness.name == "vastai" else fake.refusals)


def _images_sent(harness: ProviderHarness) -> list[str]:
    """The image field of every launch the fake took, as the cloud reads it: the machine image on the VM clouds
    (an AMI id, a GCE sourceImage, an Azure imageReference; Lambda's is not sent), the pod's image on RunPod and
    Vast.ai."""
    fake: Any = harness.fake  # type: ignore[attr-defined]  # every harness here keeps its fake
    if harness.name == "aws":
        return [fake.sent["RunInstances"]["ImageId"]]              # the last RunInstances
    if harness.name == "gcp":
        return [r.body["disks"][0]["initializeParams"]["sourceImage"] for r in fake.requests
                if r.method == "POST" and r.path.endswith("/instances") and r.body]
    if harness.name == "azure":
        return [str(r.body["properties"]["storageProfile"]["imageReference"]) for r in fake.requests
                if r.method == "PUT" and "/virtualMachines/" in r.path and isinstance(r.body, dict)]
    if harness.name == "lambda":
        return [str(r.body.get("image", "")) for r in fake.launches()]
    if harness.name == "runpod":
        return [pod.inputs["imageName"] for pod in fake.pods.values()]
    return [inst["image_uuid"] for inst in fake.state.instances.values()]


@pytest.fixture(scope="module", params=PROVIDERS)
def cloud(request: pytest.FixtureRequest) -> Iterator[ProviderHarness]:
    module = importlib.import_module(f"tests.contract.harness_{request.param}")
    try:
        harness: ProviderHarness = module.make_harness()
    except ImportError as exc:   # the provider's SDK extra is not installed
        pytest.skip(f"{request.param}: {exc}")
    yield harness
    harness.close()


def _manifest(path: Path, *, image: bool, nodes: int) -> Manifest:
    doc = yaml.safe_load(path.read_text())
    doc.pop("providers", None)
    doc.pop("regions", None)
    if image:
        doc["image"] = doc.get("image") or IMAGE
    else:
        doc.pop("image", None)
    doc["resources"]["nodes"] = nodes
    if nodes == 1:
        doc["resources"].pop("interconnect", None)   # a single node needs no fabric between nodes
    doc.setdefault("checkpoint", {"path": "/ckpt"}).setdefault("store", f"s3://orch-ckpt/{doc['name']}")
    doc["secrets"] = sorted({*doc.get("secrets", []), "HF_TOKEN", "WANDB_API_KEY"})
    return Manifest.model_validate(doc)


def _offer(harness: ProviderHarness, manifest: Manifest) -> Offer:
    """An offer this fake really has: the harness's own (a real catalog offer on the VM clouds); spot where the
    manifest asks for spot and the provider has a spot market."""
    spot = manifest.market.value == "spot" and harness.supports_spot
    return harness.launch_spec(new_launch_id(), OWNER, Market.SPOT if spot else Market.ON_DEMAND).offer


def _job(manifest: Manifest) -> JobRecord:
    now = datetime.now(UTC)
    return JobRecord(id=1, name=manifest.name, manifest=manifest, spec=jobspec_from_manifest(manifest, now),
                     status=JobStatus.LAUNCHING, desired_active=True, relaunch_count=0, spent_usd=0.0, created_at=now)


CASES = [pytest.param(path, image, nodes, id=f"{path.stem}-{'image' if image else 'noimage'}-{nodes}node")
         for path in EXAMPLES for image in (True, False) for nodes in (1, 2)]


@pytest.mark.parametrize(("example", "image", "nodes"), CASES)
def test_every_examples_real_launch_is_accepted_by_the_spec_validating_fake(
        cloud: ProviderHarness, example: Path, image: bool, nodes: int) -> None:
    provider = cloud.provider()
    if nodes > 1 and Capability.MULTI_NODE not in provider.capabilities:
        pytest.skip(f"{cloud.name} launches no multi-node jobs (the planner never sends it one)")
    cloud.reset()
    manifest = _manifest(example, image=image, nodes=nodes)
    job, offer = _job(manifest), _offer(cloud, manifest)
    # DRY: scoped node credentials minted offline (their form, not a token service: tests/test_node_credentials.py)
    renderer = ManifestStartupRenderer(environ=ENVIRON, state_store=STATE_STORE, credentials=DRY)
    before = _validated(cloud)
    launched = []
    try:
        for rank in range(nodes):
            attempt = AttemptRecord(10 + rank, 1, new_launch_id(), AttemptState.PLANNED, offer, node_rank=rank)
            script = renderer.render(job, attempt)
            # secrets go to the node through its store (tests/test_node_payload_clouds.py), never in the boot payload
            assert script.startswith("#!/bin/sh\n") and "HF_TOKEN" not in boot_env(script)
            spec = launch_spec_for(job, attempt, owner=OWNER, ssh_public_key=PUBLIC_KEY, script=script)
            assert bool(spec.image) is image     # the job's container: never the machine image
            inst = provider.launch(spec)
            launched.append(inst)
            assert inst.launch_id == spec.launch_id and not inst.state.is_gone
        assert _refusals(cloud) == []
        sent = _images_sent(cloud)
        if cloud.name == "lambda":                     # no image field: Lambda Stack, the job's container runs on it
            assert sent == [""] * nodes
        elif cloud.name in ("runpod", "vastai"):       # the pod IS the job's container
            assert all(i == manifest.image for i in sent) if manifest.image else all("/" in i for i in sent)
        else:                                          # a VM: the container never becomes its machine image
            assert sent and all(sent) and not any(manifest.image and manifest.image in i for i in sent), sent
        assert _validated(cloud) - before >= nodes, f"{cloud.name}'s fake did not check the launch against its spec"
    finally:
        for inst in launched:
            provider.terminate(inst.instance_id)
