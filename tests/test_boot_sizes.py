"""Every shipped example's boot script fits every provider's limit, measured as each provider counts it
(orchestrator/runtime/startup.py PAYLOAD_LIMITS) and printed (``pytest -s tests/test_boot_sizes.py``; the table
is in docs/runtime.md). Three cases per example: no store and no secrets; as shipped (its checkpoint store and
secrets, a scoped store credential in the script, reports to a state store); and a heavy case: a gs:// store
reached with a downscoped token (a node off GCP) plus three 64-character secrets (which go through the store, not
the script). Credentials are minted dry: placeholders of a real session token's size. Vast's ``onstart`` (4,048
characters) is measured with a 4096-bit RSA ssh key."""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
import yaml

from orchestrator.engine.jobspec import jobspec_from_manifest
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.startup import PAYLOAD_LIMITS, ManifestStartupRenderer, credentials_from_env, payload_size
from providers.base import LaunchSpec, Market, Offer
from providers.gpus import Interconnect
from providers.vastai.create import ONSTART_MAX, onstart_for

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.yaml"))
PROVIDERS = ("aws", "gcp", "azure", "lambda", "runpod", "vastai")
_RNG = random.Random(27)   # keys are random (they do not compress); seeded, so the sizes are reproducible


def _hex(n: int) -> str:
    return "".join(_RNG.choice("0123456789abcdef") for _ in range(n))


def _service_account_key() -> str:
    """A service-account key file's shape and size (a 2048-bit key's PEM is about 1.7 KB)."""
    pem_body = "".join(_RNG.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
                       for _ in range(1620))
    pem = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(pem_body[i:i + 64] for i in range(0, len(pem_body), 64))
    return json.dumps({"type": "service_account", "project_id": "my-project", "private_key_id": _hex(40),
                       "private_key": pem + "\n-----END PRIVATE KEY-----\n",
                       "client_email": "orch-node@my-project.iam.gserviceaccount.com", "client_id": _hex(21),
                       "auth_uri": "https://accounts.google.com/o/oauth2/auth",
                       "token_uri": "https://oauth2.googleapis.com/token",
                       "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
                       "client_x509_cert_url": "https://www.googleapis.com/robot/v1/metadata/x509/"
                                               "orch-node%40my-project.iam.gserviceaccount.com",
                       "universe_domain": "googleapis.com"}, indent=2)


ENVIRON = {
    "AWS_ACCESS_KEY_ID": "AKIA" + _hex(16).upper(), "AWS_SECRET_ACCESS_KEY": _hex(40),
    "AWS_SESSION_TOKEN": _hex(600), "AWS_REGION": "us-east-1",
    "RCLONE_CONFIG_ORCHAZ_KEY": _hex(88), "RCLONE_CONFIG_ORCHGCS_SERVICE_ACCOUNT_CREDENTIALS": _service_account_key(),
    "HF_TOKEN": "hf_" + _hex(61), "WANDB_API_KEY": _hex(64), "EXTRA_SECRET": _hex(64),
}
DRY = credentials_from_env(ENVIRON, frozenset(), dry_run=True)
RSA_4096_KEY = "ssh-rsa " + "A" * 716 + " user@host"


def _manifest(path: Path, case: str) -> Manifest:
    doc = yaml.safe_load(path.read_text())
    if case == "bare":
        doc.pop("checkpoint", None)
        doc.pop("secrets", None)
    elif case == "heavy":
        doc.setdefault("checkpoint", {"path": "/ckpt"})["store"] = "gs://my-bucket/heavy"
        doc["secrets"] = sorted({*doc.get("secrets", []), "HF_TOKEN", "WANDB_API_KEY", "EXTRA_SECRET"})
    return Manifest.model_validate(doc)


