"""Serving the console: waitress (a production WSGI server), its own loop in one thread and a small pool of
worker threads.

``start_console`` is what ``orch daemon --console`` and ``orch console`` call; it binds at once (a busy port
or a foreign address fails there, as ``ConsoleConfigError``) and serves until ``stop()``. Requests are logged
as method, path (never the query string) and status, those waitress refuses before the app too; never headers,
cookies or form bodies (orchestrator/console/requestlog.py). Bounds: a
connection idle for ``CHANNEL_TIMEOUT_S`` is closed, request headers are capped at ``MAX_HEADER_BYTES`` and
bodies at ``MAX_BODY_BYTES`` (the app refuses a form over its own, smaller limit), and at most
``MAX_CONNECTIONS`` are open at once.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.clock import utcnow
from orchestrator.console.app import ConsoleApp
from orchestrator.console.auth import Guard
from orchestrator.console.settings import ConsoleConfigError, ConsoleSettings
from orchestrator.money.budgets import Budget
from orchestrator.store.db import Store

log = logging.getLogger("orch.console")


#: Seconds a connection may sit idle (a stalled client, a browser's preconnect) before it is closed.
CHANNEL_TIMEOUT_S = 30
MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024
MAX_CONNECTIONS = 100
#: Worker threads answering requests (the loop thread only moves bytes).
THREADS = 4


@dataclass
class RunningConsole:
    """A console serving in a background thread."""

    server: Any  # waitress's server (its listening socket and channels live in ``server._map``)
    thread: threading.Thread
    settings: ConsoleSettings
    stopping: threading.Event

    @property
    def port(self) -> int:
        return int(self.server.effective_port)

    @property
    def url(self) -> str:
        host = f"[{self.settings.host}]" if ":" in self.settings.host else self.settings.host
        return f"http://{host}:{self.port}/"

    def stop(self) -> None:
        """Stop accepting, close every connection (a stalled one too) and the worker threads; returns once the
        loop thread has ended (or after 10 s)."""
        self.stopping.set()
        try:
            self.server.pull_trigger()  # wakes the loop from its poll at once
        except OSError:
            pass    # the loop saw ``stopping`` first and has closed the trigger with everything else: it is ending
        self.thread.join(timeout=10)


def _serve(server: Any, stopping: threading.Event) -> None:
    """waitress's loop, in steps, so that ``stop`` ends it between two; everything is closed in this thread."""
    from waitress import wasyncore

    try:
        while not stopping.is_set():
            wasyncore.loop(timeout=0.25, map=server._map, count=1)
    finally:
        wasyncore.close_all(server._map)
        server.task_dispatcher.shutdown(timeout=1)


def make_app(
    store: Store, settings: ConsoleSettings, *, clock: Callable[[], datetime] = utcnow, budgets: Sequence[Budget] = ()
) -> ConsoleApp:
    return ConsoleApp(store, Guard(settings.token), clock=clock, budgets=budgets)


def start_console(
    store: Store, settings: ConsoleSettings, *, clock: Callable[[], datetime] = utcnow, budgets: Sequence[Budget] = ()
) -> RunningConsole:
    """Bind ``settings.host:port`` (port 0: any free one) and serve in a daemon thread until ``stop()``."""
    if not settings.loopback and settings.token is None:
        raise ConsoleConfigError(f"the console needs a token to listen on {settings.host}")
    from waitress import create_server

    from orchestrator.console.requestlog import log_refusals, logged

    app = logged(make_app(store, settings, clock=clock, budgets=budgets))
    try:
        # Bound here, one address (waitress would listen on every address a name such as localhost resolves
        # to): a busy port or a foreign address fails now, with the address the user gave.
        sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((settings.host, settings.port))
        except OSError:
            sock.close()
            raise
        server = create_server(
            app,
            map={},
            sockets=[sock],
            threads=THREADS,
            channel_timeout=CHANNEL_TIMEOUT_S,
            cleanup_interval=CHANNEL_TIMEOUT_S,
            max_request_header_size=MAX_HEADER_BYTES,
            max_request_body_size=MAX_BODY_BYTES,
            connection_limit=MAX_CONNECTIONS,
            ident="",
            expose_tracebacks=False,
            clear_untrusted_proxy_headers=True,
        )
        log_refusals(server)  # before the loop starts: every connection gets the logging channel
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConsoleConfigError(
            f"cannot serve the console on {settings.host}:{settings.port}: {reason} "
            "(the address must be this machine's and the port free)"
        ) from None
    stopping = threading.Event()
    thread = threading.Thread(target=_serve, args=(server, stopping), name="orch-console", daemon=True)
    thread.start()
    running = RunningConsole(server, thread, settings, stopping)
    log.info(
        "console at %s",
        running.url,
        extra={"fields": {"url": running.url, "token": "required" if settings.token else "none"}},
    )
    return running


@contextmanager
def serving(
    store: Store, settings: ConsoleSettings | None, *, budgets: Sequence[Budget] = ()
) -> Iterator[RunningConsole | None]:
    """The console served for the length of the block (nothing when ``settings`` is None)."""
    if settings is None:
        yield None
        return
    console = start_console(store, settings, budgets=budgets)
    try:
        yield console
    finally:
        console.stop()
