"""Short-lived store credentials scoped to one job's prefix: what a node without a machine identity for its store
is handed instead of the daemon's own keys.

Per store scheme (docs/runtime.md, "What a node holds"):

* ``s3://``: STS ``GetFederationToken`` with an inline session policy that allows ``s3:GetObject``,
  ``s3:PutObject``, ``s3:DeleteObject`` on ``arn:aws:s3:::BUCKET/PREFIX/*`` (``s3:GetObject`` only for data
  sources) and ``s3:ListBucket`` on the bucket with an ``s3:prefix`` condition; ``DurationSeconds`` is the TTL.
  The effective permissions are the intersection of the daemon user's and this policy (AWS STS API reference,
  GetFederationToken: "Policy ... The resulting permissions are the intersection").
* ``gs://``: a Credential Access Boundary token (Google Cloud "Restrict a credential's Cloud Storage
  permissions": downscoped token exchange at sts.googleapis.com, ``accessBoundary`` with one rule per bucket,
  ``inRole:roles/storage.objectAdmin`` or ``objectViewer`` and an ``availabilityCondition`` on the object name
  prefix). It lives as long as the daemon's service-account access token it was cut from (one hour).
* ``az://``: a service SAS signed with the account key, directory-scoped (``sr=d``, ``sdd`` the directory's
  depth), with an expiry (Azure Storage REST "Create a service SAS", version 2020-12-06 string-to-sign).
  Azure accepts ``sr=d`` only on accounts with a hierarchical namespace; on a flat account use a managed identity.

Where no scoped form exists (an S3-compatible endpoint without STS, AWS session credentials that cannot call
GetFederationToken, an Azure SAS URL orch cannot narrow), the daemon's own values are handed over as before and
``NodeCredential.exposed`` says so; ``orch plan`` prints it.

Renewal: the daemon renews a launch's credential through the store (``CREDENTIALS_OBJECT`` in the launch's report
prefix, which only this job's credential and the daemon can read) once half its lifetime has passed; the agent
reads that object and switches to the new values (orchestrator/runtime/templates/agent/orch_agent/rounds.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

from orchestrator.runtime.store_credentials import (
    CredentialSource,
    credential_source,
    store_env,
)

__all__ = ["CREDENTIALS_OBJECT", "DEFAULT_TTL_S", "SECRETS_OBJECT", "NodeCredential", "NodeCredentials", "Scope",
           "az_sas_scope", "azure_sas", "gcs_boundary", "s3_policy", "scope_for"]

#: In a launch's report prefix: the renewed store credential (written by the daemon, read by the agent).
CREDENTIALS_OBJECT = "credentials.json"
#: In a launch's report prefix: the job's secrets (written by the daemon before the go, read by the agent).
SECRETS_OBJECT = "secrets.json"
#: The lifetime asked for (S3 STS and Azure SAS; a GCS downscoped token lives as long as its source token).
DEFAULT_TTL_S = 12 * 3600
_S3_TTL_RANGE = (900, 129600)     # GetFederationToken: DurationSeconds 900..129600 for an IAM user
_AZ_VERSION = "2022-11-02"
_GCS_STS = "https://sts.googleapis.com/v1/token"
_PLACEHOLDER_TOKEN = "x" * 1200   # preflight: a value as long as a real session token, so the size check holds


@dataclass(frozen=True)
class Scope:
    """What one job's node may reach: ``write`` prefixes it reads and writes under, ``read`` prefixes it only reads
    under (store URIs; a prefix covers the objects below ``<prefix>/``)."""

    write: tuple[str, ...]
    read: tuple[str, ...] = ()

    def uris(self) -> tuple[str, ...]:
        return (*self.write, *self.read)


def scope_for(checkpoint_store: str | None, job_state: str | None, data: Iterable[str]) -> Scope:
    """The job's scope: its checkpoint store and report prefix (read and write), its store data sources (read)."""
    write = tuple(dict.fromkeys(u.rstrip("/") for u in (checkpoint_store, job_state) if u and "://" in u))
    read = tuple(dict.fromkeys(u.rstrip("/") for u in data if "://" in u and not u.startswith(("http://",
                                                                                              "https://"))))
    return Scope(write, tuple(u for u in read if u not in write))


