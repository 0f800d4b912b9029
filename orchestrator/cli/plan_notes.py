"""The per-job notes `orch plan` and `orch apply` print beside an offer: how the node would report (or that it is
blind), how to reach it, and what it would hold beyond its job's scoped store credential."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import BaseModel

    from orchestrator.app.apply_preview import ApplyPreview
    from orchestrator.app.plan import JobPlan
    from orchestrator.config.file import OrchConfig
    from orchestrator.manifest import LoadedManifest


def blind_notes(loaded: list[LoadedManifest], config: OrchConfig | None,
                on_own_machines: frozenset[str] = frozenset()) -> dict[str, str]:
    """Per job whose agent could not report to orch (the daemon's settings as the config and env give them),
    why it is watched by the cloud's state alone (orchestrator/runtime/node_state.py ``blind_note``). The jobs
    named in ``on_own_machines`` (their chosen offer is a machine of yours) are never blind: orch reads an own
    host over SSH with the provider's key (``SshMonitor.listens``)."""
    from orchestrator.config.errors import ConfigError
    from orchestrator.daemon.service_settings import ServiceSettings, load_service_settings
    from orchestrator.runtime.node_state import blind_note

    try:
        settings = load_service_settings(config) if config is not None else ServiceSettings()
    except ConfigError:
        settings = ServiceSettings()      # the daemon's own start reports a bad daemon: section
    notes = {lm.manifest.name: blind_note(lm.manifest, state_store=settings.state_store,
                                          ssh_key=bool(settings.ssh_private_key)) for lm in loaded}
    return {name: note for name, note in notes.items() if note is not None and name not in on_own_machines}


def reach_note(jp: JobPlan, config: OrchConfig | None) -> str | None:
    """How to log in to the chosen offer's nodes (orchestrator/config/reach.py), None when nothing is chosen."""
    from orchestrator.config.reach import reach_hint

    chosen = jp.plan.chosen
    if chosen is None:
        return None
    return reach_hint(chosen.offer.provider, _settings_or_defaults(config, chosen.offer.provider))


def _settings_or_defaults(config: OrchConfig | None, provider: str) -> BaseModel | None:
    """The provider's validated settings; None (its defaults) with no config or a section its Settings refuse:
    a hint is no place to refuse a section (the launch does, with its file and line)."""
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.providers import provider_settings

    if config is None:
        return None
    try:
        return provider_settings(config, provider)
    except ConfigError:
        return None


def exposure_notes(loaded: list[LoadedManifest], plans: list[JobPlan], config: OrchConfig | None
                   ) -> dict[str, list[str]]:
    """Per job with a chosen offer, what its node would hold beyond its job's scoped, expiring store credential
    (orchestrator/app/preflight.py ``exposure_for``); jobs that hold nothing more are left out."""
    from orchestrator.app.preflight import exposure_for

    manifests = {lm.manifest.name: lm.manifest for lm in loaded}
    out: dict[str, list[str]] = {}
    for jp in plans:
        chosen = jp.plan.chosen
        if chosen is None or jp.name not in manifests:
            continue
        notes = exposure_for(manifests[jp.name], chosen.offer.provider, config)
        if notes:
            out[jp.name] = notes
    return out


def print_apply_notes(preview: ApplyPreview, loaded: list[LoadedManifest], config: OrchConfig | None) -> None:
    """Under ``orch apply``'s plan: each job that would be blind (not one going to a machine of yours), then, per
    job about to launch, what its node would hold beyond its scoped, expiring store credential."""
    from orchestrator.app.preflight import exposure_for
    from orchestrator.cli.common import out
    from orchestrator.cli.errors import wrap
    from providers.offer import OfferOrigin

    def say(text: str) -> None:
        out(wrap(text))

    own = frozenset(launch.job for launch in preview.launches
                    if launch.planned is not None and launch.planned.offer.source is OfferOrigin.OWN)
    for name, note in sorted(blind_notes(loaded, config, own).items()):
        say(f"note: {name}: {note}")
    manifests = {lm.manifest.name: lm.manifest for lm in loaded}
    for launch in preview.launches:
        if launch.planned is None or launch.job not in manifests:
            continue
        for what in exposure_for(manifests[launch.job], launch.planned.offer.provider, config):
            say(f"exposed on the node: {launch.job}: {what}")
