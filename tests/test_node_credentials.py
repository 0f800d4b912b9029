"""A node's store credential is cut to its job's prefix and expires (orchestrator/runtime/node_credentials.py),
checked against a fake store that enforces what each token carries (tests/fakes/scoped_store.py): S3 session
policies from STS GetFederationToken, GCS Credential Access Boundaries, Azure directory SAS. Renewal goes through
the store: the daemon puts a fresh credential in the launch's prefix and the agent switches to it."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import boto3
import pytest
import requests
from botocore.exceptions import ClientError

from orchestrator.engine.jobspec import jobspec_from_manifest
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.node_credentials import CREDENTIALS_OBJECT, NodeCredentials, Scope, scope_for
from orchestrator.runtime.node_renewal import CredentialRenewer
from orchestrator.runtime.objectstore import StoreClient, parse_store
from orchestrator.runtime.store_credentials import MissingStoreCredentials
from providers.base import Market, Offer
from providers.gpus import Interconnect
from tests.fakes.scoped_store import ScopedStore

DAEMON_KEY, DAEMON_SECRET = "AKIADAEMONLONGLIVED01", "daemonSecretLongLived0123456789abcdefABCD"
AZ_KEY = base64.b64encode(b"an azure account key of 64 bytes, made up for this test only....").decode()


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC).timestamp()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> Iterator[ScopedStore]:
    s = ScopedStore(clock).start()
    s.add_s3_root(DAEMON_KEY, DAEMON_SECRET)
    s.add_az_account("acct", AZ_KEY)
    yield s
    s.stop()


def _s3(store: ScopedStore, env: dict[str, str]):  # type: ignore[no-untyped-def]
    return boto3.client("s3", endpoint_url=store.url, region_name="us-east-1",
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                        aws_session_token=env.get("AWS_SESSION_TOKEN"))


def _minter(store: ScopedStore, clock: Clock, environ: dict[str, str], **kw: object) -> NodeCredentials:
    return NodeCredentials(environ, s3_endpoint=store.url, sts_endpoint=store.url,
                           gcs_sts_endpoint=f"{store.url}/gcs/v1/token",
                           az_blob_endpoint=f"{store.url}/az/{{account}}", clock=clock, **kw)  # type: ignore[arg-type]


SCOPE = scope_for("s3://bkt/jobs/train", None, ["s3://bkt/datasets/web", "https://example.com/x.tar"])


def test_the_scope_is_the_jobs_store_and_report_prefix_read_write_and_its_data_read_only() -> None:
    assert Scope(("s3://bkt/jobs/train",), ("s3://bkt/datasets/web",)) == SCOPE
    assert scope_for(None, "gs://state/r/job-a", []).write == ("gs://state/r/job-a",)


def test_s3_session_credential_works_under_the_jobs_prefix_only_and_expires(store: ScopedStore,
                                                                              clock: Clock) -> None:
    daemon = {"AWS_ACCESS_KEY_ID": DAEMON_KEY, "AWS_SECRET_ACCESS_KEY": DAEMON_SECRET}
    root = _s3(store, daemon)
    root.put_object(Bucket="bkt", Key="jobs/train2/secret.bin", Body=b"another job's")
    root.put_object(Bucket="bkt", Key="datasets/web/part-0", Body=b"data")
    cred = _minter(store, clock, daemon, ttl_s=7200).mint(SCOPE, "runpod", "lnode00000001")
    assert DAEMON_KEY not in json.dumps(cred.env) and DAEMON_SECRET not in json.dumps(cred.env)
    assert cred.expires_at == clock.now + 7200 and cred.exposed == ()
    node = _s3(store, cred.env)
    node.put_object(Bucket="bkt", Key="jobs/train/_orch/l1/status.json", Body=b"{}")
    assert node.get_object(Bucket="bkt", Key="jobs/train/_orch/l1/status.json")["Body"].read() == b"{}"
    assert node.get_object(Bucket="bkt", Key="datasets/web/part-0")["Body"].read() == b"data"
    assert [o["Key"] for o in node.list_objects_v2(Bucket="bkt", Prefix="jobs/train/")["Contents"]] == [
        "jobs/train/_orch/l1/status.json"]
    refused = [lambda: node.get_object(Bucket="bkt", Key="jobs/train2/secret.bin"),      # a sibling job's prefix
               lambda: node.put_object(Bucket="bkt", Key="datasets/web/part-1", Body=b"x"),  # data is read-only
               lambda: node.list_objects_v2(Bucket="bkt", Prefix="jobs/"),
               lambda: node.get_object(Bucket="other", Key="jobs/train/x")]
    for call in refused:
        with pytest.raises(ClientError) as err:
            call()
        assert err.value.response["Error"]["Code"] == "AccessDenied"
    clock.now += 7200
    with pytest.raises(ClientError, match="ExpiredToken"):
        node.get_object(Bucket="bkt", Key="jobs/train/_orch/l1/status.json")


def test_without_federable_keys_the_daemons_values_go_unscoped_and_say_so(store: ScopedStore, clock: Clock) -> None:
    session = {"AWS_ACCESS_KEY_ID": "ASIASESSION", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t"}
    cred = _minter(store, clock, session).mint(SCOPE, "vastai", "l1")
    assert cred.env == session and cred.expires_at is None
    assert cred.exposed and "AWS_SESSION_TOKEN" in cred.exposed[0] and "not scoped" in cred.exposed[0]
    with pytest.raises(MissingStoreCredentials):
        _minter(store, clock, {}).mint(SCOPE, "vastai", "l1")
    # A node with an identity for the store gets nothing at all.
    assert NodeCredentials(session, frozenset({"aws"})).mint(SCOPE, "aws", "l1").env == {}


def _service_account_key(store: ScopedStore) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    return json.dumps({"type": "service_account", "project_id": "p", "private_key_id": "k1", "private_key": pem,
                       "client_email": "orch-daemon@p.iam.gserviceaccount.com", "client_id": "1",
                       "token_uri": f"{store.url}/gcs/token"})


def test_gcs_downscoped_token_reads_and_writes_under_the_prefix_only(store: ScopedStore, clock: Clock,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import google.auth._helpers

    # google-auth stamps its source token's expiry with the real clock; the fake's clock decides here.
    monkeypatch.setattr(google.auth._helpers, "utcnow", lambda: datetime.fromtimestamp(clock.now, UTC).replace(
        tzinfo=None))
    key = _service_account_key(store)
    daemon = {"RCLONE_CONFIG_ORCHGCS_SERVICE_ACCOUNT_CREDENTIALS": key}
    scope = scope_for("gs://gbkt/jobs/train", None, ["gs://gbkt/datasets/web"])
    cred = _minter(store, clock, daemon).mint(scope, "lambda", "l1")
    token = cred.env["RCLONE_CONFIG_ORCHGCS_ACCESS_TOKEN"]
    assert key not in json.dumps(cred.env) and cred.expires_at == clock.now + 3600
    auth = {"Authorization": f"Bearer {token}"}

    def put(name: str) -> int:
        return requests.post(f"{store.url}/gcs/upload/storage/v1/b/gbkt/o", params={"uploadType": "media",
                             "name": name}, data=b"x", headers=auth, timeout=5).status_code

    def get(name: str) -> int:
        return requests.get(f"{store.url}/gcs/storage/v1/b/gbkt/o/{requests.utils.quote(name, safe='')}",
                            params={"alt": "media"}, headers=auth, timeout=5).status_code

    assert put("jobs/train/_orch/l1/status.json") == 200 and get("jobs/train/_orch/l1/status.json") == 200
    store.objects[("gcs", "gbkt", "datasets/web/a")] = b"d"
    store.objects[("gcs", "gbkt", "jobs/train2/a")] = b"other job"
    assert get("datasets/web/a") == 200
    assert get("jobs/train2/a") == 403 and put("jobs/train2/b") == 403      # a sibling job's prefix
    assert put("datasets/web/b") == 403                                       # data: objectViewer only
    clock.now += 3600
    assert get("jobs/train/_orch/l1/status.json") == 401                     # expired with its source token


def test_gcs_store_at_the_buckets_root_is_the_whole_bucket(store: ScopedStore, clock: Clock,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint store ``gs://bucket`` (no prefix: the manifest takes it) is the job's whole bucket. Before,
    the boundary's condition asked for names under ``objects//``: the node could read and write nothing."""
    import google.auth._helpers

    monkeypatch.setattr(google.auth._helpers, "utcnow", lambda: datetime.fromtimestamp(clock.now, UTC).replace(
        tzinfo=None))
    daemon = {"RCLONE_CONFIG_ORCHGCS_SERVICE_ACCOUNT_CREDENTIALS": _service_account_key(store)}
    cred = _minter(store, clock, daemon).mint(scope_for("gs://gbkt", "gs://gbkt/_orch", []), "lambda", "l1")
    auth = {"Authorization": f"Bearer {cred.env['RCLONE_CONFIG_ORCHGCS_ACCESS_TOKEN']}"}
    put = requests.post(f"{store.url}/gcs/upload/storage/v1/b/gbkt/o", params={"uploadType": "media",
                        "name": "step-1/COMPLETE"}, data=b"x", headers=auth, timeout=5)
    assert put.status_code == 200
    store.objects[("gcs", "other", "a")] = b"another bucket"
    assert requests.get(f"{store.url}/gcs/storage/v1/b/other/o/a", params={"alt": "media"}, headers=auth,
                        timeout=5).status_code == 403