@dataclass(frozen=True)
class NodeCredential:
    """Name -> value for the node's environment (never logged), when the shortest-lived of them expires (epoch
    seconds; None when nothing expires: identity or local stores only), and what unscoped values it carries."""

    env: dict[str, str] = field(default_factory=dict)
    expires_at: float | None = None
    exposed: tuple[str, ...] = ()

    def to_json(self) -> bytes:
        return json.dumps({"env": self.env, "expires_at": self.expires_at}, sort_keys=True).encode() + b"\n"


def _split(uri: str) -> tuple[str, str, str]:
    parts = urlsplit(uri)
    return uri.split("://", 1)[0], parts.netloc, parts.path.strip("/")


# --- S3 ---------------------------------------------------------------------------------------------------

def s3_policy(scope: Scope) -> dict[str, Any]:
    """The inline session policy: objects under each prefix, listing only those prefixes."""
    statements: list[dict[str, Any]] = []
    for uris, actions in ((scope.write, ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]),
                          (scope.read, ["s3:GetObject"])):
        s3 = [_split(u) for u in uris if u.startswith("s3://")]
        if not s3:
            continue
        statements.append({"Effect": "Allow", "Action": actions,
                           "Resource": [f"arn:aws:s3:::{b}/{p}/*" if p else f"arn:aws:s3:::{b}/*" for _, b, p in s3]})
        for _, bucket, prefix in s3:
            statements.append({"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [f"arn:aws:s3:::{bucket}"],
                               "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/*", prefix] if prefix
                                                            else ["*"]}}})
    return {"Version": "2012-10-17", "Statement": statements}


# --- GCS --------------------------------------------------------------------------------------------------

def gcs_boundary(scope: Scope) -> dict[str, Any]:
    """The Credential Access Boundary: per bucket and access, objects whose name starts with a prefix."""
    rules: list[dict[str, Any]] = []
    for uris, role in ((scope.write, "inRole:roles/storage.objectAdmin"),
                       (scope.read, "inRole:roles/storage.objectViewer")):
        buckets: dict[str, list[str]] = {}
        for u in uris:
            if u.startswith("gs://"):
                _, bucket, prefix = _split(u)
                buckets.setdefault(bucket, []).append(prefix)
        for bucket, prefixes in sorted(buckets.items()):
            terms = []
            for p in prefixes:
                under = f"{p}/" if p else ""      # a store at the bucket's root: every object of the bucket
                terms.append(f"resource.name.startsWith('projects/_/buckets/{bucket}/objects/{under}')")
                terms.append(f"api.getAttribute('storage.googleapis.com/objectListPrefix', '').startsWith('{under}')")
            rules.append({"availableResource": f"//storage.googleapis.com/projects/_/buckets/{bucket}",
                          "availablePermissions": [role],
                          "availabilityCondition": {"expression": " || ".join(terms)}})
    return {"accessBoundary": {"accessBoundaryRules": rules}}


# --- Azure ------------------------------------------------------------------------------------------------

def azure_sas(account: str, container: str, directory: str, key_b64: str, *, permissions: str, expiry: datetime,
              version: str = _AZ_VERSION) -> str:
    """A directory-scoped service SAS query string (``sr=d``), signed with the account key: Azure Storage REST,
    "Create a service SAS", string-to-sign for version 2020-12-06 and later."""
    se = expiry.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    resource = f"/blob/{account}/{container}/{directory}" if directory else f"/blob/{account}/{container}"
    sr = "d" if directory else "c"
    to_sign = "\n".join([permissions, "", se, resource, "", "", "https", version, sr, "", "", "", "", "", "", ""])
    sig = base64.b64encode(hmac.new(base64.b64decode(key_b64), to_sign.encode(), hashlib.sha256).digest()).decode()
    params = [("sp", permissions), ("se", se), ("spr", "https"), ("sv", version), ("sr", sr)]
    if directory:
        params.append(("sdd", str(len(directory.split("/")))))
    params.append(("sig", sig))
    return "&".join(f"{k}={quote(v, safe='')}" for k, v in params)


