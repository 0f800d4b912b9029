"""Whether a job's machine could start, asked before anything is launched (``orch plan``, ``orch apply``).

The engine builds each machine's boot script at launch and launches nothing whose script cannot be built
(orchestrator/engine/launching.py); this asks the same question up front, for the offer the plan chose, with the
same renderer and this process's environment (where ``orch apply`` launches, or the daemon's when it runs here):
a secret or store credential missing, a store orch cannot reach, a script over the provider's limit, or (a
multi-node job) a fabric the launch would attach whose settings are missing (providers.fabric.setup_missing).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from orchestrator.engine.hooks import StartupScriptError

if TYPE_CHECKING:
    from orchestrator.config.file import OrchConfig
    from orchestrator.manifest.schema import Manifest
    from providers.base import Offer

__all__ = ["BootCheck", "boot_check_for", "boot_problem", "exposure_for"]

#: (manifest, offer) -> why a machine of that offer could not start the job, or None.
BootCheck = Callable[["Manifest", "Offer"], "str | None"]

_PREFLIGHT_LAUNCH_ID = "l000000000000"   # the shape of a launch id; the script's size does not depend on it


def boot_problem(manifest: Manifest, offer: Offer, *, environ: Mapping[str, str], identities: frozenset[str],
                 state_store: str, ssh_key: bool = False) -> str | None:
    """Why a machine of ``offer`` could not start ``manifest``'s job (every node of it), or None when it can."""
    from orchestrator.engine.jobspec import jobspec_from_manifest
    from orchestrator.engine.ports import AttemptRecord, JobRecord
    from orchestrator.engine.states import AttemptState, JobStatus
    from orchestrator.runtime.startup import ManifestStartupRenderer

    now = datetime.now(UTC)
    job = JobRecord(id=0, name=manifest.name, manifest=manifest, spec=jobspec_from_manifest(manifest, now),
                    status=JobStatus.PENDING, desired_active=True, relaunch_count=0, spent_usd=0.0, created_at=now)
    from orchestrator.runtime.startup import credentials_from_env

    # Dry: the plan calls no token service; the credential's values have a real one's size (the limit check).
    renderer = ManifestStartupRenderer(environ=environ, identities=identities, state_store=state_store,
                                       ssh_key=ssh_key, credentials=credentials_from_env(environ, identities,
                                                                                         dry_run=True))
    for rank in sorted({0, manifest.resources.nodes - 1}):
        attempt = AttemptRecord(0, 0, _PREFLIGHT_LAUNCH_ID, AttemptState.PLANNED, offer, node_rank=rank)
        try:
            renderer.render(job, attempt)
        except StartupScriptError as exc:
            return f"a machine on {offer.provider} could not start it: {exc}"
    return None


def _daemon_view(config: OrchConfig | None, environ: Mapping[str, str] | None
                 ) -> tuple[Mapping[str, str], str, bool, frozenset[str]]:
    """What the daemon would launch with: its environment, state store, whether it holds an SSH key, and the
    machine identities the config names (the config's daemon: section over ``ORCH_*`` when there is one)."""
    from orchestrator.runtime.store_credentials import identities_from_config

    env = os.environ if environ is None else environ
    state_store, ssh_key = env.get("ORCH_STATE_STORE", ""), bool(env.get("ORCH_SSH_PRIVATE_KEY"))
    identities: frozenset[str] = frozenset()
    if config is not None:
        from orchestrator.daemon.service_settings import load_service_settings

        settings = load_service_settings(config)
        state_store, ssh_key = settings.state_store, bool(settings.ssh_private_key)
        identities = identities_from_config(config)
    return env, state_store, ssh_key, identities


def exposure_for(manifest: Manifest, provider: str, config: OrchConfig | None,
                 environ: Mapping[str, str] | None = None) -> list[str]:
    """What a ``provider`` node of ``manifest``'s job would be handed unscoped (the daemon's own store values,
    secrets with no store to pass them through), and where; [] when it holds only its job's scoped, expiring
    credential. No token service is called."""
    from orchestrator.engine.jobspec import jobspec_from_manifest
    from orchestrator.engine.ports import JobRecord
    from orchestrator.engine.states import JobStatus
    from orchestrator.runtime.startup import ManifestStartupRenderer
    env, state_store, ssh_key, identities = _daemon_view(config, environ)
    now = datetime.now(UTC)
    job = JobRecord(id=0, name=manifest.name, manifest=manifest, spec=jobspec_from_manifest(manifest, now),
                    status=JobStatus.PENDING, desired_active=True, relaunch_count=0, spent_usd=0.0, created_at=now)
    return ManifestStartupRenderer(environ=env, identities=identities, state_store=state_store,
                                   ssh_key=ssh_key).exposure(job, provider)


def boot_check_for(config: OrchConfig | None, environ: Mapping[str, str] | None = None) -> BootCheck:
    """The check with the daemon's settings from ``config`` (state store, machine identities, SSH key)."""
    env, state_store, ssh_key, identities = _daemon_view(config, environ)

    def check(manifest: Manifest, offer: Offer) -> str | None:
        from orchestrator.config.errors import ConfigError
        from orchestrator.config.providers import provider_settings
        from providers.fabric import setup_missing, setup_needed

        nodes = manifest.resources.nodes
        if setup_needed(offer.provider, offer.instance_type, nodes) is not None:
            # Only then are the settings read: a gang whose fabric orch attaches from what they name.
            try:
                settings = provider_settings(config, offer.provider) if config is not None else None
            except ConfigError as exc:
                return f"a machine on {offer.provider} could not start it: {exc}"
            missing = setup_missing(offer.provider, offer.instance_type, nodes, settings)
            if missing is not None:
                return f"a machine on {offer.provider} could not start it: {missing}"
        return boot_problem(manifest, offer, environ=env, identities=identities, state_store=state_store,
                            ssh_key=ssh_key)

    return check
