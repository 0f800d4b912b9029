"""``orch plan / apply / status``: jobs from manifests to machines (``down`` and ``events``: down.py, events.py).

The logic lives in orchestrator.app.jobs; this module parses flags, prints, and maps failures to
exit codes (0 ok, 1 operation failed / nothing matched, 2 bad input). Heavy imports stay inside the
commands so ``orch --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.common import (
    JsonOpt,
    build_providers_or_fail,
    close_provider,
    load_config_or_fail,
    open_store_or_fail,
    optional_config,
    out,
)
from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, fail, fail_manifests
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app
from orchestrator.cli.plan_notes import blind_notes, exposure_notes, reach_note
from orchestrator.cli.plan_print import print_plan, say

if TYPE_CHECKING:
    from orchestrator.app.status import StatusReport
    from orchestrator.config.file import OrchConfig
    from orchestrator.manifest import LoadedManifest
    from orchestrator.offers.sources import OfferSources
    from providers.base import Provider

PathsArg = Annotated[list[Path], typer.Argument(help="Manifest files or directories (*.yaml, *.yml).",
                                                show_default=False)]


# -- shared plumbing -----------------------------------------------------------------------------------

def _load(paths: list[Path], as_json: bool = False, *, allow_dirty: bool = False) -> list[LoadedManifest]:
    """Load, validate and pin the code (stderr says what each job ships, and any uncommitted change)."""
    from orchestrator.app.errors import BadInputError
    from orchestrator.app.jobs import load_with_packs
    from orchestrator.manifest import ManifestError

    try:
        loaded, packs = load_with_packs(paths, allow_dirty=allow_dirty)
    except ManifestError as exc:
        fail_manifests(exc.errors, as_json=as_json)
    except BadInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)
    from orchestrator.cli.errors import wrap

    for m, pack in zip(loaded, packs, strict=True):
        if pack is not None:
            for line in (f"code {m.manifest.name}: {pack.summary()}", *(f"note: {n}" for n in pack.notes)):
                sys.stderr.write(wrap(line) + "\n")
    return loaded


# -- plan ----------------------------------------------------------------------------------------------

def _plan_config(required: bool, as_json: bool = False) -> OrchConfig | None:
    """orch's config for a plan (``required``: --live or --configured), its provider sections checked as apply
    checks them: a plan on a provider apply would refuse says "chosen" where nothing can launch."""
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.providers import check_provider_settings

    config = load_config_or_fail(as_json) if required else optional_config()
    if config is not None:
        try:
            check_provider_settings(config)
        except ConfigError as exc:
            fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)
    return config


@app.command("plan")
def plan_cmd(
    paths: PathsArg,
    alternatives: Annotated[int, typer.Option("--alternatives", "-a", min=0, max=1000,
                                              help="Offers to show after the chosen one.")] = 4,
    live: Annotated[bool, typer.Option("--live", help="Also ask configured providers that price live.")] = False,
    configured: Annotated[bool, typer.Option("--configured", help="Only offers of providers in orch's config, "
                                             "even when none is configured (the default once one is).")] = False,
    all_providers: Annotated[bool, typer.Option("--all-providers", help="Choose among every provider's offers, "
                                                "configured or not (what apply cannot launch included).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show, per job, the offer orch would choose, the next alternatives, cost and every warning.

    With a provider configured, the choice is among configured providers only: what ``orch apply`` launches
    (app.plan.launchable_providers decides both); cheaper offers elsewhere are hints."""
    from orchestrator.app.errors import BadInputError
    from orchestrator.app.plan import launchable_providers, plan_jobs
    from orchestrator.config.errors import ConfigError

    # A failure with --json is also {"error": ...} on stdout (manifests: the error document), as apply's.
    if configured and all_providers:
        fail("--configured and --all-providers contradict each other; give one", EXIT_BAD_INPUT, as_json=as_json)
    loaded = _load(paths, as_json)
    if not loaded:   # an empty file (or only comments): the plan printed nothing at all, not even why
        fail(f"no jobs in {', '.join(str(p) for p in paths)}: nothing to plan (a job starts apiVersion: orch/v1, "
             "kind: Job)", EXIT_BAD_INPUT, as_json=as_json)
    config = _plan_config(live or configured, as_json)
    launchable = launchable_providers(config)
    only: tuple[str, ...] | None = None if all_providers or not (launchable or configured) else launchable
    if only is None and not all_providers and not as_json:
        from orchestrator.cli.errors import wrap

        sys.stderr.write(wrap("note: no provider is configured, so `orch apply` launches nothing; planned on every "
                              "provider's offers (`orch providers` says how to configure one)") + "\n")
    providers = build_providers_or_fail(config, as_json, live_only=True) if live and config is not None else {}
    try:
        from orchestrator.app.preflight import boot_check_for

        plans = plan_jobs(loaded, _offer_sources(config, providers, live, as_json), alternatives=alternatives,
                          only_providers=only, boot_check=boot_check_for(config))
        from providers.offer import OfferOrigin

        blind = blind_notes(loaded, config, frozenset(
            jp.name for jp in plans if jp.plan.chosen is not None and jp.plan.chosen.offer.source is OfferOrigin.OWN))
        reach = {jp.name: reach_note(jp, config) for jp in plans}
        exposed = exposure_notes(loaded, plans, config)
    except (BadInputError, ConfigError) as exc:   # ConfigError: a bad daemon: section (the boot check reads it)
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)
    finally:
        for p in providers.values():
            close_provider(p)
    if as_json:
        out(dumps([{**p.to_json(), "blind": blind.get(p.name), "reach": reach[p.name],
                     "exposed": exposed.get(p.name, [])} for p in plans], indent=2))
    else:
        for i, jp in enumerate(plans):
            if i:
                out()
            print_plan(jp)
            if jp.name in blind:
                say(f"note: {blind[jp.name]}", "  ", "        ")
            if reach[jp.name]:
                say(f"note: {reach[jp.name]}", "  ", "        ")
            for what in exposed.get(jp.name, []):
                say(f"exposed on the node: {what}", "  ", "        ")
        # apply launches with live prices: a job the catalog alone leaves without an offer may have one there.
        if not live and any(p != "ssh" for p in launchable) and any(jp.plan.chosen is None for jp in plans):
            out()
            say("hint: planned from the catalog alone; `orch plan --live` also asks the configured providers that "
                 "price live, as `orch apply` does when it launches", "", "  ")
    if any(jp.plan.chosen is None for jp in plans):
        raise SystemExit(EXIT_NO_MATCH)


