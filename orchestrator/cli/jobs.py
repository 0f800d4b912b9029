"""``orch plan / apply / status / down / events``: jobs from manifests to machines and back.

The logic lives in orchestrator.jobs_service; this module parses flags, prints, and maps failures to
exit codes (0 ok, 1 operation failed / nothing matched, 2 bad input). Heavy imports stay inside the
commands so ``orch --help`` stays fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, fail
from orchestrator.cli.main import app

if TYPE_CHECKING:
    from orchestrator.config import OrchConfig
    from orchestrator.jobs_service import InstanceView, JobPlan, Launch, StatusReport
    from orchestrator.manifest import LoadedManifest
    from orchestrator.offer_sources import OfferSources
    from orchestrator.planner import PlannedOffer
    from orchestrator.store import Store
    from providers.base import Provider

PathsArg = Annotated[list[Path], typer.Argument(help="Manifest files or directories (*.yaml, *.yml).",
                                                show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output (fields: docs/cli.md).")]


# -- shared plumbing -----------------------------------------------------------------------------------

def _load(paths: list[Path]) -> list[LoadedManifest]:
    from orchestrator.jobs_service import load
    from orchestrator.manifest import ManifestError

    try:
        return load(paths)
    except ManifestError as exc:
        for error in exc.errors:
            sys.stderr.write(error.format() + "\n")
        raise SystemExit(EXIT_BAD_INPUT) from None


def _config() -> OrchConfig:
    from orchestrator.config import ConfigError, load_config

    try:
        return load_config()
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT)


def _providers(config: OrchConfig) -> dict[str, Provider]:
    from orchestrator.config import ConfigError
    from orchestrator.wiring import build_providers

    try:
        return build_providers(config)
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT)


def _store() -> Store:
    from orchestrator.store import StoreError, open_store

    try:
        return open_store()
    except StoreError as exc:
        fail(str(exc), EXIT_NO_MATCH)


def _internal(what: str, exc: BaseException) -> NoReturn:
    text = str(exc).strip().splitlines()
    fail(f"{what} failed: {type(exc).__name__}: {text[0] if text else ''}", EXIT_NO_MATCH)


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def _money(usd: float) -> str:
    return f"${usd:,.2f}" if usd >= 0.01 or usd == 0 else f"${usd:.4f}"


# -- plan ----------------------------------------------------------------------------------------------

@app.command("plan")
def plan_cmd(
    paths: PathsArg,
    alternatives: Annotated[int, typer.Option("--alternatives", "-a", help="Offers to show after the chosen one.")]
    = 4,
    live: Annotated[bool, typer.Option("--live", help="Also ask configured providers that price live.")] = False,
    configured: Annotated[bool, typer.Option("--configured", help="Only offers of providers in orch's config "
                                             "(what `orch apply --launch` can get).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show, per job, the offer orch would choose, the next alternatives, cost and every warning."""
    from orchestrator.jobs_service import BadInputError, plan_jobs

    loaded = _load(paths)
    config = _config() if live or configured else _optional_config()
    only = config.enabled_providers() if configured and config is not None else None
    providers = _providers(config) if live and config is not None else {}
    try:
        plans = plan_jobs(loaded, _offer_sources(config, providers, live), alternatives=alternatives,
                          only_providers=only)
    except BadInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    finally:
        for p in providers.values():
            _close(p)
    if as_json:
        _out(json.dumps([p.to_json() for p in plans], indent=2))
    else:
        for i, jp in enumerate(plans):
            if i:
                _out()
            _print_plan(jp)
    if any(jp.plan.chosen is None for jp in plans):
        raise SystemExit(EXIT_NO_MATCH)


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


