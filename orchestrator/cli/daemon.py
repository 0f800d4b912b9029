"""``orch daemon`` (reconcile forever) and ``orch tick`` (reconcile once, or until quiet).

Both build the engine through ``orchestrator.daemon.assembly`` and, on SQLite, hold the store's one-daemon lock
(a second one exits 2 with the holder's pid). On PostgreSQL several daemons run at once and share the
jobs through row leases. Heavy imports stay inside the commands.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.common import fail_store
from orchestrator.cli.errors import EXIT_NO_MATCH, check_number, fail, wrap
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app
from orchestrator.redaction import safe_line, shown
from orchestrator.words import plural

if TYPE_CHECKING:
    from orchestrator.daemon.assembly import Service
    from orchestrator.engine.tick import TickReport
    from orchestrator.money.budgets import Budget


def _report_doc(report: TickReport) -> dict[str, object]:
    return {"launched": report.launched, "adopted": report.adopted, "preempted": report.preempted,
            "relaunched": report.relaunched, "terminated": report.terminated,
            "orphans_terminated": report.orphans_terminated, "idle_stopped": report.idle_stopped,
            "quiet": report.quiet, "errors": [safe_line(str(e)) for e in report.errors]}


def _configure_logging(fmt: str) -> None:
    import logging

    from orchestrator.daemon.observability import RedactingFormatter, configure_json_logging

    if fmt == "json":
        configure_json_logging()
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("orch")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


def _build():  # type: ignore[no-untyped-def]
    from orchestrator.config.errors import ConfigError
    from orchestrator.daemon.assembly import build_service
    from orchestrator.store.db import StoreError

    try:
        return build_service()
    except ConfigError as exc:
        fail(str(exc))
    except StoreError as exc:
        fail_store(exc)


def _budgets() -> tuple[Budget, ...]:
    """The config's budgets, for the console's budgets page (the config was read once already)."""
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import load_config

    try:
        return load_config().budgets
    except ConfigError as exc:
        fail(str(exc))


def _catalog_refresh() -> tuple[float, Callable[[], object] | None]:
    """(period in seconds, the refresh to run) from the config's ``catalog:`` section; no refresh to run when
    ``$ORCH_CATALOG_DIR`` pins the catalog (the loader would not read a refreshed one)."""
    import os

    from orchestrator.config.catalog import refresh_settings
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import load_config
    from providers.catalog.refresh import refresh

    try:
        settings = refresh_settings(load_config())
    except ConfigError as exc:
        fail(str(exc))
    if os.environ.get("ORCH_CATALOG_DIR"):
        return settings.every.total_seconds(), None
    return settings.every.total_seconds(), lambda: refresh([], settings)


def _serve_metrics(service: Service, port: int, host: str) -> None:
    """Start /metrics or fail with one line (an address not on this machine, a port in use)."""
    try:
        service.metrics.serve(port, host)
    except (OSError, OverflowError, UnicodeError, ValueError) as exc:
        from orchestrator.words import reason

        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else reason(exc, "refused")
        fail(f"cannot serve metrics on {shown(host)} port {port}: {why} (--metrics-host must be an "
             "address of this machine, e.g. 127.0.0.1; --metrics-port a free port, 0 to 65535)")


@app.command("tick")
def tick_cmd(
    until_quiet: Annotated[bool, typer.Option("--until-quiet", help="Tick again until nothing changes.")] = False,
    max_ticks: Annotated[int, typer.Option("--max-ticks", min=1, max=100_000, help="At most this many ticks.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per tick.")] = False,
) -> None:
    """Run a reconcile tick now (--until-quiet: until nothing changes).

    A tick lists the clouds, adopts, launches, recovers, ends idle machines and collects orphans. Exit 0 when
    the last tick met no error; 1 when it met errors (a cloud that could not be listed, say) or, with
    --until-quiet, when still not quiet after --max-ticks."""
    from orchestrator.store.leases import DaemonAlreadyRunningError, daemon_lock

    service = _build()
    try:
        with daemon_lock(service.store):
            count = max_ticks if until_quiet else 1
            for n in range(1, count + 1):
                report = service.reconciler.tick()
                doc = {"tick": n, **_report_doc(report)}
                if as_json:
                    sys.stdout.write(dumps(doc) + "\n")
                else:
                    changed = " ".join(f"{k}={v}" for k, v in doc.items() if k not in ("tick", "quiet", "errors")
                                       and v)
                    # "quiet" only when the tick also met no error: a cloud it could not list may hold a
                    # machine the store does not know is billing.
                    said = changed or ("nothing changed" if report.errors else "quiet")
                    if report.errors:
                        said += f", {plural(len(report.errors), 'error')}"
                    # In 80 columns: a cloud's error is a sentence or three; it goes on indented, never cut.
                    sys.stdout.write(wrap(f"tick {n}: {said}", "    ") + "\n")
                    for err in report.errors:
                        sys.stdout.write(wrap(safe_line(str(err)), "    ", "  error: ") + "\n")
                sys.stdout.flush()
                if report.quiet and not report.errors:
                    break
            _leave(service)
            if report.errors:
                # A script (cron, CI) reads the exit code: a cloud this tick could not list may hold a machine
                # that bills. The errors themselves are on stdout above (text lines, or the tick's JSON object).
                fail(f"tick {n} met {plural(len(report.errors), 'error')}", EXIT_NO_MATCH)
            if until_quiet and not report.quiet:
                fail(f"not quiet after {plural(max_ticks, 'tick')}", EXIT_NO_MATCH)
    except DaemonAlreadyRunningError as exc:
        fail(str(exc))
    finally:
        service.close()


def _leave(service: Service) -> None:
    """A one-shot tick on PostgreSQL hands its share back at once (the daemons need not wait out its TTL)."""
    if service.lease_owner is not None and service.store is not None:
        from orchestrator.store.fleet import leave

        with service.store.transaction() as tx:
            leave(tx, service.lease_owner)


@app.command("daemon")
def daemon_cmd(
    interval: Annotated[float, typer.Option("--interval", help="Seconds between reconcile ticks (0.05 to 86400).")
                        ] = 15.0,
    metrics_port: Annotated[int | None, typer.Option("--metrics-port", min=0, max=65535,
                                                     help="Serve Prometheus /metrics here.")] = None,
    metrics_host: Annotated[str, typer.Option("--metrics-host", help="Address for /metrics (keep it local).")
                            ] = "127.0.0.1",
    log_format: Annotated[str, typer.Option("--log-format", help="json or text.")] = "json",
    console: Annotated[str | None, typer.Option("--console", help="Also serve the web console on HOST:PORT, e.g. "
                                                "127.0.0.1:8470 (docs/console.md).", show_default=False)] = None,
    console_token: Annotated[str | None, typer.Option("--console-token", envvar="ORCH_CONSOLE_TOKEN",
                                                      help="The console's token, needed off loopback; prefer "
                                                      "$ORCH_CONSOLE_TOKEN.", show_default=False)] = None,
) -> None:
    """Reconcile forever (until SIGTERM/SIGINT): launch, watch, recover, stop idle machines."""
    import logging
    import signal
    import threading

    from orchestrator.console.server import serving
    from orchestrator.console.settings import ConsoleConfigError, console_settings
    from orchestrator.daemon.loop import DaemonSettings, run_daemon
    from orchestrator.store.fleet import leave
    from orchestrator.store.leases import DaemonAlreadyRunningError, daemon_lock

    if log_format not in ("json", "text"):
        fail(f"--log-format must be json or text, not {shown(log_format)}")
    check_number("--interval", interval, low=0.05, high=86400)
    try:
        web = console_settings(console, console_token, token_flag="--console-token") if console else None
    except ConsoleConfigError as exc:
        fail(str(exc))
    _configure_logging(log_format)
    log = logging.getLogger("orch.daemon")
    refresh_every, catalog_refresh = _catalog_refresh()
    service = _build()
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("stopping", extra={"fields": {"signal": signal.Signals(signum).name}})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        with daemon_lock(service.store), serving(service.store, web, budgets=_budgets()):
            if metrics_port is not None:
                _serve_metrics(service, metrics_port, metrics_host)
                log.info("metrics", extra={"fields": {"url": f"http://{metrics_host}:{metrics_port}/metrics"}})
            log.info("store", extra={"fields": {"url": service.store.url, "lease_owner": service.lease_owner}})
            join = getattr(service.engine_store, "join", None)
            if callable(join):
                join(service.reconciler.deps.clock())   # counted as live before the first claim: even shares
            run_daemon(lambda: service.reconciler, DaemonSettings(reconcile_interval_s=interval, settle_heap=True,
                                                                  refresh_interval_s=refresh_every),
                       service.metrics, stop, catalog_refresh=catalog_refresh)
            if service.lease_owner is not None:
                # Hand the jobs back at once instead of making the others wait for the leases to expire.
                with service.store.transaction() as tx:
                    leave(tx, service.lease_owner)
    except (DaemonAlreadyRunningError, ConsoleConfigError) as exc:
        fail(str(exc))
    finally:
        service.close()
    # Last: after the console's requests in flight, the lease hand-back and the store's close.
    log.info("daemon stopped")
