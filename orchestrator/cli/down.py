"""``orch down``: end jobs' machines and wait until every provider confirms them gone."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.common import (
    JsonOpt,
    build_providers_or_fail,
    close_provider,
    load_config_or_fail,
    open_store_or_fail,
    out,
)
from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, MIN_POLL_S, check_number, fail, warn, wrap
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app
from orchestrator.cli.progress import Progress
from orchestrator.redaction import safe_line
from orchestrator.words import plural

if TYPE_CHECKING:
    from orchestrator.app.down import DownOutcome
    from orchestrator.app.status import InstanceView
    from orchestrator.store import Store
    from providers.base import Provider


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
    from orchestrator.app.down import live_machines, mark_down
    from orchestrator.app.errors import JobsError

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
    store = open_store_or_fail(as_json)
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
            out(wrap(f"marked for teardown: {', '.join(targets)} ({plural(len(before), 'machine')})"))
        outcome = _wait_down(store, targets, before, timeout, poll, as_json)
    finally:
        store.close()
    _down_result(targets, before, outcome, as_json)
    if not outcome.confirmed:
        sys.stderr.write(not_confirmed(outcome, timeout) + "\n")
        for i in outcome.remaining:
            sys.stderr.write(f"  {i.provider} {i.instance_id or '?'} (launch {i.launch_id}, {i.state}) job {i.job}\n")
        again = "--all" if everything else " ".join(targets)
        first = "fix what the warnings above say, then run" if outcome.errors else "run"
        sys.stderr.write(f"hint: they may still bill: {first} `orch down {again} --yes` again (`orch status` lists "
                         "them)\n")
        raise SystemExit(EXIT_NO_MATCH)


def _wait_down(store: Store, targets: list[str], before: list[InstanceView], timeout: float, poll: float,
               as_json: bool) -> DownOutcome:
    """Tick (or let the running daemon work) until the providers confirm every machine gone; progress on stderr."""
    from orchestrator.app.down import wait_down
    from orchestrator.app.launching import build_engine, daemon_running
    from orchestrator.config.errors import ConfigError
    from orchestrator.store.leases import DaemonAlreadyRunningError
    from providers.catalog import load_catalog

    providers: dict[str, Provider] = {}
    try:
        engine = None
        if not daemon_running(store):
            config = load_config_or_fail(as_json)
            providers = build_providers_or_fail(config, as_json)
            engine = build_engine(store, config, providers, load_catalog().offers, launches_allowed=False,
                                  use_live_offers=False)
        elif not as_json:
            out("a daemon is running: waiting for it to terminate the machines")
        with Progress(f"terminating {plural(len(before), 'machine')}") as progress:
            said: list[str] = []

            def say(error: str) -> None:     # as it happens, not after the wait: a refused key is news now
                if len(said) < 10:
                    said.append(error)
                    warn(error)

            return wait_down(engine, store, targets, timeout_s=timeout, poll_s=poll,
                             on_tick=lambda left: progress.update(machines_left(left)), on_error=say,
                             configured=frozenset(providers) if engine is not None else None)
    except DaemonAlreadyRunningError as exc:
        fail(str(exc), EXIT_NO_MATCH, as_json=as_json)
    except ConfigError as exc:     # e.g. an alert webhook's url_env that is not set
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)
    finally:
        for p in providers.values():
            close_provider(p)


def not_confirmed(outcome: DownOutcome, timeout: float) -> str:
    """``error: 2 machines not confirmed gone after 37s (--timeout 10: ...):``, the time it really took: a slow
    cloud's retries run a tick past ``--timeout``; no time when the wait ended early (nothing left to wait for)."""
    waited = f" after {outcome.waited_s:.0f}s" if outcome.timed_out else ""
    if outcome.timed_out and outcome.waited_s >= timeout + 1:
        waited += f" (--timeout {timeout:g}: the clouds' answers took longer)"
    return f"error: {plural(len(outcome.remaining), 'machine')} not confirmed gone{waited}:"


def machines_left(left: Sequence[InstanceView]) -> str:
    """``3 machines left: aws 2, gcp 1`` (``none left`` once the providers confirm them all gone)."""
    if not left:
        return "none left"
    counts = Counter(i.provider for i in left)
    return f"{plural(len(left), 'machine')} left: " + ", ".join(f"{p} {n}" for p, n in sorted(counts.items()))


def _down_result(targets: list[str], before: list[InstanceView], outcome: DownOutcome | None, as_json: bool) -> None:
    if as_json:
        remaining = outcome.remaining if outcome else []
        out(dumps({"jobs": targets, "machines": len(before), "confirmed": not remaining,
                         "remaining": [i.to_json() for i in remaining],
                         # a cloud's words, redacted as the warning lines on stderr are
                         "errors": [safe_line(str(e)) for e in outcome.errors] if outcome else []}, indent=2))
    elif not targets:
        out("no jobs to tear down")
    elif outcome is not None and outcome.confirmed:
        out(wrap(f"down: {', '.join(targets)}; {plural(len(before), 'machine')} terminated, confirmed by the "
                 "providers"))
