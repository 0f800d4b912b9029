"""Durable stores as rclone sees them: s3:// (AWS or S3-compatible), gs://, az://, and local paths.

rclone is configured purely through ``RCLONE_CONFIG_<REMOTE>_<KEY>`` environment variables, so no
rclone.conf is written and no credential lands on disk: s3 reads AWS_* from the environment
(``env_auth``), gcs uses Application Default Credentials (the VM's service account), azureblob uses
the VM's managed identity unless a ``RCLONE_CONFIG_ORCHAZ_KEY`` / ``..._SAS_URL`` secret is given.
``file://`` URIs and plain paths are local: plain ``cp``/``cat``, no rclone needed (tests use this).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

__all__ = ["StoreAccessError", "StoreClient", "StoreKind", "StoreTarget", "UnsupportedStoreError", "parse_store"]

S3_REMOTE = "orchs3"
GCS_REMOTE = "orchgcs"
AZ_REMOTE = "orchaz"


class UnsupportedStoreError(ValueError):
    """The URI's scheme is not one orch can move checkpoints to."""


class StoreKind(StrEnum):
    RCLONE = "rclone"
    LOCAL = "local"


@dataclass(frozen=True)
class StoreTarget:
    """A store location. ``path`` is an rclone ``remote:path`` or a local directory; ``env`` configures rclone."""

    uri: str
    kind: StoreKind
    path: str
    env: tuple[tuple[str, str], ...] = ()

    def child(self, name: str) -> str:
        """The location of ``name`` inside this one (rclone path or local path)."""
        return f"{self.path.rstrip('/')}/{name}" if self.path not in ("", "/") else f"{self.path}{name}"

    def child_uri(self, name: str) -> str:
        return f"{self.uri.rstrip('/')}/{name}"

    # Shell snippets for the startup script; every operand is quoted, so paths with spaces are safe.
    def copy_from_sh(self, src: str, dest_dir: str) -> str:
        """Copy the directory or file ``src`` (a location from ``child`` or ``path``) into ``dest_dir``."""
        if self.kind is StoreKind.LOCAL:
            return f"mkdir -p {shlex.quote(dest_dir)} && cp -R {shlex.quote(src)}/. {shlex.quote(dest_dir)}/"
        return f"rclone copy {shlex.quote(src)} {shlex.quote(dest_dir)}"

    def cat_sh(self, location: str) -> str:
        """Print a small object's content; fails (non-zero) when it does not exist."""
        if self.kind is StoreKind.LOCAL:
            return f"cat {shlex.quote(location)}"
        return f"rclone cat {shlex.quote(location)}"


def _split(uri: str) -> tuple[str, str]:
    parts = urlsplit(uri)
    return parts.netloc, parts.path.lstrip("/")


def parse_store(uri: str, endpoint: str = "") -> StoreTarget:
    """Map a store URI onto an rclone remote (or a local path). ``endpoint``: S3-compatible endpoint URL."""
    if uri.startswith("s3://"):
        bucket, key = _split(uri)
        if not bucket:
            raise UnsupportedStoreError(f"{uri!r}: s3:// needs a bucket")
        # no_check_bucket: a node's credential is scoped to its job's prefix and may not create (or even look
        # up) the bucket; rclone otherwise tries to create it before the first upload (rclone s3 docs,
        # --s3-no-check-bucket: "needed if the user you are using does not have bucket creation permissions").
        env = [(f"RCLONE_CONFIG_{S3_REMOTE.upper()}_TYPE", "s3"),
               (f"RCLONE_CONFIG_{S3_REMOTE.upper()}_ENV_AUTH", "true"),
               (f"RCLONE_CONFIG_{S3_REMOTE.upper()}_NO_CHECK_BUCKET", "true")]
        if endpoint:
            env += [(f"RCLONE_CONFIG_{S3_REMOTE.upper()}_PROVIDER", "Other"),
                    (f"RCLONE_CONFIG_{S3_REMOTE.upper()}_ENDPOINT", endpoint),
                    (f"RCLONE_CONFIG_{S3_REMOTE.upper()}_FORCE_PATH_STYLE", "true")]
        else:
            env.append((f"RCLONE_CONFIG_{S3_REMOTE.upper()}_PROVIDER", "AWS"))
        return StoreTarget(uri, StoreKind.RCLONE, f"{S3_REMOTE}:{bucket}/{key}".rstrip("/"), tuple(sorted(env)))
    if uri.startswith("gs://"):
        bucket, key = _split(uri)
        if not bucket:
            raise UnsupportedStoreError(f"{uri!r}: gs:// needs a bucket")
        env = ((f"RCLONE_CONFIG_{GCS_REMOTE.upper()}_BUCKET_POLICY_ONLY", "true"),
               (f"RCLONE_CONFIG_{GCS_REMOTE.upper()}_TYPE", "google cloud storage"))
        return StoreTarget(uri, StoreKind.RCLONE, f"{GCS_REMOTE}:{bucket}/{key}".rstrip("/"), env)
    if uri.startswith("az://"):
        account, rest = _split(uri)
        if not account or not rest:
            raise UnsupportedStoreError(f"{uri!r}: az:// needs az://ACCOUNT/CONTAINER[/PATH]")
        env = ((f"RCLONE_CONFIG_{AZ_REMOTE.upper()}_ACCOUNT", account),
               (f"RCLONE_CONFIG_{AZ_REMOTE.upper()}_TYPE", "azureblob"),
               (f"RCLONE_CONFIG_{AZ_REMOTE.upper()}_USE_MSI", "true"))
        return StoreTarget(uri, StoreKind.RCLONE, f"{AZ_REMOTE}:{rest}".rstrip("/"), env)
    if uri.startswith("file://"):
        path = urlsplit(uri).path
        if not path:
            raise UnsupportedStoreError(f"{uri!r}: file:// needs an absolute path")
        return StoreTarget(uri, StoreKind.LOCAL, path)
    if "://" in uri:
        raise UnsupportedStoreError(f"{uri!r}: supported stores are s3://, gs://, az://, file:// and local paths")
    return StoreTarget(uri, StoreKind.LOCAL, uri)


