"""``orch console``: the web console over the store, without a daemon (``orch daemon --console`` serves the
same pages beside the scheduler). Heavy imports (the store, Jinja2) stay inside the command."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from orchestrator.cli.common import fail_store
from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, fail
from orchestrator.cli.main import app

BIND_HELP = "HOST:PORT to listen on. Loopback needs no token; any other address needs one."
TOKEN_HELP = "Shared secret for a non-loopback address (at least 16 characters); prefer $ORCH_CONSOLE_TOKEN."


@app.command("console")
def console_cmd(
    bind: Annotated[str, typer.Option("--bind", help=BIND_HELP)] = "127.0.0.1:8470",
    token: Annotated[str | None, typer.Option("--token", envvar="ORCH_CONSOLE_TOKEN", help=TOKEN_HELP,
                                              show_default=False)] = None,
) -> None:
    """Serve the web console (fleet, spend, budgets, events, job timelines; stop and relaunch) until Ctrl-C."""
    import logging
    import signal
    import threading

    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import load_config
    from orchestrator.console.settings import ConsoleConfigError, console_settings

    try:
        settings = console_settings(bind, token)
        budgets = load_config().budgets       # the budgets page shows the config's budgets: too
    except (ConsoleConfigError, ConfigError) as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    from orchestrator.console.server import start_console
    from orchestrator.store import StoreError, open_store

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("orch")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False
    try:
        store = open_store()
    except StoreError as exc:
        fail_store(exc)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        try:
            console = start_console(store, settings, budgets=budgets)
        except ConsoleConfigError as exc:
            fail(str(exc), EXIT_NO_MATCH)
        sys.stdout.write(f"orch console on {console.url} (store {store.url}); Ctrl-C stops\n")
        sys.stdout.flush()
        stop.wait()
        console.stop()
    finally:
        store.close()