def az_sas_scope(scope: Scope) -> tuple[str, str, str, str, str] | None:
    """What one SAS covers for the az:// part of ``scope``: (account, container, directory, permissions, wider),
    where ``wider`` says what the SAS grants beyond the scope ('' when nothing); None when the stores span
    several containers (rclone's one remote takes one SAS URL). One SAS is the deepest directory common to all of
    them: a checkpoint store and data in sibling directories give the SAS their parent, every other job's files
    in it included, and data under it the job's write rights."""
    places = set()
    for u in scope.uris():
        _, account, rest = _split(u)
        container, _, directory = rest.partition("/")
        places.add((account, container, directory.strip("/")))
    if len({(a, c) for a, c, _ in places}) != 1:
        return None
    account, container, _ = next(iter(places))
    common: list[str] = []
    for parts in zip(*(d.split("/") for _, _, d in places), strict=False):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    directory = "/".join(p for p in common if p)
    writes = {_split(u)[2].partition("/")[2].strip("/") for u in scope.write}
    perms = "racwdl" if writes else "rl"
    exact = writes if writes else {d for _, _, d in places}
    wider = ""
    if directory not in exact:
        where = f"directory {directory}" if directory else "the whole container"
        wider = (f"az://: a SAS ({perms}) for {where} of {account}/{container}, wider than the job's own prefixes "
                 "(its stores and data are in different directories of one container; keep them under one, or give "
                 "the machine a managed identity)")
    return account, container, directory, perms, wider


# --- minting ----------------------------------------------------------------------------------------------