# --- reading and writing small objects (the daemon's side of the outbound-only channel) -------------------

class StoreAccessError(OSError):
    """The store could not be read or written (not: the object is absent, which reads as None).
    ``exit_code``: rclone's (3: directory not found, 4: file not found), None when rclone did not run."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


#: rclone's exit codes for "directory not found" and "file not found" (rclone docs, "Exit code").
RCLONE_NOT_FOUND = (3, 4)


class StoreClient:
    """Small whole objects in a store, through rclone (or plain files for a local store).

    Contract: ``put`` writes the whole object atomically (a temp file renamed into place locally; one
    PUT through rclone, which S3, GCS and Azure Blob apply whole), so a reader sees the old or the new
    object, never half of one. ``get`` returns None for an object that does not exist (or is empty:
    orch writes no empty object). ``environ`` is
    where rclone finds credentials (``env_auth``); nothing here logs a value from it.
    """

    def __init__(self, target: StoreTarget, *, environ: dict[str, str] | None = None, rclone: str = "rclone",
                 timeout_s: float = 60.0) -> None:
        self.target = target
        self.rclone = rclone
        self.timeout_s = timeout_s
        import os

        self._env = {**(environ if environ is not None else os.environ), **dict(target.env)}

    def _run(self, *args: str, data: bytes | None = None) -> bytes:
        import subprocess

        try:
            out = subprocess.run([self.rclone, *args], input=data, capture_output=True, env=self._env,
                                 timeout=self.timeout_s)
        except (OSError, subprocess.SubprocessError) as exc:
            raise StoreAccessError(f"rclone {args[0]}: {exc}") from None
        if out.returncode != 0:
            # rclone's stderr names paths and HTTP statuses, never credential values.
            raise StoreAccessError(f"rclone {args[0]} exited {out.returncode}: "
                                   f"{out.stderr.decode('utf-8', 'replace').strip()[-300:]}", out.returncode)
        return out.stdout

    def get(self, name: str) -> bytes | None:
        loc = self.target.child(name)
        if self.target.kind is StoreKind.LOCAL:
            try:
                with open(loc, "rb") as fh:
                    return fh.read()
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise StoreAccessError(f"{loc}: {exc}") from None
        try:
            data = self._run("cat", loc)
        except StoreAccessError as exc:
            if exc.exit_code in RCLONE_NOT_FOUND:
                return None
            raise
        # On S3 and GCS, ``rclone cat`` of an absent key lists an empty "directory" and prints nothing: orch's
        # objects are never empty, so empty reads as absent.
        return data or None

    def put(self, name: str, data: bytes) -> None:
        loc = self.target.child(name)
        if self.target.kind is StoreKind.LOCAL:
            import os
            import tempfile

            os.makedirs(os.path.dirname(loc) or ".", exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(loc) or ".", prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, loc)
            return
        self._run("rcat", loc, data=data)

    def delete(self, name: str) -> None:
        """Remove the object ``name``; an absent one is not an error."""
        loc = self.target.child(name)
        if self.target.kind is StoreKind.LOCAL:
            import os

            try:
                os.remove(loc)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StoreAccessError(f"{loc}: {exc}") from None
            return
        try:
            self._run("deletefile", loc)
        except StoreAccessError as exc:
            if exc.exit_code not in RCLONE_NOT_FOUND:
                raise

    def list(self, prefix: str = "") -> list[str]:
        """Names of the objects directly under ``prefix`` (files only), sorted; [] when there is none."""
        loc = self.target.child(prefix) if prefix else self.target.path
        if self.target.kind is StoreKind.LOCAL:
            import os

            try:
                return sorted(e for e in os.listdir(loc) if os.path.isfile(os.path.join(loc, e))
                              and not e.startswith(".tmp-"))
            except FileNotFoundError:
                return []
        try:
            listed = self._run("lsf", loc, "--files-only")
        except StoreAccessError as exc:
            if exc.exit_code in RCLONE_NOT_FOUND:
                return []
            raise
        return sorted(line for line in listed.decode().splitlines() if line)
