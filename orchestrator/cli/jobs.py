"""``orch plan / apply / status / down / events``: jobs from manifests to machines and back.

The logic lives in orchestrator.jobs_service; this module parses flags, prints, and maps failures to
exit codes (0 ok, 1 operation failed / nothing matched, 2 bad input). Heavy imports stay inside the
commands so ``orch --help`` stays fast.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, MIN_POLL_S, check_number, fail, fail_manifests, warn
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app
from orchestrator.cli.progress import Progress

if TYPE_CHECKING:
    from orchestrator.config import OrchConfig
    from orchestrator.jobs_service import DownOutcome, InstanceView, JobPlan, StatusReport
    from orchestrator.manifest import LoadedManifest
    from orchestrator.offer_sources import OfferSources
    from orchestrator.planner import PlannedOffer
    from orchestrator.store import Store
    from providers.base import Provider

PathsArg = Annotated[list[Path], typer.Argument(help="Manifest files or directories (*.yaml, *.yml).",
                                                show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output (fields: docs/cli.md).")]


# -- shared plumbing -----------------------------------------------------------------------------------

def _load(paths: list[Path], as_json: bool = False, *, allow_dirty: bool = False) -> list[LoadedManifest]:
    """Load, validate and pin the code (stderr says what each job ships, and any uncommitted change)."""
    from orchestrator.jobs_service import BadInputError, load_with_packs
    from orchestrator.manifest import ManifestError

    try:
        loaded, packs = load_with_packs(paths, allow_dirty=allow_dirty)
    except ManifestError as exc:
        fail_manifests(exc.errors, as_json=as_json)
    except BadInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)
    import textwrap

    for m, pack in zip(loaded, packs, strict=True):
        if pack is not None:
            for line in (f"code {m.manifest.name}: {pack.summary()}", *(f"note: {n}" for n in pack.notes)):
                sys.stderr.write(textwrap.fill(line, PLAN_WIDTH, subsequent_indent="  ", break_long_words=False,
                                               break_on_hyphens=False) + "\n")
    return loaded


def _config(as_json: bool = False) -> OrchConfig:
    from orchestrator.config import ConfigError, load_config

    try:
        return load_config()
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)


def _providers(config: OrchConfig, as_json: bool = False) -> dict[str, Provider]:
    from orchestrator.config import ConfigError
    from orchestrator.wiring import build_providers

    try:
        return build_providers(config)
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)


def _store(as_json: bool = False) -> Store:
    from orchestrator.store import StoreError, open_store

    try:
        return open_store()
    except StoreError as exc:
        fail(str(exc), EXIT_NO_MATCH, as_json=as_json)


def _internal(what: str, exc: BaseException, as_json: bool = False) -> NoReturn:
    text = str(exc).strip().splitlines()
    fail(f"{what} failed: {type(exc).__name__}: {text[0] if text else ''}", EXIT_NO_MATCH, as_json=as_json)


def _out(line: str = "") -> None:
    """One line to stdout, its control characters escaped: job names are checked, but event messages and
    cloud answers (errors, states) are text from elsewhere and must not drive the terminal."""
    from orchestrator.redaction import terminal_safe

    sys.stdout.write(terminal_safe(line) + "\n")


def _money(usd: float) -> str:
    return f"${usd:,.2f}" if usd >= 0.01 or usd == 0 else f"${usd:.4f}"


# -- plan ----------------------------------------------------------------------------------------------

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
    (jobs_service.launchable_providers decides both); cheaper offers elsewhere are hints."""
    from orchestrator.jobs_service import BadInputError, launchable_providers, plan_jobs

    if configured and all_providers:
        fail("--configured and --all-providers contradict each other; give one", EXIT_BAD_INPUT)
    loaded = _load(paths)
    config = _config() if live or configured else _optional_config()
    launchable = launchable_providers(config)
    only: tuple[str, ...] | None = None if all_providers or not (launchable or configured) else launchable
    if only is None and not all_providers and not as_json:
        import textwrap

        sys.stderr.write(textwrap.fill("note: no provider is configured, so `orch apply` launches nothing; planned "
                                       "on every provider's offers (`orch providers` says how to configure one)",
                                       PLAN_WIDTH, subsequent_indent="  ") + "\n")
    providers = _providers(config) if live and config is not None else {}
    try:
        from orchestrator.runtime.preflight import boot_check_for

        plans = plan_jobs(loaded, _offer_sources(config, providers, live), alternatives=alternatives,
                          only_providers=only, boot_check=boot_check_for(config))
    except BadInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    finally:
        for p in providers.values():
            _close(p)
    blind = blind_notes(loaded, config)
    reach = {jp.name: _reach(jp, config) for jp in plans}
    if as_json:
        _out(dumps([{**p.to_json(), "blind": blind.get(p.name), "reach": reach[p.name]} for p in plans], indent=2))
    else:
        for i, jp in enumerate(plans):
            if i:
                _out()
            _print_plan(jp)
            if jp.name in blind:
                _say(f"note: {blind[jp.name]}", "  ", "        ")
            if reach[jp.name]:
                _say(f"note: {reach[jp.name]}", "  ", "        ")
    if any(jp.plan.chosen is None for jp in plans):
        raise SystemExit(EXIT_NO_MATCH)