def _print_plan(jp: JobPlan) -> None:
    from orchestrator.jobs_service import NEAR_MISSES

    hours = f", estimated {jp.estimated_hours:g} h" if jp.estimated_hours else ""
    _out(f"{jp.name} ({jp.source}{hours})")
    if jp.plan.chosen is None:
        _out("  no eligible offer")
    for n, p in enumerate(jp.options):
        _print_offer("chosen" if n == 0 else f"alt {n}", p)
        if p.flags:
            _out(f"           flags: {', '.join(p.flags)}")
        for note in p.notes:
            _out(f"           note: {note}")
    rest = len(jp.plan.eligible) - len(jp.options)
    if rest > 0:
        _out(f"  ... {rest} more eligible offer(s)")
    counts = jp.plan.exclusion_counts()
    if counts:
        by_count = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].value))
        _out(f"  excluded {len(jp.plan.rejected)} offer(s): {', '.join(f'{n} {c.value}' for c, n in by_count)}")
        for p in jp.plan.near_misses(NEAR_MISSES):
            _print_offer("near", p)
            _out(f"           excluded: {'; '.join(e.detail for e in p.excluded)}")
    for warning in jp.warnings:
        _out(f"  warning: {warning}")


def _print_offer(label: str, p: PlannedOffer) -> None:
    o = p.offer
    place = o.region + (f"/{o.zone}" if o.zone else "")
    total = f"  total {_money(p.expected_cost_usd)}" if p.expected_cost_usd is not None else ""
    nodes = f" x{p.nodes} nodes" if p.nodes > 1 else ""
    _out(f"  {label:<7}{o.provider:<8}{o.instance_type:<30} {place:<18} {o.market.value:<10}"
         f"{o.gpu_count}x{o.gpu}{nodes}  {_money(p.total_price_hr)}/h{total}  [{o.source}]")


# -- apply ---------------------------------------------------------------------------------------------

@app.command("apply")
def apply_cmd(
    paths: PathsArg,
    prune: Annotated[bool, typer.Option("--prune", help="Tear down jobs whose manifest is no longer given.")]
    = False,
    launch: Annotated[bool | None, typer.Option("--launch/--no-launch", help="Launch pending jobs now "
                                                "(default: only when no daemon runs).", show_default=False)]
    = None,
    max_ticks: Annotated[int, typer.Option("--max-ticks", help="Reconcile rounds at most while launching.")] = 8,
) -> None:
    """Record manifests as the desired state (one transaction), then launch pending jobs."""
    from orchestrator.jobs_service import BadInputError, apply, daemon_running

    loaded = _load(paths)
    store = _store()
    try:
        try:
            result = apply(store, loaded, prune=prune)
        except BadInputError as exc:
            fail(str(exc), EXIT_BAD_INPUT)
        except Exception as exc:
            _internal("apply", exc)
        for change, names in (("created", result.created), ("updated", result.updated),
                              ("unchanged", result.unchanged), ("pruned", result.pruned)):
            for name in names:
                _out(f"{change:<10}{name}")
        _out(f"{len(result.created)} created, {len(result.updated)} updated, {len(result.unchanged)} unchanged, "
             f"{len(result.pruned)} pruned")
        running = daemon_running(store)
        if launch is None:
            launch = not running
            if running:
                _out("a daemon is running: it launches and tears down from here")
        if not launch:
            return
        if running:
            fail("a daemon is running on this store and launches pending jobs itself; "
                 "leave out --launch (or stop the daemon)", EXIT_NO_MATCH)
        code = _launch(store, max_ticks)
    finally:
        store.close()
    raise SystemExit(code)