def _job(m: Manifest) -> JobRecord:
    now = datetime.now(UTC)
    return JobRecord(id=1, name=m.name, manifest=m, spec=jobspec_from_manifest(m, now), status=JobStatus.LAUNCHING,
                     desired_active=True, relaunch_count=0, spent_usd=0.0, created_at=now)


def _attempt(provider: str, m: Manifest, rank: int) -> AttemptRecord:
    offer = Offer(provider, "t", "r", None, "A100-80G", m.resources.count, 80, 30, 200, Interconnect.PCIE,
                  Market.ON_DEMAND, 1.0, date(2026, 12, 1))
    return AttemptRecord(7 + rank, 1, f"lsize{rank:08d}", AttemptState.PLANNED, offer, node_rank=rank)


def _size(path: Path, case: str, provider: str) -> int:
    m = _manifest(path, case)
    renderer = ManifestStartupRenderer(environ=ENVIRON, state_store="" if case == "bare" else "s3://orch-state/r",
                                       credentials=DRY)
    job = _job(m)
    sizes = [payload_size(provider, renderer.boot_script(job, _attempt(provider, m, rank)))
             for rank in sorted({0, m.resources.nodes - 1})]
    return max(sizes)


CASES = ("bare", "shipped", "heavy")


def test_every_examples_boot_script_is_under_every_providers_limit() -> None:
    assert EXAMPLES, "no shipped examples found"
    rows: list[tuple[str, str, str, int, int]] = []
    for path in EXAMPLES:
        for case in CASES:
            for provider in PROVIDERS:
                rows.append((path.stem, case, provider, _size(path, case, provider), PAYLOAD_LIMITS[provider].limit))
    print("\nboot script size per provider (as each provider counts it) / limit:")
    print(f"{'example':<14}{'case':<9}" + "".join(f"{p:>17}" for p in PROVIDERS))
    for path in EXAMPLES:
        for case in CASES:
            cells = [f"{s:>7} / {lim:<7}" for (e, c, _, s, lim) in rows if e == path.stem and c == case]
            print(f"{path.stem:<14}{case:<9}" + "".join(f"{cell:>17}" for cell in cells))
    over = [r for r in rows if r[3] > r[4]]
    assert over == [], over


def test_vasts_onstart_is_short_whatever_the_boot_script() -> None:
    path = max(EXAMPLES, key=lambda p: _size(p, "heavy", "vastai"))
    m = _manifest(path, "heavy")
    renderer = ManifestStartupRenderer(environ=ENVIRON, state_store="s3://orch-state/r", credentials=DRY)
    script = renderer.render(_job(m), _attempt("vastai", m, 0))
    spec = LaunchSpec(launch_id="lsize00000000", owner="me", job=m.name, offer=_attempt("vastai", m, 0).offer,
                      ssh_public_key=RSA_4096_KEY, startup_script=script)
    onstart = onstart_for(spec)
    print(f"\nvast onstart: {len(onstart)} characters (limit {ONSTART_MAX}) for a {len(script)}-byte boot script "
          f"({path.stem}, heavy) and a {len(RSA_4096_KEY)}-character ssh key")
    assert len(onstart) < ONSTART_MAX // 2 and len(script) > ONSTART_MAX


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_script_over_the_limit_is_refused_before_launch(provider: str) -> None:
    from orchestrator.engine.hooks import StartupScriptError

    # No store to pass the secrets through: they ride in the script (the only case that still does).
    m = _manifest(EXAMPLES[0], "heavy").model_copy(update={"checkpoint": None})
    # Hex of random bytes compresses to half; twice the limit in hex is over it however it is sent.
    huge = {**ENVIRON, "EXTRA_SECRET": os.urandom(PAYLOAD_LIMITS[provider].limit).hex()}
    with pytest.raises(StartupScriptError, match=f"{provider} takes {PAYLOAD_LIMITS[provider].limit}"):
        ManifestStartupRenderer(environ=huge, state_store="", credentials=DRY).render(
            _job(m), _attempt(provider, m, 0))