def _reach(jp: JobPlan, config: OrchConfig | None) -> str | None:
    """How to log in to the chosen offer's nodes (orchestrator/reach.py), None when nothing is chosen."""
    from orchestrator.reach import reach_hint

    chosen = jp.plan.chosen
    if chosen is None:
        return None
    provider = chosen.offer.provider
    return reach_hint(provider, config.provider_settings(provider) if config is not None else None)


def blind_notes(loaded: list[LoadedManifest], config: OrchConfig | None) -> dict[str, str]:
    """Per job whose agent could not report to orch (the daemon's settings as the config and env give them),
    why it is watched by the cloud's state alone (orchestrator/runtime/node_state.py ``blind_note``)."""
    from orchestrator.config import ConfigError
    from orchestrator.runtime.node_state import blind_note
    from orchestrator.service import ServiceSettings, load_service_settings

    try:
        settings = load_service_settings(config) if config is not None else ServiceSettings()
    except ConfigError:
        settings = ServiceSettings()      # the daemon's own start reports a bad daemon: section
    notes = {lm.manifest.name: blind_note(lm.manifest, state_store=settings.state_store,
                                          ssh_key=bool(settings.ssh_private_key)) for lm in loaded}
    return {name: note for name, note in notes.items() if note is not None}


def _optional_config() -> OrchConfig | None:
    """orch's config where it can be read; else None, noted on stderr (planning from the catalog still works)."""
    from orchestrator.config import ConfigError, load_config

    try:
        return load_config()
    except ConfigError as exc:
        sys.stderr.write(f"note: {exc}; your own machines are not planned\n")
        return None


def _offer_sources(config: OrchConfig | None, providers: dict[str, Provider], live: bool) -> OfferSources:
    """What the engine plans from: the catalog, your own machines, and (``--live``) live offers."""
    from orchestrator.config import ConfigError
    from orchestrator.offer_sources import offer_sources
    from providers.catalog import load_catalog

    try:
        return offer_sources(load_catalog().offers, providers=providers, config=config, live=live)
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT)


def _close(provider: Provider) -> None:
    close = getattr(provider, "close", None)
    if callable(close):
        close()


#: ``orch plan``'s text fits a terminal of this many columns: lines wrap at spaces, never inside a number.
PLAN_WIDTH = 80


def _say(text: str, indent: str = "  ", more: str = "           ") -> None:
    import textwrap

    for line in textwrap.wrap(text, PLAN_WIDTH, initial_indent=indent, subsequent_indent=more,
                              break_long_words=False, break_on_hyphens=False):
        _out(line)


def _print_plan(jp: JobPlan) -> None:
    from orchestrator.jobs_service import NEAR_MISSES

    hours = f", estimated {jp.estimated_hours:g} h" if jp.estimated_hours else ""
    _say(f"{jp.name} ({jp.source}{hours})", "", "  ")
    if jp.code is not None:
        dirty = " + uncommitted changes" if jp.code.dirty else ""
        _say(f"code     commit {jp.code.commit[:12]}{dirty}, path {jp.code.path}: {jp.code.files} files, "
             f"{jp.code.bytes} bytes")
    if jp.plan.chosen is None:
        _out("  no eligible offer")
    notes: list[str] = []          # said once, however many offers they apply to
    for n, p in enumerate(jp.options):
        _print_offer("chosen" if n == 0 else f"alt {n}", p)
        if p.flags:
            _say(f"flags: {', '.join(p.flags)}", "           ")
        notes += [note for note in p.notes if note not in notes]
    for note in notes:
        _say(f"note: {note}", "  ", "        ")
    rest = len(jp.plan.eligible) - len(jp.options)
    if rest > 0:
        _out(f"  ... {rest} more eligible offer(s)")
    counts = jp.plan.exclusion_counts()
    if counts:
        by_count = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].value))
        _say(f"excluded {len(jp.plan.rejected)} offer(s): {', '.join(f'{n} {c.value}' for c, n in by_count)}")
        for p in jp.plan.near_misses(NEAR_MISSES):
            _print_offer("near", p)
            _say(f"excluded: {'; '.join(e.detail for e in p.excluded)}", "           ")
    for warning in jp.warnings:
        _say(f"warning: {warning}", "  ", "           ")
    for hint in jp.hints:
        _say(f"hint: {hint}", "  ", "        ")