def _launch(store: Store, max_ticks: int = 8) -> int:
    from orchestrator.jobs_service import build_engine, launch_pending
    from orchestrator.store.leases import DaemonAlreadyRunningError
    from providers.catalog import load_catalog

    config = _config()
    providers = _providers(config)
    if not providers:
        _out("no providers are configured (see `orch providers`): nothing launched; the desired state is recorded")
        return EXIT_NO_MATCH
    try:
        engine = build_engine(store, config, providers, load_catalog().offers)
        with _progress("launching") as progress:
            def on_launch(launch: Launch) -> None:
                progress.line(f"launched  {launch.job} on {launch.provider} {launch.instance_id} "
                              f"({launch.instance_type}, {launch.region}, {launch.market}) "
                              f"{_money(launch.price_hr)}/h")
            outcome = launch_pending(engine, max_ticks=max_ticks, on_launch=on_launch,
                                     on_tick=lambda n: progress.update(f"launching (round {n})"))
    except DaemonAlreadyRunningError as exc:
        fail(str(exc), EXIT_NO_MATCH)
    except Exception as exc:
        _internal("launch", exc)
    finally:
        for p in providers.values():
            _close(p)
    for name, why in sorted(outcome.waiting.items()):
        _out(f"waiting   {name}: {why}")
    for err in outcome.errors[:10]:
        sys.stderr.write(f"warning: {err}\n")
    if outcome.waiting:
        sys.stderr.write(f"error: {len(outcome.waiting)} job(s) not launched\n")
        return EXIT_NO_MATCH
    return 0


class _Progress:
    """A Rich spinner on a terminal; plain lines otherwise (pipes, CI, tests)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._status: Any = None
        self._console: Any = None

    def __enter__(self) -> _Progress:
        if sys.stdout.isatty():
            from rich.console import Console

            self._console = Console()
            self._status = self._console.status(self.what)
            self._status.__enter__()
        return self

    def update(self, text: str) -> None:
        if self._status is not None:
            self._status.update(text)

    def line(self, text: str) -> None:
        if self._console is not None:
            self._console.print(text, markup=False, highlight=False)
        else:
            _out(text)

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)


def _progress(what: str) -> _Progress:
    return _Progress(what)


# -- status --------------------------------------------------------------------------------------------

@app.command("status")
def status_cmd(
    job: Annotated[str | None, typer.Argument(help="Only this job.", show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Jobs, their machines, what burns now ($/h) and what was spent."""
    from orchestrator.jobs_service import JobsError, status

    store = _store()
    try:
        report = status(store, job)
    except JobsError as exc:
        fail(str(exc), EXIT_NO_MATCH)
    finally:
        store.close()
    if as_json:
        _out(json.dumps(report.to_json(), indent=2))
        return
    _print_status(report)


def _print_status(report: StatusReport) -> None:
    if not report.jobs:
        _out("no jobs (apply some manifests: orch apply PATH)")
    else:
        _out(f"{'JOB':<20}{'STATUS':<11}{'DESIRED':<9}{'PROVIDER':<9}{'INSTANCE':<18}{'REGION':<14}{'MARKET':<10}"
             f"{'$/H':>9}{'SPENT':>11}{'RELAUNCH':>9}  LAST EVENT")
        for j in report.jobs:
            cur = j.current
            last = f"{j.last_event.kind}: {j.last_event.message}" if j.last_event else ""
            _out(f"{j.name:<20}{j.status:<11}{j.desired_state:<9}{(cur.provider if cur else '-'):<9}"
                 f"{((cur.instance_id or '?') if cur else '-'):<18}{(cur.region if cur else '-'):<14}"
                 f"{(cur.market if cur else '-'):<10}{_money(j.burn_hr):>9}{_money(j.spent_usd):>11}"
                 f"{j.relaunches:>9}  {last[:80]}")
    if report.instances:
        _out()
        _out("instances:")
        for i in report.instances:
            _print_instance(i)
    _out()
    _out(f"total: {len(report.instances)} live instance(s), burning {_money(report.burn_hr)}/h, "
         f"spent {_money(report.spent_usd)}")


def _print_instance(i: InstanceView) -> None:
    # Quoted (the offer's) and actual (what the cloud reports, "-" where it reports none) $/h.
    actual = "-" if i.actual_price_hr is None else _money(i.actual_price_hr)
    _out(f"  {i.provider:<8} {(i.instance_id or '?'):<18} {i.instance_type:<30} {i.region:<14} {i.market:<10}"
         f"{i.state:<10}quoted {_money(i.price_hr)}/h, actual {actual}/h  job {i.job or '-'}")