def test_azure_directory_sas_is_signed_for_the_prefix_and_expires(store: ScopedStore, clock: Clock) -> None:
    scope = scope_for("az://acct/ckpt/jobs/train", None, [])
    cred = _minter(store, clock, {"RCLONE_CONFIG_ORCHAZ_KEY": AZ_KEY}, ttl_s=3600).mint(scope, "runpod", "l1")
    url = cred.env["RCLONE_CONFIG_ORCHAZ_SAS_URL"]
    assert AZ_KEY not in url and "sr=d" in url and "sdd=2" in url and cred.expires_at == clock.now + 3600
    base, sas = url.split("?", 1)
    assert base == f"{store.url}/az/acct/ckpt"
    assert requests.put(f"{base}/jobs/train/_orch/s.json?{sas}", data=b"{}", timeout=5).status_code == 201
    assert requests.get(f"{base}/jobs/train/_orch/s.json?{sas}", timeout=5).content == b"{}"
    store.objects[("az", "acct/ckpt", "jobs/train2/x")] = b"other job"
    assert requests.get(f"{base}/jobs/train2/x?{sas}", timeout=5).status_code == 403
    forged = sas.replace("sdd=2", "sdd=1").replace("jobs%2Ftrain", "jobs")
    assert requests.get(f"{base}/jobs/train2/x?{forged}", timeout=5).status_code == 403   # the signature holds
    clock.now += 3600
    assert requests.get(f"{base}/jobs/train/_orch/s.json?{sas}", timeout=5).status_code == 403
    # Only a SAS URL in the daemon: orch cannot narrow it, and says so.
    whole = _minter(store, clock, {"RCLONE_CONFIG_ORCHAZ_SAS_URL": "https://acct/c?sig=x"}).mint(scope, "aws", "l1")
    assert whole.exposed and whole.expires_at is None


