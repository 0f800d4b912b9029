"""``orch apply``: show the plan, ask before money is spent, record the desired state, launch.

Who launches: this command (``--launch``; the default when no daemon runs on the store), or the running daemon (it
acts on whatever is recorded). Either way money is about to be spent, so the plan is shown and, on a terminal,
confirmed with y/N first; ``--yes`` skips the question; ``--dry-run`` shows the plan and records nothing. Without a
terminal (or with ``--json``) and without ``--yes``, apply records nothing and exits 2 with the fix. ``--no-launch``
with no daemon running only records the desired state: nothing is launched, so nothing is asked. ``--prune`` that
would prune a job is asked for the same way (an empty file with ``--prune`` would end every job).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer

from orchestrator.app.errors import BadInputError
from orchestrator.cli.apply_print import ending_json, print_changes, print_ending, print_plan, print_updated_running
from orchestrator.cli.common import (
    build_providers_or_fail,
    close_provider,
    fail_internal,
    load_config_or_fail,
    money,
    optional_config,
    out,
)
from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, fail, warn, wrap
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.plan_notes import print_apply_notes
from orchestrator.cli.progress import Progress
from orchestrator.redaction import safe_line, terminal_safe
from orchestrator.words import plural

if TYPE_CHECKING:
    from orchestrator.app.apply_preview import ApplyPreview
    from orchestrator.app.launching import LaunchOutcome
    from orchestrator.config.file import OrchConfig
    from orchestrator.manifest import LoadedManifest
    from orchestrator.store import Store
    from orchestrator.store.repo import ApplyResult
    from providers.base import Provider


@dataclass(frozen=True, slots=True)
class ApplyOptions:
    prune: bool = False
    launch: bool | None = None       # None: launch here unless a daemon runs
    max_ticks: int = 8
    yes: bool = False
    dry_run: bool = False
    as_json: bool = False


def stdin_is_terminal() -> bool:
    """Whether there is someone to ask (a seam the tests replace)."""
    return sys.stdin.isatty()


def run_apply(store: Store, loaded: list[LoadedManifest], opts: ApplyOptions) -> int:
    """The whole of ``orch apply``; returns the exit code."""
    from orchestrator.app.down import live_machines
    from orchestrator.app.launching import command_running, daemon_running

    running = daemon_running(store)
    if opts.launch and running:
        fail("a daemon is running on this store and launches pending jobs itself; "
             "leave out --launch (or stop the daemon)", EXIT_NO_MATCH, as_json=opts.as_json)
    other = None if running or opts.launch is False else command_running(store)
    if other is not None:
        # Not a daemon: another command's one-shot engine holds its share of the job leases until it exits.
        fail(safe_line(f"another `orch apply --launch` or `orch down` is driving this store now (lease owner "
                       f"{other}); run this again once it has finished, or pass --no-launch to only record the "
                       "desired state; nothing was recorded"), EXIT_NO_MATCH, as_json=opts.as_json)
    here = (not running) if opts.launch is None else opts.launch
    config = load_config_or_fail(opts.as_json) if here else optional_config()
    providers: dict[str, Provider] = (build_providers_or_fail(config, opts.as_json) if here and config is not None
                                      else {})
    try:
        preview = _preview(store, loaded, config, providers, here, opts)
        launcher = "orch apply" if here else "the daemon" if running else None
        if not opts.as_json and (launcher is not None or opts.dry_run):
            print_plan(preview, launcher)
            if here and not providers and preview.launches:
                # Every job then reads "no eligible offer": say why before anything is asked or recorded.
                out(wrap("note: no provider is configured, so nothing launches and the jobs wait (`orch providers` "
                         "says how to configure one; `orch plan` shows what every provider offers)"))
        if not opts.as_json:
            print_apply_notes(preview, loaded, config)
        if opts.dry_run:
            _finish_dry_run(preview, launcher, opts)
            return 0
        if opts.prune and preview.changes.pruned and not opts.yes:
            _confirm_prune(preview.changes.pruned, opts)
        if launcher is not None and preview.will_launch and not opts.yes:
            _confirm(preview, here, opts)
        result = _record(store, loaded, opts)
        # A pruned job's machine is ended by whoever ticks the engine: this command, the daemon, or nobody now.
        ending = live_machines(store, result.pruned) if result.pruned else []
        ender = None if here and not providers else launcher
        if not opts.as_json:
            print_changes(result)
            print_ending(ending, ender)
            print_updated_running(preview)
            if running:
                out("a daemon is running: it launches and tears down from here")
        code, outcome = (_launch(store, config, providers, opts) if here and config is not None
                         else (0, None))
        if opts.as_json:
            out(dumps({**_json(preview, launcher, result, outcome), "ending": ending_json(ending, ender)}, indent=2))
        return code
    finally:
        for p in providers.values():
            close_provider(p)


def _preview(store: Store, loaded: list[LoadedManifest], config: OrchConfig | None,
             providers: dict[str, Provider], here: bool, opts: ApplyOptions) -> ApplyPreview:
    from orchestrator.app.apply_preview import preview_apply
    from orchestrator.app.plan import launchable_providers
    from orchestrator.app.preflight import boot_check_for
    from orchestrator.cli.quote_sources import noting_live
    from orchestrator.clock import utcnow
    from orchestrator.config.errors import ConfigError
    from orchestrator.offers.sources import offer_sources
    from providers.catalog import load_catalog

    try:
        # What the engine will plan from: this command launches with live offers (build_engine's default).
        sources = noting_live(offer_sources(load_catalog().offers, providers=providers, config=config, live=here),
                              "live offers")
        return preview_apply(store, loaded, sources, prune=opts.prune,
                             only_providers=launchable_providers(config), boot_check=boot_check_for(config),
                             budgets=config.budgets if config is not None else (),
                             owner=config.owner if config is not None else None, now=utcnow())
    except (BadInputError, ConfigError) as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=opts.as_json)


def _confirm(preview: ApplyPreview, here: bool, opts: ApplyOptions) -> None:
    n = len(preview.will_launch)
    what = f"{plural(n, 'job')} at {money(preview.price_hr)}/h"
    if opts.as_json or not stdin_is_terminal():
        fix = "pass --yes to launch, or --dry-run to only see the plan"
        if here:
            fix += ", or --no-launch to record the desired state without launching"
        fail(f"refusing to launch {what} without confirmation: "
             f"{'--json never asks' if opts.as_json else 'no terminal to ask on'}; {fix}; nothing was recorded",
             EXIT_BAD_INPUT, as_json=opts.as_json)
    total = preview.estimated_total_usd
    estimate = f", estimated {money(total)} in all" if total is not None else ""
    if not typer.confirm(f"Launch {what}{estimate}?", default=False):
        fail("nothing recorded, nothing launched", EXIT_NO_MATCH)


def _confirm_prune(pruned: tuple[str, ...] | list[str], opts: ApplyOptions) -> None:
    """Pruning ends jobs and their machines (an empty file with --prune would end every one): it is asked
    for like a launch, and refused without a terminal unless --yes."""
    names = ", ".join(list(pruned)[:5]) + (f" and {len(pruned) - 5} more" if len(pruned) > 5 else "")
    what = f"{plural(len(pruned), 'job')} ({names})"
    if opts.as_json or not stdin_is_terminal():
        fail(safe_line(f"refusing to prune {what} without confirmation: "
                       f"{'--json never asks' if opts.as_json else 'no terminal to ask on'}; pass --yes to prune "
                       "them, or leave out --prune; nothing was recorded"), EXIT_BAD_INPUT, as_json=opts.as_json)
    if not typer.confirm(safe_line(f"Prune {what}? Their machines are ended."), default=False):
        fail("nothing recorded, nothing pruned", EXIT_NO_MATCH)


def _record(store: Store, loaded: list[LoadedManifest], opts: ApplyOptions) -> ApplyResult:
    from orchestrator.app.jobs import apply

    try:
        return apply(store, loaded, prune=opts.prune)
    except BadInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=opts.as_json)
    except Exception as exc:
        fail_internal("apply", exc, opts.as_json)


# -- printing -------------------------------------------------------------------------------------------

#: Where a result line ("launched  JOB ...", "waiting   JOB: why") goes on past 80 columns: under the job's name.
_UNDER_NAME = " " * 10


def _finish_dry_run(preview: ApplyPreview, launcher: str | None, opts: ApplyOptions) -> None:
    if opts.as_json:
        out(dumps({**_json(preview, launcher, None, None), "dry_run": True}, indent=2))
        return
    print_changes(preview.changes, prefix="would be ")
    print_updated_running(preview)
    out("dry run: nothing recorded, nothing launched")


def _json(preview: ApplyPreview, launcher: str | None, result: ApplyResult | None,
          outcome: LaunchOutcome | None) -> dict[str, Any]:
    doc = preview.to_json()
    if result is not None:
        doc["changes"] = {"created": list(result.created), "updated": list(result.updated),
                          "unchanged": list(result.unchanged), "pruned": list(result.pruned)}
    doc.update({"dry_run": False, "recorded": result is not None, "launcher": launcher,
                "launched": [launch.to_json() for launch in outcome.launches] if outcome else [],
                # A cloud's words, redacted as the text lines (warnings, ``waiting``) are: they may echo a key.
                "waiting": {job: safe_line(why) for job, why in sorted(outcome.waiting.items())} if outcome else {},
                "errors": [safe_line(str(e)) for e in outcome.errors] if outcome else []})
    return doc


# -- launching ------------------------------------------------------------------------------------------

def _launch(store: Store, config: OrchConfig, providers: dict[str, Provider],
            opts: ApplyOptions) -> tuple[int, LaunchOutcome | None]:
    from orchestrator.app.launching import Launch, build_engine, launch_pending
    from orchestrator.config.errors import ConfigError
    from orchestrator.store.leases import DaemonAlreadyRunningError
    from providers.catalog import load_catalog

    if not providers:
        message = wrap("no providers are configured (see `orch providers`): nothing launched; the desired state "
                       "is recorded")
        (sys.stderr.write if opts.as_json else out)(message + ("\n" if opts.as_json else ""))
        return EXIT_NO_MATCH, None
    launched: list[Launch] = []
    try:
        engine = build_engine(store, config, providers, load_catalog().offers)
        with Progress("launching pending jobs") as progress:
            def on_launch(launch: Launch) -> None:
                launched.append(launch)
                if not opts.as_json:
                    # The cloud's words (its id, type, region) escaped before wrapping, so the escapes count.
                    out(wrap(terminal_safe(f"launched  {launch.job} on {launch.provider} {launch.instance_id} "
                                           f"({launch.instance_type}, {launch.region}, {launch.market.value}) "
                                           f"{money(launch.price_hr)}/h"), _UNDER_NAME))

            said = [-1]

            def on_tick(n: int) -> None:     # a round that launched nothing more is not news
                if len(launched) != said[0]:
                    said[0] = len(launched)
                    progress.update(f"round {n}: {len(launched)} launched")

            outcome = launch_pending(engine, max_ticks=opts.max_ticks, on_launch=on_launch, on_tick=on_tick)
    except DaemonAlreadyRunningError as exc:
        fail(str(exc), EXIT_NO_MATCH, as_json=opts.as_json)
    except ConfigError as exc:     # e.g. an alert webhook's url_env that is not set
        fail(str(exc), EXIT_BAD_INPUT, as_json=opts.as_json)
    except Exception as exc:
        fail_internal("launch", exc, opts.as_json)
    if not opts.as_json:
        for name, why in sorted(outcome.waiting.items()):
            out(wrap(safe_line(f"waiting   {name}: {why}"), _UNDER_NAME))
    for err in outcome.errors[:10]:
        warn(str(err))
    if outcome.failed:      # the tick's errors were said above, as warnings (as before): not a verdict
        sys.stderr.write(f"error: {plural(len(outcome.waiting), 'job')} not launched\n")
        return EXIT_NO_MATCH, outcome
    if outcome.waiting and not opts.as_json:
        # Waiting (no offer now, a busy host, a budget) is what the engine does, not an error: exit 0.
        why = "; ".join(f"{name}: {reason}" for name, reason in sorted(outcome.waiting.items()))
        waits = "waits" if len(outcome.waiting) == 1 else "wait"
        out(wrap(safe_line(f"{len(launched)} launched, {len(outcome.waiting)} {waits}: {why}")))
    return 0, outcome
