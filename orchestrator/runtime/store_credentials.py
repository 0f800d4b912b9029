"""How a node gets credentials for its stores (checkpoints, reports, data): the cloud's identity where the
machine has one for that store, else environment variables handed over in its boot script.

Identity: an AWS node launched with ``providers.aws.instance_profile`` reads s3:// through it; a GCP node with
``providers.gcp.service_account`` reads gs://; an Azure node with ``providers.azure.managed_identity`` reads
az://. Any other pairing (a GCP node writing to S3, a RunPod node anywhere, a cloud configured without an
identity) gets the daemon's own values of the store's variables (``ENV_NAMES``), read from the daemon's
environment by name at launch, written into the boot script's 0600 ``secrets.env`` (which the agent's start
loads and deletes) and nowhere else: not in logs, events or the database. docs/runtime.md has the table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.config import OrchConfig

__all__ = ["ENV_NAMES", "CredentialSource", "credential_source", "identities_from_config", "store_env"]


class CredentialSource(StrEnum):
    IDENTITY = "identity"          # the machine's own cloud identity reaches the store
    ENVIRONMENT = "environment"    # the daemon's values, by name, in the boot script
    LOCAL = "local"                # a local path: nothing to authenticate


#: The cloud whose identity can reach each store scheme.
STORE_CLOUD = {"s3": "aws", "gs": "gcp", "az": "azure"}

#: Per store scheme, the variables handed to a node without an identity for it (those set in the daemon).
ENV_NAMES: dict[str, tuple[str, ...]] = {
    "s3": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION"),
    "gs": ("RCLONE_CONFIG_ORCHGCS_SERVICE_ACCOUNT_CREDENTIALS",),
    "az": ("RCLONE_CONFIG_ORCHAZ_KEY", "RCLONE_CONFIG_ORCHAZ_SAS_URL"),
}

#: Each provider's settings key that gives its machines an identity.
IDENTITY_SETTING = {"aws": "instance_profile", "gcp": "service_account", "azure": "managed_identity"}


def _scheme(uri: str) -> str:
    return uri.split("://", 1)[0] if "://" in uri else ""


def identities_from_config(config: OrchConfig) -> frozenset[str]:
    """The providers whose machines orch launches with an identity (from their config sections)."""
    return frozenset(p for p, key in IDENTITY_SETTING.items() if config.provider_sections.get(p, {}).get(key))


def credential_source(uri: str, provider: str, identities: frozenset[str]) -> CredentialSource:
    scheme = _scheme(uri)
    if scheme not in STORE_CLOUD:
        return CredentialSource.LOCAL
    if STORE_CLOUD[scheme] == provider and provider in identities:
        return CredentialSource.IDENTITY
    return CredentialSource.ENVIRONMENT


def store_env(uris: Iterable[str], provider: str, identities: frozenset[str], environ: Mapping[str, str]
              ) -> dict[str, str]:
    """Name -> value of what a node on ``provider`` needs for ``uris`` beyond its identity (never logged).
    For gs:// without one, ``GOOGLE_APPLICATION_CREDENTIALS``'s key file is passed as rclone's
    ``service_account_credentials`` (its content, since the file is not on the node)."""
    out: dict[str, str] = {}
    for uri in uris:
        if credential_source(uri, provider, identities) is not CredentialSource.ENVIRONMENT:
            continue
        scheme = _scheme(uri)
        for name in ENV_NAMES[scheme]:
            if environ.get(name):
                out[name] = environ[name]
        key_file = environ.get("GOOGLE_APPLICATION_CREDENTIALS")
        if scheme == "gs" and "RCLONE_CONFIG_ORCHGCS_SERVICE_ACCOUNT_CREDENTIALS" not in out and key_file:
            try:
                with open(key_file, encoding="utf-8") as fh:
                    out["RCLONE_CONFIG_ORCHGCS_SERVICE_ACCOUNT_CREDENTIALS"] = fh.read()
            except OSError:
                pass        # the node then has no credentials for gs://: its uploads fail and say so
    return out
