"""The console's request log: one line per request, method, path (never the query string) and status, through
orch's logger; never headers, cookies or bodies, so never a token.

Two sources: the app's answers (``logged``, a WSGI wrapper) and the requests waitress refuses before the app
sees them (an over-long request line or header block, a body over the cap, a malformed request, a crash in the
app), which waitress answers itself without logging (``log_refusals``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.task import ErrorTask

log = logging.getLogger("orch.console")

#: Of a request, only this much of its first bytes is kept for the log line (the request line, cut).
FIRST_LINE_BYTES = 512
#: Characters a logged path keeps as they are; anything else (a line break, a control character, non-ASCII) is
#: percent-encoded, so a path cannot split a text log line or reach a terminal raw.
_PATH_SAFE = "/:@!$&'()*+,;=-._~"


def log_request(method: str, path: str, code: int | str, *, by_server: bool = False) -> None:
    """One request's line: ``GET /jobs/x 200`` (``by_server``: answered by waitress itself, not the app)."""
    method, path = quote(method[:10], safe=""), path.split("?", 1)[0][:200]
    fields = {"method": method, "path": path, "status": str(code)}
    if by_server:
        fields["answered_by"] = "server"
    log.info("%s %s %s", method, path, code, extra={"fields": fields})


def logged(app: Callable[[dict[str, Any], Any], Iterable[bytes]]) -> Callable[[dict[str, Any], Any], Iterable[bytes]]:
    """``app`` with each request logged when its status is set, before any byte of the answer is sent: a client
    that has its answer finds the line written (``orch daemon`` stopping right after logs nothing before it)."""

    def wrapped(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        def start(status: str, headers: Any, exc_info: Any = None) -> Any:
            # PATH_INFO is decoded: quoted again, so a line break sent as %0A cannot split a text log line.
            path = quote(str(environ.get("PATH_INFO", "")), safe=_PATH_SAFE)
            log_request(str(environ.get("REQUEST_METHOD", "")), path, status.split(" ", 1)[0])
            return start_response(status, headers, exc_info)

        return app(environ, start)

    return wrapped


class _Parser(HTTPRequestParser):
    """waitress's parser, keeping a request's first bytes: a refused request's line is read from them (waitress
    itself puts ``GET /`` in place of a request whose headers are over the cap)."""

    first_bytes = b""

    def received(self, data: bytes) -> int:
        if len(self.first_bytes) < FIRST_LINE_BYTES:
            self.first_bytes += data[: FIRST_LINE_BYTES - len(self.first_bytes)]
        return int(super().received(data))

    def method_and_path(self) -> tuple[str, str]:
        """The request line's method and path as sent (still percent-encoded, no query string), ``-`` for what is
        missing."""
        line = self.first_bytes.lstrip().split(b"\n", 1)[0].rstrip(b"\r").decode("latin-1")
        parts = line.split(" ")
        method = parts[0] or "-"
        path = parts[1].split("?", 1)[0] if len(parts) > 1 else ""  # the query string may hold a secret
        path = path or "-"
        return method, quote(path, safe=_PATH_SAFE + "%")


class _LoggedErrorTask(ErrorTask):
    """waitress's own answer (4xx, 5xx), logged before it is written, like the app's answers."""

    def execute(self) -> None:
        # The request being served: for a crash in the app, waitress answers with a fresh, empty request.
        requests = self.channel.requests
        request = requests[0] if requests and isinstance(requests[0], _Parser) else self.request
        method, path = request.method_and_path() if isinstance(request, _Parser) else ("-", "-")
        log_request(method, path, self.request.error.code, by_server=True)
        super().execute()


class _Channel(HTTPChannel):
    parser_class = _Parser
    error_task_class = _LoggedErrorTask


def log_refusals(server: Any) -> None:
    """Have ``server`` (waitress's, before its loop starts) log the requests it answers itself."""
    server.channel_class = _Channel
