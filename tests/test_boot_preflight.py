"""A store credential the daemon cannot hand to a machine is an error before anything is launched: the daemon on
an AWS profile, SSO or its own role has no keys to give; gcloud's user credentials are not a key rclone takes."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from orchestrator.app.preflight import boot_problem
from orchestrator.engine.hooks import StartupScriptError
from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.store_credentials import MissingStoreCredentials, store_env
from providers.base import Market, Offer
from providers.gpus import Interconnect


def _manifest(store: str) -> Manifest:
    return Manifest.model_validate({
        "apiVersion": "orch/v1", "kind": "Job", "name": "ckpt", "resources": {"gpu": "A100-80G", "count": 1},
        "run": {"launcher": "command", "command": "python train.py"},
        "checkpoint": {"path": "/ckpt", "store": store}})


def _offer(provider: str) -> Offer:
    return Offer(provider, "t", "r", None, "A100-80G", 1, 80, 30, 200, Interconnect.PCIE, Market.ON_DEMAND, 1.0,
                 date(2026, 12, 1))


def _problem(store: str, provider: str, environ: dict[str, str], identities: frozenset[str] = frozenset()
             ) -> str | None:
    return boot_problem(_manifest(store), _offer(provider), environ=environ, identities=identities,
                        state_store="")


def test_s3_without_keys_in_the_daemons_environment_is_refused_up_front() -> None:
    # AWS_PROFILE (or SSO, or the daemon's role) lets the daemon read S3, but there is nothing to hand a node.
    problem = _problem("s3://bucket/ckpt", "runpod", {"AWS_PROFILE": "dev"})
    assert problem is not None and "AWS_ACCESS_KEY_ID" in problem and "runpod" in problem
    assert _problem("s3://bucket/ckpt", "runpod", {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"}) is None
    # An AWS machine with an instance profile reads S3 through it: nothing to hand over.
    assert _problem("s3://bucket/ckpt", "aws", {}, frozenset({"aws"})) is None
    with pytest.raises(MissingStoreCredentials, match="instance_profile"):
        store_env(["s3://bucket/ckpt"], "aws", frozenset(), {})


def test_gcloud_user_credentials_are_not_a_key_a_node_can_use(tmp_path: Path) -> None:
    user = tmp_path / "application_default_credentials.json"
    user.write_text(json.dumps({"type": "authorized_user", "client_id": "x", "refresh_token": "y"}))
    problem = _problem("gs://bucket/ckpt", "lambda", {"GOOGLE_APPLICATION_CREDENTIALS": str(user)})
    assert problem is not None and "gcloud user credentials" in problem
    key = tmp_path / "sa.json"
    key.write_text(json.dumps({"type": "service_account", "private_key": "k"}))
    assert _problem("gs://bucket/ckpt", "lambda", {"GOOGLE_APPLICATION_CREDENTIALS": str(key)}) is None
    env = store_env(["gs://bucket/ckpt"], "lambda", frozenset(), {"GOOGLE_APPLICATION_CREDENTIALS": str(key)})
    assert json.loads(env["RCLONE_CONFIG_ORCHGCS_SERVICE_ACCOUNT_CREDENTIALS"])["type"] == "service_account"


def test_the_renderer_raises_the_startup_script_error_the_engine_acts_on() -> None:
    from datetime import UTC, datetime

    from orchestrator.engine.jobspec import jobspec_from_manifest
    from orchestrator.engine.ports import AttemptRecord, JobRecord
    from orchestrator.engine.states import AttemptState, JobStatus
    from orchestrator.runtime.startup import ManifestStartupRenderer

    m, now = _manifest("az://acct/container/ckpt"), datetime.now(UTC)
    job = JobRecord(id=1, name=m.name, manifest=m, spec=jobspec_from_manifest(m, now), status=JobStatus.LAUNCHING,
                    desired_active=True, relaunch_count=0, spent_usd=0.0, created_at=now)
    attempt = AttemptRecord(1, 1, "l000000000001", AttemptState.PLANNED, _offer("vastai"))
    with pytest.raises(StartupScriptError, match="RCLONE_CONFIG_ORCHAZ_KEY"):
        ManifestStartupRenderer(environ={}).render(job, attempt)
