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

__all__ = ["StoreKind", "StoreTarget", "UnsupportedStoreError", "parse_store"]

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
        env = [(f"RCLONE_CONFIG_{S3_REMOTE.upper()}_TYPE", "s3"),
               (f"RCLONE_CONFIG_{S3_REMOTE.upper()}_ENV_AUTH", "true")]
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