def _print_offer(label: str, p: PlannedOffer) -> None:
    """One offer on one line where it fits 80 columns (the place and price line wrap under it otherwise)."""
    o = p.offer
    place = o.region + (f"/{o.zone}" if o.zone else "")
    total = f"  total {_money(p.expected_cost_usd)}" if p.expected_cost_usd is not None else ""
    nodes = f" x{p.nodes} nodes" if p.nodes > 1 else ""
    _say(f"{label:<7}{o.provider} {o.instance_type} {place} {o.market.value} {o.gpu_count}x{o.gpu}{nodes} "
         f"{_money(p.total_price_hr)}/h{total} [{o.source}]", "  ", "         ")


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
    """Show what will launch (where, $/h, estimated total) and ask; then record the manifests as the desired
    state (one transaction) and launch pending jobs (here, or by the running daemon)."""
    from orchestrator.cli.apply_flow import ApplyOptions, run_apply

    loaded = _load(paths, as_json, allow_dirty=dirty)
    store = _store(as_json)
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
    from orchestrator.cli.watch import check_interval, watch
    from orchestrator.jobs_service import JobsError, status

    problem = check_interval(interval)
    if problem:
        fail(problem, EXIT_BAD_INPUT, as_json=as_json)
    store = _store(as_json)

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
            watch(render, interval, terminal=False if as_json else None)
        else:
            _out(render())
    finally:
        store.close()


def _print_status(report: StatusReport) -> None:
    for line in _status_lines(report):
        _out(line)


def _status_lines(report: StatusReport) -> list[str]:
    from orchestrator.cli.status_table import status_lines

    return status_lines(report)


# -- down ----------------------------------------------------------------------------------------------

@app.command("down")
def down_cmd(
    jobs: Annotated[list[str] | None, typer.Argument(help="Jobs to tear down.", show_default=False)] = None,
    everything: Annotated[bool, typer.Option("--all", help="Every job.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the clouds to confirm.")]
    = 300.0,
    poll: Annotated[float, typer.Option("--poll", help="Seconds between checks while waiting.")] = 1.0,
    as_json: JsonOpt = False,
) -> None:
    """Terminate jobs' machines and wait until each provider confirms them gone (exit 0 only then)."""
    from orchestrator.jobs_service import JobsError, live_machines, mark_down

    names = list(jobs or [])
    if everything and names:
        fail("give job names or --all, not both", EXIT_BAD_INPUT, as_json=as_json)
    if not everything and not names:
        fail("name the jobs to tear down, or pass --all", EXIT_BAD_INPUT, as_json=as_json)
    check_number("--timeout", timeout, low=0, above=True, high=7 * 86400, as_json=as_json)
    check_number("--poll", poll, low=MIN_POLL_S, high=3600, as_json=as_json)
    what = "every job" if everything else ", ".join(names)
    if not yes:
        if as_json or not sys.stdin.isatty():
            fail(f"refusing to tear down {what} without confirmation: "
                 f"{'--json never asks' if as_json else 'no terminal to ask on'}; pass --yes",
                 EXIT_BAD_INPUT, as_json=as_json)
        if not typer.confirm(f"Tear down {what} and terminate its machines?", default=False):
            fail("nothing done", EXIT_NO_MATCH)
    store = _store(as_json)
    try:
        try:
            targets = mark_down(store, names, everything=everything)
        except JobsError as exc:
            fail(str(exc), EXIT_NO_MATCH, as_json=as_json)
        before = live_machines(store, targets) if targets else []
        if not targets:
            _down_result([], before, None, as_json)
            return
        if not as_json:
            _out(f"marked for teardown: {', '.join(targets)} ({len(before)} machine(s))")
        outcome = _wait_down(store, targets, before, timeout, poll, as_json)
    finally:
        store.close()
    for err in outcome.errors[:10]:
        warn(str(err))
    _down_result(targets, before, outcome, as_json)
    if not outcome.confirmed:
        sys.stderr.write(f"error: {len(outcome.remaining)} machine(s) not confirmed gone after {timeout:g}s:\n")
        for i in outcome.remaining:
            sys.stderr.write(f"  {i.provider} {i.instance_id or '?'} (launch {i.launch_id}, {i.state}) job {i.job}\n")
        raise SystemExit(EXIT_NO_MATCH)