def _offer_sources(config: OrchConfig | None, providers: dict[str, Provider], live: bool,
                   as_json: bool = False) -> OfferSources:
    """What the engine plans from: the catalog, your own machines, and (``--live``) live offers."""
    from orchestrator.cli.quote_sources import noting_live
    from orchestrator.config.errors import ConfigError
    from orchestrator.offers.sources import offer_sources
    from providers.catalog import load_catalog

    try:
        return noting_live(offer_sources(load_catalog().offers, providers=providers, config=config, live=live))
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)


# -- apply ---------------------------------------------------------------------------------------------

@app.command("apply")
def apply_cmd(
    paths: PathsArg,
    prune: Annotated[bool, typer.Option("--prune", help="Tear down jobs whose manifest is no longer given.")]
    = False,
    launch: Annotated[bool | None, typer.Option("--launch/--no-launch", help="Launch pending jobs now "
                                                "(default: only when no daemon runs).", show_default=False)]
    = None,
    max_ticks: Annotated[int, typer.Option("--max-ticks", min=1, max=10_000,
                                           help="Reconcile rounds at most while launching.")] = 8,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Launch without asking.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only show what would be recorded and launched.")]
    = False,
    dirty: Annotated[bool, typer.Option("--dirty", help="Ship uncommitted changes of tracked files too "
                                        "(default: the committed files only).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show what will launch (where, $/h, estimated total) and ask; then record and launch.

    The manifests are recorded as the desired state (one transaction) and pending jobs launched (here, or by
    the running daemon)."""
    from orchestrator.cli.apply_flow import ApplyOptions, run_apply

    loaded = _load(paths, as_json, allow_dirty=dirty)
    store = open_store_or_fail(as_json)
    try:
        code = run_apply(store, loaded, ApplyOptions(prune, launch, max_ticks, yes, dry_run, as_json))
    finally:
        store.close()
    raise SystemExit(code)


# -- status --------------------------------------------------------------------------------------------

@app.command("status")
def status_cmd(
    job: Annotated[str | None, typer.Argument(help="Only this job.", show_default=False)] = None,
    as_json: JsonOpt = False,
    watching: Annotated[bool, typer.Option("--watch", "-w", help="Refresh in place until Ctrl-C "
                                           "(with --json: one JSON document per line per refresh).")] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between refreshes with --watch.")] = 2.0,
) -> None:
    """Jobs, their machines, what burns now ($/h) and what was spent."""
    from orchestrator.app.errors import JobsError
    from orchestrator.app.status import status
    from orchestrator.cli.watch import check_interval, watch

    problem = check_interval(interval)
    if problem:
        fail(problem, EXIT_BAD_INPUT, as_json=as_json)
    store = open_store_or_fail(as_json)

    def render() -> str:
        try:
            report = status(store, job)
        except JobsError as exc:
            fail(str(exc), EXIT_NO_MATCH, as_json=as_json)
        if as_json:
            return dumps(report.to_json(), indent=None if watching else 2)
        return "\n".join(_status_lines(report))

    try:
        if watching:
            watch(render, interval, json_lines=as_json)
        else:
            out(render())
    finally:
        store.close()


def _print_status(report: StatusReport) -> None:
    for line in _status_lines(report):
        out(line)


def _status_lines(report: StatusReport) -> list[str]:
    from orchestrator.cli.status_table import status_lines

    return status_lines(report)
