"""The engine's default StartupRenderer: the machine's boot script, rendered from the job's manifest.

Given to the provider as the machine's user data (UserData, startup-script, customData, user_data, container
args, onstart): it installs the agent and starts it, and the agent starts the job and reports to the job's
store (orchestrator/runtime/boot.py), so no machine needs inbound access. The script carries the launch id
(``ORCH_LAUNCH_ID``), the node rank and, for a gang's rank > 0, node 0's address when the engine knows it.

Store credentials the machine has no identity for are minted at launch, scoped to the job's prefix and short-lived
(orchestrator/runtime/node_credentials.py), never the daemon's own keys where a scoped form exists. Secret values
(the manifest's ``secrets``, by name, read from ``environ``) go through the job's store (``secrets.json``, put by
the StoreBootstrapper before the go), not in the boot script; only a job with no store to report to carries them
in its boot script (``exposure`` says so, and ``orch plan`` prints it). SSH-provider hosts get no
script: the SSH bootstrapper starts their jobs (as it does a cloud job with no store to report to when orch has an
SSH key: ``orchestrator.runtime.store_monitor.starts_by_boot``).
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from orchestrator.engine.hooks import StartupScriptError
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.runtime.boot import compacted_agent, render_boot
from orchestrator.runtime.from_manifest import render_input_for
from orchestrator.runtime.node_credentials import NodeCredential, NodeCredentials
from orchestrator.runtime.node_facts import NodeSettings, launch_facts, node_settings_for
from orchestrator.runtime.node_renewal import job_scope
from orchestrator.runtime.node_state import job_state_uri, launch_state_uri
from orchestrator.runtime.objectstore import UnsupportedStoreError
from orchestrator.runtime.render_input import RenderInput, RenderInputError
from orchestrator.runtime.store_credentials import MissingStoreCredentials
from orchestrator.runtime.store_monitor import starts_by_boot
from orchestrator.words import reason
from providers.fabric import attached_fabric

__all__ = ["PAYLOAD_LIMITS", "ManifestStartupRenderer", "PayloadLimit", "payload_size"]


@dataclass(frozen=True)
class PayloadLimit:
    """How much boot script a provider takes, in the unit it counts (``payload_size``), and where that is said."""

    provider: str
    field: str
    limit: int
    source: str


# Linux's MAX_ARG_STRLEN: one NAME=value string of a process's environment, which is how a pod's container gets
# the script (RunPod's and Vast's APIs publish no limit of their own on an env value).
_ENV_STRING_MAX = 131072
_B64_NAME = "ORCH_BOOT_B64"

#: Per provider, the boot script's limit. Measured sizes per shipped example: docs/runtime.md.
PAYLOAD_LIMITS: dict[str, PayloadLimit] = {
    "aws": PayloadLimit("aws", "UserData (gzip'd bytes before base64)", 16384,
                        "EC2 RunInstances: user data is limited to 16 KB, in raw form, before it is base64-encoded; "
                        "orch sends it gzip'd (cloud-init decompresses it)"),
    "gcp": PayloadLimit("gcp", "metadata startup-script (bytes)", 262144,
                        "GCE metadata: a value is limited to 256 KB (512 KB for all entries)"),
    "azure": PayloadLimit("azure", "osProfile.customData (bytes before base64)", 65535,
                          "Azure VM REST: customData decodes to a binary array of at most 65535 bytes"),
    "lambda": PayloadLimit("lambda", "user_data (bytes)", 1_000_000,
                           "Lambda Cloud OpenAPI 1.8.3: user data must be plain text and cannot exceed 1MB"),
    "runpod": PayloadLimit("runpod", f"env {_B64_NAME} (base64 characters)", _ENV_STRING_MAX - len(_B64_NAME) - 2,
                           "no published limit; Linux MAX_ARG_STRLEN (131072) per environment string"),
    "vastai": PayloadLimit("vastai", f"env {_B64_NAME} (base64 characters)", _ENV_STRING_MAX - len(_B64_NAME) - 2,
                           "onstart is limited to 4048 characters (Vast OpenAPI), so it only decodes the env "
                           "value; Linux MAX_ARG_STRLEN (131072) per environment string"),
}

def payload_size(provider: str, script: str) -> int:
    """The boot script's size as ``provider`` counts it (PAYLOAD_LIMITS' unit)."""
    raw = len(script.encode())
    if provider == "aws":
        # As providers/aws/run_instances.py user_data sends it (not imported here: it would import botocore).
        return len(gzip.compress(script.encode(), compresslevel=9, mtime=0))
    if provider in ("runpod", "vastai"):
        return 4 * ((raw + 2) // 3)   # sent base64-encoded in an environment variable
    return raw


def credentials_from_env(environ: Mapping[str, str], identities: frozenset[str], *, dry_run: bool = False,
                         s3_endpoint: str = "") -> NodeCredentials:
    """The minter with the token services' endpoints from the environment (``ORCH_STS_ENDPOINT``,
    ``ORCH_GCS_STS_ENDPOINT``, ``ORCH_AZ_BLOB_ENDPOINT``; unset: the clouds' own), ``ORCH_NODE_CREDENTIAL_TTL_S``."""
    extra: dict[str, str] = {}
    if environ.get("ORCH_GCS_STS_ENDPOINT"):
        extra["gcs_sts_endpoint"] = environ["ORCH_GCS_STS_ENDPOINT"]
    if environ.get("ORCH_AZ_BLOB_ENDPOINT"):
        extra["az_blob_endpoint"] = environ["ORCH_AZ_BLOB_ENDPOINT"]
    ttl = int(environ.get("ORCH_NODE_CREDENTIAL_TTL_S") or 0)
    return NodeCredentials(environ, identities, dry_run=dry_run, s3_endpoint=s3_endpoint,
                           sts_endpoint=environ.get("ORCH_STS_ENDPOINT", ""), **extra,  # type: ignore[arg-type]
                           **({"ttl_s": ttl} if ttl > 0 else {}))