def _wait_down(store: Store, targets: list[str], before: list[InstanceView], timeout: float, poll: float,
               as_json: bool) -> DownOutcome:
    """Tick (or let the running daemon work) until the providers confirm every machine gone; progress on stderr."""
    from orchestrator.config import ConfigError
    from orchestrator.jobs_service import build_engine, daemon_running, wait_down
    from orchestrator.store.leases import DaemonAlreadyRunningError
    from providers.catalog import load_catalog

    providers: dict[str, Provider] = {}
    try:
        engine = None
        if not daemon_running(store):
            config = _config(as_json)
            providers = _providers(config, as_json)
            engine = build_engine(store, config, providers, load_catalog().offers, launches_allowed=False,
                                  use_live_offers=False)
        elif not as_json:
            _out("a daemon is running: waiting for it to terminate the machines")
        with Progress(f"terminating {len(before)} machine(s)") as progress:
            return wait_down(engine, store, targets, timeout_s=timeout, poll_s=poll,
                             on_tick=lambda left: progress.update(machines_left(left)))
    except DaemonAlreadyRunningError as exc:
        fail(str(exc), EXIT_NO_MATCH, as_json=as_json)
    except ConfigError as exc:     # e.g. an alert webhook's url_env that is not set
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)
    finally:
        for p in providers.values():
            _close(p)


def machines_left(left: Sequence[InstanceView]) -> str:
    """``3 machine(s) left: aws 2, gcp 1`` (``none left`` once the providers confirm them all gone)."""
    if not left:
        return "none left"
    counts = Counter(i.provider for i in left)
    return f"{len(left)} machine(s) left: " + ", ".join(f"{p} {n}" for p, n in sorted(counts.items()))


def _down_result(targets: list[str], before: list[InstanceView], outcome: DownOutcome | None, as_json: bool) -> None:
    if as_json:
        remaining = outcome.remaining if outcome else []
        _out(dumps({"jobs": targets, "machines": len(before), "confirmed": not remaining,
                         "remaining": [i.to_json() for i in remaining],
                         "errors": list(outcome.errors) if outcome else []}, indent=2))
    elif not targets:
        _out("no jobs to tear down")
    elif outcome is not None and outcome.confirmed:
        _out(f"down: {', '.join(targets)}; {len(before)} machine(s) terminated, confirmed by the providers")


# -- events --------------------------------------------------------------------------------------------

@app.command("events")
def events_cmd(
    job: Annotated[str | None, typer.Argument(help="Only this job's events.", show_default=False)] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events (Ctrl-C stops).")]
    = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines, one event each.")] = False,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many past events.")] = None,
    max_wait: Annotated[float | None, typer.Option("--max-wait", help="With -f: stop after this many seconds "
                                                   "without a new event.")] = None,
    poll: Annotated[float, typer.Option("--poll", help="With -f: seconds between polls.")] = 1.0,
) -> None:
    """The event log: what orch did and saw, oldest first (a repeated condition once, with its count)."""
    from orchestrator.jobs_service import EventView, JobsError, events
    from orchestrator.jobs_service import follow as follow_events

    if limit is not None and limit < 1:
        fail("--limit must be 1 or more", EXIT_BAD_INPUT)
    check_number("--poll", poll, low=MIN_POLL_S, high=3600)
    check_number("--max-wait", max_wait, low=0, high=365 * 86400)

    def emit(e: EventView) -> None:
        _out(dumps(e.to_json()) if as_json else e.line())
        sys.stdout.flush()

    store = _store()
    try:
        past = events(store, job)
        if limit is not None:
            past = past[-limit:]
        for e in past:
            emit(e)
        if follow:
            after = past[-1].id if past else None
            try:
                for e in follow_events(store, job, after_id=after, poll_s=poll, max_wait_s=max_wait):
                    emit(e)
            except KeyboardInterrupt:
                pass
    except JobsError as exc:
        fail(str(exc), EXIT_NO_MATCH)
    finally:
        store.close()