def test_an_azure_sas_wider_than_the_jobs_prefixes_is_said(store: ScopedStore, clock: Clock) -> None:
    """A checkpoint store and data in sibling directories of one container: rclone's one remote takes one SAS,
    so it is signed for their parent (here the whole container, read and write). Before, nothing said so: the
    node could write and delete another job's checkpoints, and ``orch plan`` reported nothing exposed."""
    minter = _minter(store, clock, {"RCLONE_CONFIG_ORCHAZ_KEY": AZ_KEY}, ttl_s=3600)
    own = minter.mint(scope_for("az://acct/ckpt/jobs/train", None, ["az://acct/ckpt/jobs/train/data"]), "runpod", "l")
    assert own.exposed == ()                             # data under the job's own prefix: the SAS is exact
    wide = minter.mint(scope_for("az://acct/ckpt/jobs/train", None, ["az://acct/ckpt/datasets/web"]), "runpod", "l")
    base, sas = wide.env["RCLONE_CONFIG_ORCHAZ_SAS_URL"].split("?", 1)
    assert "sr=c" in sas and requests.put(f"{base}/jobs/train2/x?{sas}", data=b"!", timeout=5).status_code == 201
    assert len(wide.exposed) == 1 and "the whole container of acct/ckpt" in wide.exposed[0]
    assert "racwdl" in wide.exposed[0]


