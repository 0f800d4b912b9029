"""Serving the console: the standard library's WSGI server, one thread per request, started in a thread.

``start_console`` is what ``orch daemon --console`` and ``orch console`` call; it binds at once (a busy port
or a foreign address fails there, as ``ConsoleConfigError``) and serves until ``stop()``. Requests are logged
as method, path (never the query string) and status; never headers, cookies or form bodies.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import quote
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from orchestrator.budgets import Budget
from orchestrator.clock import utcnow
from orchestrator.console.app import ConsoleApp
from orchestrator.console.auth import Guard
from orchestrator.console.settings import ConsoleConfigError, ConsoleSettings
from orchestrator.store.db import Store

log = logging.getLogger("orch.console")


#: A request's "logged" mark, put in the handler's environ. wsgiref hands the app a COPY of that environ, so
#: the mark is a shared mutable object, not a flag set on the copy (which the handler never saw: each request
#: was logged twice).
_LOGGED = "orch.logged"


@dataclass(slots=True)
class _LogMark:
    logged: bool = False


def _log_request(method: str, path: str, code: int | str) -> None:
    method, path = method[:10], path.split("?", 1)[0][:200]
    log.info("%s %s %s", method, path, code, extra={"fields": {"method": method, "path": path, "status": str(code)}})


def _logged(app: Callable[[dict[str, Any], Any], Iterable[bytes]]) -> Callable[[dict[str, Any], Any], Iterable[bytes]]:
    """``app`` with each request logged when its status is set, before any byte of the answer is sent: a client
    that has its answer finds the line written (``orch daemon`` stopping right after logs nothing before it)."""
    def logged(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        def start(status: str, headers: Any, exc_info: Any = None) -> Any:
            mark = environ.get(_LOGGED)
            if isinstance(mark, _LogMark):
                mark.logged = True
            # PATH_INFO is decoded: quoted again, so a line break sent as %0A cannot split a text log line.
            path = quote(str(environ.get("PATH_INFO", "")), safe="/:@!$&'()*+,;=-._~")
            _log_request(str(environ.get("REQUEST_METHOD", "")), path, status.split(" ", 1)[0])
            return start_response(status, headers, exc_info)

        return app(environ, start)

    return logged


class _Handler(WSGIRequestHandler):
    #: Seconds a client may stall a read or write before its connection is dropped (its thread freed).
    timeout = 30
    _mark: _LogMark | None = None

    def get_environ(self) -> dict[str, Any]:
        environ = super().get_environ()
        self._mark = environ[_LOGGED] = _LogMark()
        return environ

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if self._mark is not None and self._mark.logged:
            return      # the app's answer: logged before it was sent (``_logged``)
        method, _, rest = (self.requestline or "").partition(" ")   # refused before the app (a bad request)
        _log_request(method, rest.split(" ", 1)[0], code)

    def log_message(self, format: str, *args: Any) -> None:
        # wsgiref's own messages (bad request lines) may quote what the client sent: keep them out of logs.
        log.debug("console: http server message")


class _Server(ThreadingMixIn, WSGIServer):
    # Daemon threads, not joined on stop: a browser's idle preconnect (a socket that never sends a request)
    # must not hold ``orch daemon``'s shutdown; an answered request's line is already logged (``_logged``).
    daemon_threads = True
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
    server.set_app(_logged(make_app(store, settings, clock=clock, budgets=budgets)))
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
