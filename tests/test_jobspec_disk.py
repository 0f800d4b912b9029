"""The job's resources.disk_gb reaches the launch as it is (rounded up), and a job naming none leaves the disk to
the provider (LaunchSpec.disk_size: its setting, else 100 GB) instead of pinning 100 GB before any provider is
chosen."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.engine.jobspec import jobspec_from_manifest
from orchestrator.manifest.schema import Manifest
from providers.base import DEFAULT_DISK_GB, LaunchSpec
from tests.test_vast_adapter import spec_for


def _manifest(resources: dict[str, object]) -> Manifest:
    return Manifest.model_validate({"apiVersion": "orch/v1", "kind": "Job", "name": "j",
                                    "resources": {"gpu": "A100-80G", "count": 1, **resources},
                                    "run": {"launcher": "command", "command": "python train.py"}})


@pytest.mark.parametrize(("disk", "expected"), [(None, None), (0, None), (500, 500), (37.5, 38)])
def test_the_jobspec_carries_the_jobs_own_disk_or_none(disk: float | None, expected: int | None) -> None:
    resources = {} if disk is None else {"disk_gb": disk}
    assert jobspec_from_manifest(_manifest(resources), datetime.now(UTC)).disk_gb == expected


def test_disk_size_is_the_jobs_then_the_settings_then_the_default() -> None:
    spec = spec_for(1)
    assert isinstance(spec, LaunchSpec) and spec.disk_gb == 40
    assert spec.disk_size(300) == 40
    from dataclasses import replace

    unset = replace(spec, disk_gb=None)
    assert unset.disk_size(300) == 300
    assert unset.disk_size() == DEFAULT_DISK_GB == 100