def _job(doc: dict) -> JobRecord:  # type: ignore[type-arg]
    m = Manifest.model_validate(doc)
    now = datetime.now(UTC)
    return JobRecord(id=1, name=m.name, manifest=m, spec=jobspec_from_manifest(m, now), status=JobStatus.RUNNING,
                     desired_active=True, relaunch_count=0, spent_usd=0.0, created_at=now)


JOB = {"apiVersion": "orch/v1", "kind": "Job", "name": "train", "resources": {"gpu": "A100-80G", "count": 1},
       "run": {"launcher": "command", "command": "true"},
       "checkpoint": {"path": "/ckpt", "store": "s3://bkt/jobs/train", "every": "10m"}}
OFFER = Offer("runpod", "t", "r", None, "A100-80G", 1, 80, 30, 200, Interconnect.PCIE, Market.ON_DEMAND, 1.0,
              date(2026, 12, 1))


def test_the_daemon_renews_through_the_store_at_half_life_and_the_agent_switches(
        store: ScopedStore, clock: Clock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_agent import oa as orch_agent

    daemon = {"AWS_ACCESS_KEY_ID": DAEMON_KEY, "AWS_SECRET_ACCESS_KEY": DAEMON_SECRET}
    minted: list[float] = []
    minter = _minter(store, clock, daemon, ttl_s=3600)
    real = minter.mint

    def counting(*a, **k):  # type: ignore[no-untyped-def]
        minted.append(clock.now)
        return real(*a, **k)

    minter.mint = counting  # type: ignore[method-assign]
    renewer = CredentialRenewer(lambda _p: minter, clock=clock)
    job, attempt = _job(JOB), AttemptRecord(1, 1, "lnode00000001", AttemptState.RUNNING, OFFER)
    prefix = tmp_path / "launch"
    client = StoreClient(parse_store(f"file://{prefix}"))
    assert renewer.renew(job, attempt, client)
    first = json.loads((prefix / CREDENTIALS_OBJECT).read_text())
    assert first["expires_at"] == clock.now + 3600 and first["env"]["AWS_ACCESS_KEY_ID"].startswith("ASIA")
    clock.now += 1799
    assert renewer.renew(job, attempt, client) and len(minted) == 1          # not yet half its life
    clock.now += 1
    assert renewer.renew(job, attempt, client) and len(minted) == 2
    second = json.loads((prefix / CREDENTIALS_OBJECT).read_text())
    assert second["env"]["AWS_ACCESS_KEY_ID"] != first["env"]["AWS_ACCESS_KEY_ID"]
    # The agent reads the renewed object from its report prefix and switches its stores to it.
    agent = orch_agent.Agent({"report": {"kind": "local", "path": str(prefix)},
                              "checkpoint": {"store": {"kind": "local", "path": str(tmp_path / "ck")}}},
                             clock=clock, sampler=orch_agent.GpuSampler(1, run=lambda a, t: ""),
                             poller=type("P", (), {"poll": lambda self: []})())
    for name in second["env"]:
        monkeypatch.setenv(name, "before")    # the agent switches its own environment: restored after the test
    agent.refresh_credentials()
    assert os.environ["AWS_SESSION_TOKEN"] == second["env"]["AWS_SESSION_TOKEN"]
    assert agent.reporter is not None and agent.store is not None
    for s in (agent.reporter.store, agent.store):
        assert s.env["AWS_ACCESS_KEY_ID"] == second["env"]["AWS_ACCESS_KEY_ID"]
    # The renewed credential works in the fake store where the old one has expired.
    clock.now = first["expires_at"]
    with pytest.raises(ClientError):
        _s3(store, first["env"]).get_object(Bucket="bkt", Key="jobs/train/x")
    _s3(store, second["env"]).put_object(Bucket="bkt", Key="jobs/train/x", Body=b"ok")


def test_orch_plan_says_what_a_node_would_hold_unscoped_and_where(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml
    from typer.testing import CliRunner

    from orchestrator.cli.main import app

    monkeypatch.setenv("ORCH_CONFIG", str(tmp_path / "none.yaml"))
    monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'orch.db'}")
    monkeypatch.delenv("ORCH_STATE_STORE", raising=False)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({**JOB, "secrets": ["HF_TOKEN"]}))
    monkeypatch.setenv("HF_TOKEN", "hf-plan-probe")

    def plan() -> dict:  # type: ignore[type-arg]
        out = CliRunner().invoke(app, ["plan", str(job), "--json"])
        assert "hf-plan-probe" not in out.stdout
        return json.loads(out.stdout)[0]  # type: ignore[no-any-return]

    # Long-lived IAM user keys: the node gets a scoped session credential, nothing unscoped.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DAEMON_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DAEMON_SECRET)
    assert plan()["exposed"] == []
    # Session credentials cannot federate: the plan says the daemon's own values ride to the node.
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session")
    [note] = plan()["exposed"]
    assert note.startswith("s3://: the daemon's own AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN")
    # No store at all: the secrets have no scoped place to go, and the plan says they ride in the payload.
    job.write_text(yaml.safe_dump({**{k: v for k, v in JOB.items() if k != "checkpoint"}, "secrets": ["HF_TOKEN"]}))
    assert plan()["exposed"] == ["secrets HF_TOKEN: values in the node's boot payload (no store to pass them through)"]
    text = CliRunner().invoke(app, ["plan", str(job)]).stdout
    assert "exposed on the node: secrets HF_TOKEN" in text


