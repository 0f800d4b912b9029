"""Serving the console: the standard library's WSGI server, one thread per request, started in a thread.

``start_console`` is what ``orch daemon --console`` and ``orch console`` call; it binds at once (a busy port
or a foreign address fails there, as ``ConsoleConfigError``) and serves until ``stop()``. Requests are logged
as method, path (never the query string) and status; never headers, cookies or form bodies.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from orchestrator.budgets import Budget
from orchestrator.clock import utcnow
from orchestrator.console.app import ConsoleApp
from orchestrator.console.auth import Guard
from orchestrator.console.settings import ConsoleConfigError, ConsoleSettings
from orchestrator.store.db import Store

log = logging.getLogger("orch.console")


class _Handler(WSGIRequestHandler):
    #: Seconds a client may stall a read or write: stopping the console waits for requests in flight (``_Server``),
    #: so a client that never finishes its request must not hold the daemon's shutdown.
    timeout = 30
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        method, _, rest = (self.requestline or "").partition(" ")
        path = rest.split(" ", 1)[0].split("?", 1)[0][:200]
        method = method[:10]
        log.info("%s %s %s", method, path, code, extra={"fields": {"method": method, "path": path,
                                                                   "status": str(code)}})

    def log_message(self, format: str, *args: Any) -> None:
        # wsgiref's own messages (bad request lines) may quote what the client sent: keep them out of logs.
        log.debug("console: http server message")


class _Server(ThreadingMixIn, WSGIServer):
    # Not daemon threads: ``server_close`` joins the requests in flight, so their log lines come before
    # whatever the caller logs after stopping (``orch daemon``'s "daemon stopped" is its last line).
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the host's name up (socket.getfqdn): slow or hanging without DNS.
        import socketserver

        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()


@dataclass
class RunningConsole:
    """A console serving in a background thread."""

    server: _Server
    thread: threading.Thread
    settings: ConsoleSettings

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    @property
    def url(self) -> str:
        host = f"[{self.settings.host}]" if ":" in self.settings.host else self.settings.host
        return f"http://{host}:{self.port}/"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def make_app(store: Store, settings: ConsoleSettings, *, clock: Callable[[], datetime] = utcnow,
             budgets: Sequence[Budget] = ()) -> ConsoleApp:
    return ConsoleApp(store, Guard(settings.token), clock=clock, budgets=budgets)


def start_console(store: Store, settings: ConsoleSettings, *, clock: Callable[[], datetime] = utcnow,
                  budgets: Sequence[Budget] = ()) -> RunningConsole:
    """Bind ``settings.host:port`` (port 0: any free one) and serve in a daemon thread until ``stop()``."""
    if not settings.loopback and settings.token is None:
        raise ConsoleConfigError(f"the console needs a token to listen on {settings.host}")
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    server_class = type("_ConsoleServer", (_Server,), {"address_family": family})
    try:
        server = server_class((settings.host, settings.port), _Handler)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConsoleConfigError(f"cannot serve the console on {settings.host}:{settings.port}: {reason} "
                                 "(the address must be this machine's and the port free)") from None
    server.set_app(make_app(store, settings, clock=clock, budgets=budgets))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.25}, name="orch-console",
                              daemon=True)
    thread.start()
    running = RunningConsole(server, thread, settings)
    log.info("console at %s", running.url, extra={"fields": {"url": running.url,
                                                              "token": "required" if settings.token else "none"}})
    return running


@contextmanager
def serving(store: Store, settings: ConsoleSettings | None, *,
            budgets: Sequence[Budget] = ()) -> Iterator[RunningConsole | None]:
    """The console served for the length of the block (nothing when ``settings`` is None)."""
    if settings is None:
        yield None
        return
    console = start_console(store, settings, budgets=budgets)
    try:
        yield console
    finally:
        console.stop()
