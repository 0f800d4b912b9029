"""What a launched node was given, read back through each cloud's fake (user data, metadata, customData, env,
onstart: every request body the cloud received): no value of the daemon's own store keys and no secret value, in
plain text or inside the boot script's payload; the store credential it carries is a session credential that works
under its job's prefix only (a read outside is refused by the scope-enforcing fake store) and expires."""

from __future__ import annotations

import base64
import binascii
import gzip
import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from orchestrator.engine.jobspec import jobspec_from_manifest
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.boot import boot_env, boot_files
from orchestrator.runtime.node_credentials import NodeCredentials
from orchestrator.runtime.startup import ManifestStartupRenderer
from providers.base import Market
from tests.contract.harness import ProviderHarness
from tests.fakes.scoped_store import ScopedStore

DAEMON = {"AWS_ACCESS_KEY_ID": "AKIADAEMONLONGLIVED02",
          "AWS_SECRET_ACCESS_KEY": "daemonSecret0123456789abcdefABCDEFghijkl",
          "AWS_REGION": "us-east-1"}
SECRETS = {"HF_TOKEN": "hf_NodePayloadProbe0123456789abcdefABCDEF", "WANDB_API_KEY": "wandbNodePayloadProbe987654321"}
TTL_S = 4 * 3600
JOB = {"apiVersion": "orch/v1", "kind": "Job", "name": "train", "resources": {"gpu": "A100-80G", "count": 1},
       "run": {"launcher": "command", "command": "python train.py"}, "secrets": sorted(SECRETS),
       "checkpoint": {"path": "/ckpt", "store": "s3://bkt/jobs/train", "every": "10m"}}
PROVIDERS = ("aws", "gcp", "azure", "lambda", "runpod", "vastai")


class Clock:
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC).timestamp()

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def store() -> Iterator[ScopedStore]:
    s = ScopedStore(Clock()).start()
    s.add_s3_root(DAEMON["AWS_ACCESS_KEY_ID"], DAEMON["AWS_SECRET_ACCESS_KEY"])
    yield s
    s.stop()


def _harness(name: str) -> ProviderHarness:
    import importlib

    return importlib.import_module(f"tests.contract.harness_{name}").make_harness()  # type: ignore[no-any-return]


def _told(h: ProviderHarness) -> list[Any]:
    """Every request body (and form) the cloud's fake received: what the cloud holds about the machine."""
    fake: Any = h.fake  # type: ignore[attr-defined]
    if h.name == "aws":
        return [dict(fake.sent)]
    reqs = fake.requests
    return [{"path": getattr(r, "path", ""), "query": getattr(r, "query", None), "body": r.body} for r in reqs]


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(node, list | tuple):
        for v in node:
            yield from _strings(v)


def _decoded(value: str) -> str | None:
    """A boot script as a cloud holds it: plain, base64, or base64 of gzip."""
    if value.startswith("#!/bin/sh"):
        return value
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    text = raw.decode("utf-8", "replace")
    return text if text.startswith("#!/bin/sh") else None


def _job() -> JobRecord:
    m = Manifest.model_validate(JOB)
    now = datetime.now(UTC)
    return JobRecord(id=1, name=m.name, manifest=m, spec=jobspec_from_manifest(m, now), status=JobStatus.LAUNCHING,
                     desired_active=True, relaunch_count=0, spent_usd=0.0, created_at=now)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_launched_node_holds_no_daemon_key_no_secret_and_a_scoped_expiring_credential(
        provider: str, store: ScopedStore) -> None:
    h = _harness(provider)
    try:
        spec = h.launch_spec("lpayload0000a", "tester", Market.ON_DEMAND)
        attempt = AttemptRecord(1, 1, spec.launch_id, AttemptState.PLANNED, spec.offer)
        clock = store.clock
        minter = NodeCredentials({**DAEMON, **SECRETS}, s3_endpoint=store.url, sts_endpoint=store.url,
                                 ttl_s=TTL_S, clock=clock)
        renderer = ManifestStartupRenderer(environ={**DAEMON, **SECRETS}, credentials=minter)
        script = renderer.render(_job(), attempt)
        h.provider().launch(replace(spec, startup_script=script))
        told = _told(h)
        text = json.dumps(told, default=str)
        scripts = {s for s in map(_decoded, _strings(told)) if s}
        assert scripts == {script}, f"{provider}: the boot script is not what the cloud holds"
        env = boot_env(script)
        inside = [text, script, json.dumps(env), *(v.decode("utf-8", "replace") for v in boot_files(script).values())]
        leaked = [v for v in (DAEMON["AWS_ACCESS_KEY_ID"], DAEMON["AWS_SECRET_ACCESS_KEY"], *SECRETS.values())
                  for where in inside if v in where]
        assert leaked == [], f"{provider}: {leaked}"
        # The credential it carries: a session credential that expires ...
        assert env["AWS_ACCESS_KEY_ID"].startswith("ASIA") and env["AWS_SESSION_TOKEN"]
        assert int(env["ORCH_CREDENTIALS_EXPIRE_AT"]) == int(clock() + TTL_S)
        # ... and reaches the job's prefix only.
        node = boto3.client("s3", endpoint_url=store.url, region_name="us-east-1",
                            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                            aws_session_token=env["AWS_SESSION_TOKEN"])
        node.put_object(Bucket="bkt", Key=f"jobs/train/_orch/{spec.launch_id}/status.json", Body=b"{}")
        for key in ("jobs/other/model.bin", "jobs/train-b/x", "secrets/root.json"):
            with pytest.raises(ClientError) as err:
                node.get_object(Bucket="bkt", Key=key)
            assert err.value.response["Error"]["Code"] == "AccessDenied", key
    finally:
        h.close()