def test_secrets_over_ssh_are_said_as_such_and_ssh_hosts_get_no_store_credential() -> None:
    from orchestrator.app.preflight import exposure_for

    no_store = Manifest.model_validate({**{k: v for k, v in JOB.items() if k != "checkpoint"},
                                        "secrets": ["HF_TOKEN"]})
    over_ssh = ("secrets HF_TOKEN: over SSH into a 0600 file on the machine, loaded into the agent's environment "
                "and deleted")
    session = {"AWS_ACCESS_KEY_ID": "ASIA1", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t"}
    assert exposure_for(Manifest.model_validate({**JOB, "secrets": ["HF_TOKEN"]}), "ssh", None, session) == [over_ssh]
    assert exposure_for(no_store, "runpod", None, {"ORCH_SSH_PRIVATE_KEY": "/k"}) == [over_ssh]
    assert exposure_for(no_store, "runpod", None, {}) == [
        "secrets HF_TOKEN: values in the node's boot payload (no store to pass them through)"]


def test_rclone_with_the_nodes_session_credential_writes_in_its_prefix_and_is_refused_outside(
        store: ScopedStore, clock: Clock, tmp_path: Path) -> None:
    """The agent's own tool: rclone reads the session credential from the environment (env_auth) and, told not
    to check the bucket (a scoped credential may not create it), works under the prefix only."""
    import shutil

    from orchestrator.runtime.objectstore import StoreAccessError

    if shutil.which("rclone") is None:
        pytest.skip("rclone is not installed (apt-get install rclone)")
    store.clock = lambda: datetime.now(UTC).timestamp()    # rclone signs with the real clock; expiry follows it
    daemon = {"AWS_ACCESS_KEY_ID": DAEMON_KEY, "AWS_SECRET_ACCESS_KEY": DAEMON_SECRET}
    cred = NodeCredentials(daemon, s3_endpoint=store.url, sts_endpoint=store.url).mint(SCOPE, "runpod", "l1")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **cred.env}
    mine = StoreClient(parse_store("s3://bkt/jobs/train/_orch/l1", store.url), environ=env)
    mine.put("status.json", b'{"v": 1}\n')
    assert mine.get("status.json") == b'{"v": 1}\n' and mine.list() == ["status.json"]
    _s3(store, daemon).put_object(Bucket="bkt", Key="jobs/other/status.json", Body=b"theirs")
    theirs = StoreClient(parse_store("s3://bkt/jobs/other", store.url), environ=env)
    with pytest.raises(StoreAccessError, match="AccessDenied"):
        theirs.get("status.json")
    with pytest.raises(StoreAccessError, match="AccessDenied"):
        theirs.put("planted.json", b"x")