# -- down ----------------------------------------------------------------------------------------------

@app.command("down")
def down_cmd(
    jobs: Annotated[list[str] | None, typer.Argument(help="Jobs to tear down.", show_default=False)] = None,
    everything: Annotated[bool, typer.Option("--all", help="Every job.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the clouds to confirm.")]
    = 300.0,
    poll: Annotated[float, typer.Option("--poll", help="Seconds between checks while waiting.")] = 1.0,
) -> None:
    """Terminate jobs' machines and wait until each provider confirms them gone (exit 0 only then)."""
    from orchestrator.jobs_service import JobsError, build_engine, daemon_running, live_machines, mark_down, wait_down
    from orchestrator.store.leases import DaemonAlreadyRunningError
    from providers.catalog import load_catalog

    names = list(jobs or [])
    if everything and names:
        fail("give job names or --all, not both", EXIT_BAD_INPUT)
    if not everything and not names:
        fail("name the jobs to tear down, or pass --all", EXIT_BAD_INPUT)
    if timeout <= 0 or poll < 0:
        fail("--timeout must be positive and --poll not negative", EXIT_BAD_INPUT)
    what = "every job" if everything else ", ".join(names)
    if not yes:
        if not sys.stdin.isatty():
            fail(f"refusing to tear down {what} without confirmation: no terminal to ask on; pass --yes",
                 EXIT_BAD_INPUT)
        if not typer.confirm(f"Tear down {what} and terminate its machines?", default=False):
            fail("nothing done", EXIT_NO_MATCH)
    store = _store()
    providers: dict[str, Provider] = {}
    try:
        try:
            targets = mark_down(store, names, everything=everything)
        except JobsError as exc:
            fail(str(exc), EXIT_NO_MATCH)
        if not targets:
            _out("no jobs to tear down")
            return
        before = live_machines(store, targets)
        _out(f"marked for teardown: {', '.join(targets)} ({len(before)} machine(s))")
        engine = None
        if not daemon_running(store):
            config = _config()
            providers = _providers(config)
            engine = build_engine(store, config, providers, load_catalog().offers, launches_allowed=False,
                                  use_live_offers=False)
        else:
            _out("a daemon is running: waiting for it to terminate the machines")
        with _progress("terminating") as progress:
            def on_tick(left: list[InstanceView]) -> None:
                progress.update(f"terminating: {len(left)} machine(s) left")
            outcome = wait_down(engine, store, targets, timeout_s=timeout, poll_s=poll, on_tick=on_tick)
    except DaemonAlreadyRunningError as exc:
        fail(str(exc), EXIT_NO_MATCH)
    finally:
        for p in providers.values():
            _close(p)
        store.close()
    for err in outcome.errors[:10]:
        sys.stderr.write(f"warning: {err}\n")
    if not outcome.confirmed:
        sys.stderr.write(f"error: {len(outcome.remaining)} machine(s) not confirmed gone after {timeout:g}s:\n")
        for i in outcome.remaining:
            sys.stderr.write(f"  {i.provider} {i.instance_id or '?'} (launch {i.launch_id}, {i.state}) job {i.job}\n")
        raise SystemExit(EXIT_NO_MATCH)
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
    """The append-only event log: what orch did and saw, oldest first."""
    from orchestrator.jobs_service import EventView, JobsError, events
    from orchestrator.jobs_service import follow as follow_events

    if limit is not None and limit < 1:
        fail("--limit must be 1 or more", EXIT_BAD_INPUT)
    if poll < 0 or (max_wait is not None and max_wait < 0):
        fail("--poll and --max-wait must not be negative", EXIT_BAD_INPUT)

    def emit(e: EventView) -> None:
        _out(json.dumps(e.to_json()) if as_json else e.line())
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