class ManifestStartupRenderer:
    """``credentials``: the minter of the nodes' scoped store credentials (default: from ``environ``)."""

    def __init__(self, node_settings: Mapping[str, NodeSettings] | None = None, *,
                 environ: Mapping[str, str] | None = None, identities: frozenset[str] = frozenset(),
                 state_store: str = "", ssh_key: bool = False, credentials: NodeCredentials | None = None) -> None:
        self.node_settings = dict(node_settings or {})
        self.ssh_key = ssh_key
        self.environ = environ if environ is not None else os.environ
        self.identities = identities
        self.state_store = state_store
        self.credentials = credentials
        # Made here, in the thread that builds the engine, not by the first tick (boot.compacted_agent: 3.11's
        # parser and threads).
        compacted_agent()

    def render(self, job: JobRecord, attempt: AttemptRecord) -> str:
        """The boot script for ``attempt`` ('' where SSH starts the job). Raises StartupScriptError when it cannot
        be built or is over the provider's limit (PAYLOAD_LIMITS): nothing may then be launched."""
        script = self.boot_script(job, attempt)
        provider = attempt.offer.provider
        limit = PAYLOAD_LIMITS.get(provider)
        if script and limit is not None and (size := payload_size(provider, script)) > limit.limit:
            raise StartupScriptError(f"the boot script is {size} ({limit.field}); {provider} takes {limit.limit} "
                                     "(fewer or shorter secrets, or a machine identity for the store)")
        return script

    def boot_script(self, job: JobRecord, attempt: AttemptRecord) -> str:
        """As ``render`` without the provider's size limit (for measuring it)."""
        provider = attempt.offer.provider
        has_store = launch_state_uri(job.manifest, attempt.launch_id, self.state_store) is not None
        if not starts_by_boot(provider, has_store, self.ssh_key):
            return ""       # the SSH bootstrapper starts it: booting it too would start it twice
        node = node_settings_for(self.node_settings, provider, attempt.instance_id)
        facts = launch_facts(job, attempt, node, self.node_settings.get(attempt.master_key or ""),
                             state_store=self.state_store, fabric=attached_fabric(
                                 provider, attempt.offer.instance_type, job.manifest.resources.nodes))
        try:
            ri = render_input_for(job.manifest, facts)
            if ri.report is not None:
                # The node boots by itself but starts the job when orch says (the start step's StoreBootstrapper),
                # and a gang's rank > 0 learns node 0's address from that go (node 0 may not exist yet); its
                # secrets come with the go, through the store.
                ri = replace(ri, report=replace(ri.report, wait_for_start=True, secrets_from_store=bool(ri.secrets)),
                             master_from_start=ri.node_rank > 0 and attempt.master_addr is None)
            cred = self.node_credential(job, attempt, node.store_endpoint)
            script = render_boot(ri, self._values(ri, cred), attempt.launch_id)
        except (RenderInputError, UnsupportedStoreError, MissingStoreCredentials) as exc:
            raise StartupScriptError(str(exc)) from None
        return script

    def minter(self, s3_endpoint: str = "") -> NodeCredentials:
        return self.credentials or credentials_from_env(self.environ, self.identities, s3_endpoint=s3_endpoint)

    def node_credential(self, job: JobRecord, attempt: AttemptRecord, s3_endpoint: str = "") -> NodeCredential:
        """The launch's scoped store credential (MissingStoreCredentials: the daemon has nothing to cut it from;
        a token service's refusal is a StartupScriptError: nothing is launched without it)."""
        try:
            return self.minter(s3_endpoint).mint(job_scope(job, self.state_store), attempt.offer.provider,
                                                 attempt.launch_id)
        except MissingStoreCredentials:
            raise
        except Exception as exc:
            raise StartupScriptError(f"no scoped store credential for the node: the token service said "
                                     f"{reason(exc, 'nothing')[:200]}") from None

    def exposure(self, job: JobRecord, provider: str) -> list[str]:
        """What a ``provider`` node of ``job`` is handed unscoped, and where ([] when nothing): for ``orch plan``.
        Minted dry (no token service is called)."""
        names = ", ".join(sorted(job.manifest.secrets))
        over_ssh = (f"secrets {names}: over SSH into a 0600 file on the machine, loaded into the agent's "
                    "environment and deleted") if names else ""
        if provider == "ssh":
            return [over_ssh] if over_ssh else []    # orch hands an SSH host no store credential: its own config
        node = node_settings_for(self.node_settings, provider)
        minter = credentials_from_env(self.environ, self.identities, dry_run=True, s3_endpoint=node.store_endpoint)
        try:
            out = list(minter.mint(job_scope(job, self.state_store), provider, "plan").exposed)
        except MissingStoreCredentials:
            out = []
        has_store = job_state_uri(job.manifest, self.state_store) is not None
        if names and not has_store:
            out.append(over_ssh if self.ssh_key else
                       f"secrets {names}: values in the node's boot payload (no store to pass them through)")
        return out

    def _values(self, ri: RenderInput, cred: NodeCredential) -> dict[str, str]:
        missing = [n for n in ri.secrets if n not in self.environ]
        if missing:
            raise StartupScriptError(f"secrets not set in the daemon's environment: {', '.join(missing)}")
        values = dict(cred.env)
        if cred.expires_at is not None:
            values["ORCH_CREDENTIALS_EXPIRE_AT"] = str(int(cred.expires_at))
        if ri.report is None or not ri.report.secrets_from_store:
            # No store to pass them through: the boot payload carries them (``exposure`` says so).
            values.update({n: self.environ[n] for n in ri.secrets})
        return values