class NodeCredentials:
    """Mints a node's credential for a job's scope from the daemon's environment (``environ``).

    ``identities``: providers whose machines have an identity (nothing is minted for their own cloud's store).
    ``dry_run``: no call to any cloud; values of a real credential's size (``orch plan``'s boot check).
    ``s3_endpoint`` / ``sts_endpoint`` / ``gcs_sts_endpoint`` / ``az_blob_endpoint``: where the stores and token
    services are (tests point them at local fakes; an S3-compatible store without ``sts_endpoint`` cannot be
    scoped). ``clock``: epoch seconds.
    """

    def __init__(self, environ: Mapping[str, str], identities: frozenset[str] = frozenset(), *,
                 ttl_s: int = DEFAULT_TTL_S, dry_run: bool = False, s3_endpoint: str = "", sts_endpoint: str = "",
                 gcs_sts_endpoint: str = _GCS_STS, az_blob_endpoint: str = "https://{account}.blob.core.windows.net",
                 clock: Callable[[], float] = time.time) -> None:
        self.environ = environ
        self.identities = identities
        self.ttl_s = ttl_s
        self.dry_run = dry_run
        self.s3_endpoint = s3_endpoint
        self.sts_endpoint = sts_endpoint
        self.gcs_sts_endpoint = gcs_sts_endpoint
        self.az_blob_endpoint = az_blob_endpoint
        self.clock = clock

    def mint(self, scope: Scope, provider: str, name: str) -> NodeCredential:
        """The credential a ``provider`` node needs for ``scope`` (``name``: the session's name, e.g. the launch
        id). Raises MissingStoreCredentials (before anything is launched) when the daemon has nothing to cut it
        from, and whatever the token service raises when it refuses."""
        by_scheme: dict[str, Scope] = {}
        for scheme in ("s3", "gs", "az"):
            w = tuple(u for u in scope.write if u.startswith(f"{scheme}://")
                      and credential_source(u, provider, self.identities) is CredentialSource.ENVIRONMENT)
            r = tuple(u for u in scope.read if u.startswith(f"{scheme}://")
                      and credential_source(u, provider, self.identities) is CredentialSource.ENVIRONMENT)
            if w or r:
                by_scheme[scheme] = Scope(w, r)
        env: dict[str, str] = {}
        expiries: list[float] = []
        exposed: list[str] = []
        for scheme, sub in by_scheme.items():
            # The daemon's values: checked present (MissingStoreCredentials otherwise), cut down below.
            daemon = store_env(sub.uris(), provider, self.identities, self.environ)
            minted = {"s3": self._s3, "gs": self._gcs, "az": self._az}[scheme](sub, daemon, name)
            if minted is None:
                env.update(daemon)
                exposed.append(f"{scheme}://: the daemon's own {', '.join(sorted(daemon))} (not scoped, no expiry) "
                               "in the node's boot payload")
            else:
                values, expires_at = minted
                env.update(values)
                expiries.append(expires_at)
                if scheme == "az" and (signed := az_sas_scope(sub)) is not None and signed[4]:
                    exposed.append(signed[4])
        return NodeCredential(env, min(expiries) if expiries else None, tuple(exposed))

    def _s3(self, scope: Scope, daemon: dict[str, str], name: str) -> tuple[dict[str, str], float] | None:
        if daemon.get("AWS_SESSION_TOKEN") or (self.s3_endpoint and not self.sts_endpoint):
            return None     # session credentials cannot federate; an S3-compatible store may have no STS
        regions = {k: v for k, v in daemon.items() if k in ("AWS_REGION", "AWS_DEFAULT_REGION")}
        ttl = max(_S3_TTL_RANGE[0], min(_S3_TTL_RANGE[1], self.ttl_s))
        if self.dry_run:
            return ({"AWS_ACCESS_KEY_ID": "ASIA" + "X" * 16, "AWS_SECRET_ACCESS_KEY": "x" * 40,
                     "AWS_SESSION_TOKEN": _PLACEHOLDER_TOKEN, **regions}, self.clock() + ttl)
        import boto3

        sts = boto3.client("sts", region_name=regions.get("AWS_REGION") or regions.get("AWS_DEFAULT_REGION")
                           or "us-east-1", endpoint_url=self.sts_endpoint or None,
                           aws_access_key_id=daemon["AWS_ACCESS_KEY_ID"],
                           aws_secret_access_key=daemon["AWS_SECRET_ACCESS_KEY"])
        got = sts.get_federation_token(Name=f"orch-{name}"[:32], Policy=json.dumps(s3_policy(scope)),
                                       DurationSeconds=ttl)["Credentials"]
        return ({"AWS_ACCESS_KEY_ID": got["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": got["SecretAccessKey"],
                 "AWS_SESSION_TOKEN": got["SessionToken"], **regions}, got["Expiration"].timestamp())

    def _gcs(self, scope: Scope, daemon: dict[str, str], name: str) -> tuple[dict[str, str], float] | None:
        key = daemon.get("RCLONE_CONFIG_ORCHGCS_SERVICE_ACCOUNT_CREDENTIALS", "")
        if self.dry_run:
            return {"RCLONE_CONFIG_ORCHGCS_ACCESS_TOKEN": _PLACEHOLDER_TOKEN}, self.clock() + 3600
        import google.auth.transport.requests
        from google.oauth2 import service_account, sts

        request = google.auth.transport.requests.Request()
        source = service_account.Credentials.from_service_account_info(
            json.loads(key), scopes=["https://www.googleapis.com/auth/devstorage.read_write"])
        source.refresh(request)
        got = sts.Client(self.gcs_sts_endpoint).exchange_token(
            request, grant_type="urn:ietf:params:oauth:grant-type:token-exchange", subject_token=source.token,
            subject_token_type="urn:ietf:params:oauth:token-type:access_token",
            requested_token_type="urn:ietf:params:oauth:token-type:access_token",
            additional_options=gcs_boundary(scope))
        expires_in = float(got.get("expires_in") or 3600)
        return {"RCLONE_CONFIG_ORCHGCS_ACCESS_TOKEN": got["access_token"]}, self.clock() + expires_in

    def _az(self, scope: Scope, daemon: dict[str, str], name: str) -> tuple[dict[str, str], float] | None:
        key = daemon.get("RCLONE_CONFIG_ORCHAZ_KEY")
        signed = az_sas_scope(scope)
        if not key or signed is None:
            return None     # only a SAS URL (cannot be narrowed), or several containers (one SAS URL per remote)
        account, container, directory, perms, _ = signed
        expires_at = self.clock() + self.ttl_s
        sas = ("sig=" + "x" * 44 if self.dry_run else
               azure_sas(account, container, directory, key, permissions=perms,
                         expiry=datetime.fromtimestamp(expires_at, UTC)))
        base = self.az_blob_endpoint.format(account=account)
        return {"RCLONE_CONFIG_ORCHAZ_SAS_URL": f"{base}/{container}?{sas}"}, expires_at
