"""Which credential a node needs for each of its stores: the cloud's identity where the machine has one for that
store, else one cut from the daemon's own values of the store's variables.

Identity: an AWS node launched with ``providers.aws.instance_profile`` reads s3:// through it; a GCP node with
``providers.gcp.service_account`` reads gs://; an Azure node with ``providers.azure.managed_identity`` reads
az://. Any other pairing (a GCP node writing to S3, a RunPod node anywhere, a cloud configured without an
identity) needs the daemon's values of the store's variables (``ENV_NAMES``, read from the daemon's environment
by name at launch: ``store_env``), from which orchestrator/runtime/node_credentials.py mints the node's scoped,
short-lived credential; only where no scoped form exists do the values themselves reach the node (and
``orch plan`` says so). Never in logs, events or the database. docs/runtime.md has the table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.config.file import OrchConfig

__all__ = ["ENV_NAMES", "CredentialSource", "MissingStoreCredentials", "credential_source", "identities_from_config",
           "store_env"]


class MissingStoreCredentials(ValueError):
    """A node would need credentials for a store that the daemon cannot hand over: nothing may be launched for it
    (the machine would boot, fail to report and bill until orch gave up on it)."""


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

#: Per store scheme, what must be handed over (any one group, all its names set) and how to get it.
_REQUIRED: dict[str, tuple[tuple[str, ...], ...]] = {
    "s3": (("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),),
    "gs": (("RCLONE_CONFIG_ORCHGCS_SERVICE_ACCOUNT_CREDENTIALS",),),
    "az": (("RCLONE_CONFIG_ORCHAZ_KEY",), ("RCLONE_CONFIG_ORCHAZ_SAS_URL",)),
}
_HOW = {
    "s3": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the daemon's environment (a profile, SSO or the "
          "daemon's own role cannot be handed to a machine)",
    "gs": "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or "
          "RCLONE_CONFIG_ORCHGCS_SERVICE_ACCOUNT_CREDENTIALS (gcloud user credentials cannot be handed to a machine)",
    "az": "set RCLONE_CONFIG_ORCHAZ_KEY or RCLONE_CONFIG_ORCHAZ_SAS_URL in the daemon's environment",
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
    ``service_account_credentials`` (its content, since the file is not on the node). Raises
    MissingStoreCredentials when a store needs values the daemon does not have (before anything is launched)."""
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
            key = _service_account_key(key_file)
            if key:
                out["RCLONE_CONFIG_ORCHGCS_SERVICE_ACCOUNT_CREDENTIALS"] = key
        if not any(all(out.get(n) for n in group) for group in _REQUIRED[scheme]):
            identity = IDENTITY_SETTING.get(STORE_CLOUD[scheme], "")
            hint = (f", or launch on {STORE_CLOUD[scheme]} with providers.{STORE_CLOUD[scheme]}.{identity}"
                    if identity else "")
            raise MissingStoreCredentials(f"a {provider} node cannot reach {uri}: {_HOW[scheme]}{hint}")
    return out


def _service_account_key(path: str) -> str:
    """The key file's text when it is a service-account key (rclone takes only those); gcloud's user credentials
    (``authorized_user``) and unreadable files give ''."""
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        return text if json.loads(text).get("type") == "service_account" else ""
    except (OSError, ValueError, AttributeError):
        return ""
