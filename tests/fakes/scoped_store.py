"""A fake object store that enforces the scope a node's credential carries: S3 (+ STS), GCS (+ OAuth/STS token
exchange) and Azure Blob (service SAS), one HTTP server on 127.0.0.1.

Why not moto: moto 5 issues ``GetFederationToken`` credentials but never applies their session policy (its IAM
enforcement, ``INITIAL_NO_AUTH_ACTION_COUNT``, evaluates only a user's or role's attached policies), and it has no
GCS or Azure. So this fake keeps, per token it issued, the scope the token was cut to and refuses any request
outside it, as the clouds document:

* S3: the session policy of ``GetFederationToken`` (AWS STS API reference: the resulting permissions are the
  intersection of the user's and the passed policy). The fake evaluates Allow statements (``Action`` list,
  ``Resource`` ARNs with ``*`` wildcards, ``s3:prefix`` StringLike conditions for ListBucket); no statement, no
  access. SigV4 signatures are not verified: the access key id in ``Authorization`` and the
  ``X-Amz-Security-Token`` header identify the caller.
* GCS: Credential Access Boundary rules (availableResource per bucket, ``inRole:roles/storage.objectAdmin`` or
  ``objectViewer``, and the availabilityCondition's ``resource.name.startsWith('...')`` /
  ``api.getAttribute('storage.googleapis.com/objectListPrefix', '').startsWith('...')`` terms joined by ``||``,
  the only forms orch writes). The service-account JWT is not verified: its ``iss`` names the account.
* Azure: the service SAS's signature IS verified (HMAC-SHA256 with the account key over the version 2020-12-06+
  string-to-sign, rebuilt here from the query), and ``sr=d`` limits it to blobs under the signed directory,
  ``sp`` to the operations, ``se`` to the time.

``clock`` (epoch seconds) decides expiry, so tests move time without waiting.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["ScopedStore"]


@dataclass
class _Token:
    kind: str                       # "s3-root", "s3-session", "gcs-source", "gcs-downscoped"
    expires_at: float | None
    policy: dict[str, Any] = field(default_factory=dict)
    secret: str = ""


class ScopedStore:
    """Objects: ``objects[(service, bucket or account/container, key)] = bytes``."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.objects: dict[tuple[str, str, str], bytes] = {}
        self.tokens: dict[str, _Token] = {}           # access key id (S3) or bearer token (GCS) -> what it may do
        self.az_keys: dict[str, str] = {}             # account -> base64 key
        self.refused: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    # --- set-up ---
    def add_s3_root(self, access_key: str, secret: str) -> None:
        """The daemon's long-lived IAM user keys: everything allowed, may call GetFederationToken."""
        self.tokens[access_key] = _Token("s3-root", None, secret=secret)

    def add_az_account(self, account: str, key_b64: str) -> None:
        self.az_keys[account] = key_b64

    def daemon_env(self, access_key: str = "AKIAFAKEDAEMON000001", secret: str = "fakeDaemonSecret0123456789abcdef"
                   ) -> dict[str, str]:
        """A daemon's environment whose store keys this fake knows and whose token services are this fake: AWS
        keys (long-lived, may federate), a service-account key whose token_uri is here, an Azure account key, and
        the ``ORCH_*_ENDPOINT`` variables that point orch's minting here."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.add_s3_root(access_key, secret)
        az_key = base64.b64encode(b"fake azure account key for the scoped store test fake....").decode()
        self.add_az_account("*", az_key)      # every account (the examples name several)
        pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
        sa = json.dumps({"type": "service_account", "project_id": "p", "private_key_id": "k1", "private_key": pem,
                         "client_email": "orch-daemon@p.iam.gserviceaccount.com", "client_id": "1",
                         "token_uri": f"{self.url}/gcs/token"})
        return {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret, "ORCH_STS_ENDPOINT": self.url,
                "RCLONE_CONFIG_ORCHGCS_SERVICE_ACCOUNT_CREDENTIALS": sa,
                "ORCH_GCS_STS_ENDPOINT": f"{self.url}/gcs/v1/token",
                "RCLONE_CONFIG_ORCHAZ_KEY": az_key, "ORCH_AZ_BLOB_ENDPOINT": f"{self.url}/az/{{account}}"}

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ScopedStore:
        store = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _go(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, headers, out = store.handle(self.command, self.path, dict(self.headers), body)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(out)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _go

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # --- dispatch ---
    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        parts = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        h = {k.lower(): v for k, v in headers.items()}
        with self.lock:
            if parts.path.startswith("/gcs/"):
                return self._gcs(method, parts.path[4:], query, h, body)
            if parts.path.startswith("/az/"):
                return self._az(method, parts.path[3:], query, body)
            if method == "POST" and parts.path == "/" and b"Action=" in body:
                return self._sts(body, h)
            return self._s3(method, parts.path, query, h, body)

    def _deny(self, why: str, status: int = 403, code: str = "AccessDenied") -> tuple[int, dict[str, str], bytes]:
        self.refused.append(why)
        return status, {"Content-Type": "application/xml"}, (
            f"<Error><Code>{code}</Code><Message>{why}</Message></Error>").encode()

    def _live(self, token: _Token | None) -> bool:
        return token is not None and (token.expires_at is None or self.clock() < token.expires_at)

    # --- AWS STS + S3 ---
    def _sts(self, body: bytes, h: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        caller = self.tokens.get(_s3_key_id(h))
        if form.get("Action") != "GetFederationToken" or caller is None or caller.kind != "s3-root":
            return self._deny("only an IAM user's long-term keys may call GetFederationToken")
        duration = int(form.get("DurationSeconds", "43200"))
        if not 900 <= duration <= 129600:
            return self._deny("DurationSeconds out of range", 400, "ValidationError")
        key_id = "ASIA" + secrets.token_hex(8).upper()
        expires = self.clock() + duration
        self.tokens[key_id] = _Token("s3-session", expires, json.loads(form.get("Policy") or '{"Statement": []}'),
                                     secret=secrets.token_hex(20))
        token = "FQoG" + secrets.token_urlsafe(48)
        self.tokens[key_id].policy["_session_token"] = token
        exp = datetime.fromtimestamp(expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        xml = (f"<GetFederationTokenResponse><GetFederationTokenResult><Credentials>"
               f"<AccessKeyId>{key_id}</AccessKeyId><SecretAccessKey>{self.tokens[key_id].secret}</SecretAccessKey>"
               f"<SessionToken>{token}</SessionToken><Expiration>{exp}</Expiration></Credentials>"
               f"<FederatedUser><Arn>arn:aws:sts::123456789012:federated-user/{form.get('Name')}</Arn>"
               f"<FederatedUserId>123456789012:{form.get('Name')}</FederatedUserId></FederatedUser>"
               f"</GetFederationTokenResult></GetFederationTokenResponse>")
        return 200, {"Content-Type": "text/xml"}, xml.encode()

    def _s3(self, method: str, path: str, query: dict[str, str], h: dict[str, str],
            body: bytes) -> tuple[int, dict[str, str], bytes]:
        bucket, _, key = unquote(path).lstrip("/").partition("/")
        listing = method == "GET" and not key
        action = ("s3:ListBucket" if listing else {"GET": "s3:GetObject", "HEAD": "s3:GetObject",
                                                   "PUT": "s3:PutObject", "DELETE": "s3:DeleteObject"}[method])
        resource = f"arn:aws:s3:::{bucket}" if listing else f"arn:aws:s3:::{bucket}/{key}"
        token = self.tokens.get(_s3_key_id(h))
        if not self._live(token):
            return self._deny(f"{action} {resource}: unknown or expired key", 403, "ExpiredToken")
        assert token is not None
        if token.kind == "s3-session":
            if h.get("x-amz-security-token") != token.policy.get("_session_token"):
                return self._deny("session token missing or wrong", 403, "InvalidToken")
            if not _s3_allows(token.policy, action, resource, query.get("prefix", "")):
                return self._deny(f"{action} {resource} is outside the session policy")
        elif token.kind != "s3-root":
            return self._deny("not an S3 credential")
        if listing:
            prefix = query.get("prefix", "")
            keys = sorted(k for (svc, b, k) in self.objects if svc == "s3" and b == bucket and k.startswith(prefix))
            items = "".join(f"<Contents><Key>{k}</Key><Size>{len(self.objects[('s3', bucket, k)])}</Size></Contents>"
                            for k in keys)
            return 200, {"Content-Type": "application/xml"}, (
                f"<ListBucketResult><Name>{bucket}</Name><Prefix>{prefix}</Prefix><KeyCount>{len(keys)}</KeyCount>"
                f"<IsTruncated>false</IsTruncated>{items}</ListBucketResult>").encode()
        return self._object("s3", bucket, key, method, body)

    def _object(self, svc: str, bucket: str, key: str, method: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        if method == "PUT":
            self.objects[(svc, bucket, key)] = body
            return (201 if svc == "az" else 200), {"ETag": '"x"'}, b""
        if method == "DELETE":
            self.objects.pop((svc, bucket, key), None)
            return (202 if svc == "az" else 204), {}, b""
        data = self.objects.get((svc, bucket, key))
        if data is None:
            return 404, {}, b"<Error><Code>NoSuchKey</Code></Error>"
        return 200, {"Content-Type": "application/octet-stream"}, data

    # --- GCS: token endpoint, STS exchange, objects (JSON API: media download/upload) ---
    def _gcs(self, method: str, path: str, query: dict[str, str], h: dict[str, str],
             body: bytes) -> tuple[int, dict[str, str], bytes]:
        if path == "/token":          # the service account's JWT bearer grant (signature not verified)
            token = "ya29.src-" + secrets.token_urlsafe(24)
            self.tokens[token] = _Token("gcs-source", self.clock() + 3600)
            return 200, {"Content-Type": "application/json"}, json.dumps(
                {"access_token": token, "expires_in": 3600, "token_type": "Bearer"}).encode()
        if path == "/v1/token":       # STS token exchange with an access boundary
            form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
            source = self.tokens.get(form.get("subject_token", ""))
            if not self._live(source) or source is None or source.kind != "gcs-source":
                return self._deny("subject token unknown or expired", 400, "invalid_grant")
            options = json.loads(unquote(form.get("options", "{}")))
            token = "ya29.ds-" + secrets.token_urlsafe(24)
            self.tokens[token] = _Token("gcs-downscoped", source.expires_at, options.get("accessBoundary", {}))
            remaining = int((source.expires_at or 0) - self.clock())
            return 200, {"Content-Type": "application/json"}, json.dumps(
                {"access_token": token, "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                 "token_type": "Bearer", "expires_in": remaining}).encode()
        m = re.fullmatch(r"(?:/upload)?/storage/v1/b/([^/]+)/o(?:/(.+))?", path)
        if not m:
            return 404, {}, b"{}"
        bucket = m.group(1)
        name = unquote(m.group(2) or query.get("name", ""))
        write = method in ("POST", "PUT", "DELETE")
        token = self.tokens.get(h.get("authorization", "").removeprefix("Bearer "))
        if not self._live(token) or token is None:
            return self._deny(f"gs://{bucket}/{name}: token unknown or expired", 401)
        if token.kind == "gcs-downscoped" and not _cab_allows(token.policy, bucket, name, write):
            return self._deny(f"gs://{bucket}/{name} is outside the access boundary")
        return self._object("gcs", bucket, name, "PUT" if method == "POST" else method, body)

    # --- Azure Blob with a service SAS ---
    def _az(self, method: str, path: str, query: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        account, container, blob = ([*unquote(path).lstrip("/").split("/", 2), "", ""])[:3]
        key = self.az_keys.get(account) or self.az_keys.get("*")
        if key is None or "sig" not in query:
            return self._deny("no account or no SAS", 403, "AuthenticationFailed")
        sr, sp, se = query.get("sr", ""), query.get("sp", ""), query.get("se", "")
        directory = ""
        if sr == "d":
            depth = int(query.get("sdd", "0"))
            directory = "/".join(blob.split("/")[:depth])
            if not blob.startswith(directory + "/") or len(blob.split("/")) <= depth:
                return self._deny(f"{container}/{blob} is outside the SAS's directory", 403, "AuthorizationFailure")
        resource = f"/blob/{account}/{container}" + (f"/{directory}" if directory else "")
        to_sign = "\n".join([sp, query.get("st", ""), se, resource, query.get("si", ""), query.get("sip", ""),
                             query.get("spr", ""), query.get("sv", ""), sr, "", "", "", "", "", "", ""])
        want = base64.b64encode(hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()).decode()
        if not hmac.compare_digest(want, query["sig"]):
            return self._deny("SAS signature does not match", 403, "AuthenticationFailed")
        if self.clock() >= datetime.strptime(se, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp():
            return self._deny("SAS expired", 403, "AuthenticationFailed")
        need = {"GET": "r", "HEAD": "r", "PUT": "w", "DELETE": "d"}[method]
        if need not in sp:
            return self._deny(f"SAS lacks {need}", 403, "AuthorizationPermissionMismatch")
        return self._object("az", f"{account}/{container}", blob, method, body)


def _s3_key_id(h: dict[str, str]) -> str:
    m = re.search(r"Credential=([^/,\s]+)/", h.get("authorization", ""))
    return m.group(1) if m else ""


def _s3_allows(policy: dict[str, Any], action: str, resource: str, prefix: str) -> bool:
    for st in policy.get("Statement", []):
        actions = st.get("Action", [])
        resources = st.get("Resource", [])
        actions = [actions] if isinstance(actions, str) else actions
        resources = [resources] if isinstance(resources, str) else resources
        if st.get("Effect") != "Allow" or not any(fnmatchcase(action, a) for a in actions):
            continue
        if not any(fnmatchcase(resource, r) for r in resources):
            continue
        like = (st.get("Condition") or {}).get("StringLike", {}).get("s3:prefix")
        if like is not None and not any(fnmatchcase(prefix, p) for p in ([like] if isinstance(like, str) else like)):
            continue
        return True
    return False


_TERM = re.compile(r"resource\.name\.startsWith\('([^']*)'\)"
                   r"|api\.getAttribute\('storage\.googleapis\.com/objectListPrefix', ''\)\.startsWith\('([^']*)'\)")


def _cab_allows(boundary: dict[str, Any], bucket: str, name: str, write: bool) -> bool:
    for rule in boundary.get("accessBoundaryRules", []):
        if rule.get("availableResource") != f"//storage.googleapis.com/projects/_/buckets/{bucket}":
            continue
        roles = rule.get("availablePermissions", [])
        if write and "inRole:roles/storage.objectAdmin" not in roles:
            continue
        expr = (rule.get("availabilityCondition") or {}).get("expression", "")
        full = f"projects/_/buckets/{bucket}/objects/{name}"
        for term in expr.split(" || "):
            m = _TERM.fullmatch(term.strip())
            if m and m.group(1) is not None and full.startswith(m.group(1)):
                return True
    return False

