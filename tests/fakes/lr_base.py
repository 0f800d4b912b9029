"""The small HTTP machinery the Lambda and RunPod fakes share: a threaded stdlib server, JSON in and out,
a record of every request, and countdown fault switches.

Stdlib only (http.server) so that a fake starts in milliseconds and runs standalone
(``python -m tests.fakes.<name> --port N``) without any test dependency.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True, slots=True)
class Recorded:
    """One request as the fake saw it (the Authorization header is kept only as 'present or not')."""

    method: str
    path: str
    body: Any
    authorized: bool
    status: int = 0
    reply: Any = None
    at: float = 0.0          # the fake's clock when the request arrived


@dataclass(slots=True)
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class Faults:
    """Countdown switches: ``arm(name, times)``; ``take(name)`` is True while the count lasts (-1: forever)."""

    def __init__(self) -> None:
        self._left: dict[str, int] = {}
        self._lock = threading.Lock()

    def arm(self, name: str, times: int = 1) -> None:
        with self._lock:
            self._left[name] = times

    def take(self, name: str) -> bool:
        with self._lock:
            left = self._left.get(name, 0)
            if left == 0:
                return False
            if left > 0:
                self._left[name] = left - 1
            return True

    def clear(self) -> None:
        with self._lock:
            self._left.clear()


Handler = Callable[[str, str, Any, dict[str, str]], Reply]


class FakeServer:
    """Serves ``handle(method, path, body, headers) -> Reply`` on 127.0.0.1 in a daemon thread."""

    def __init__(self, handle: Handler, port: int = 0) -> None:
        self._handle = handle
        outer = self

        class _RequestHandler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = 1 << 16  # headers and body leave in one segment (no Nagle + delayed-ACK stalls)

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    reply = Reply(400, {"error": "body is not JSON"})
                else:
                    reply = outer._handle(self.command, self.path, body, dict(self.headers.items()))
                # A body already encoded (bytes) goes as it is (tests/bench/bench_tick.py serves its listing so).
                payload = (reply.body if isinstance(reply.body, bytes)
                           else b"" if reply.body is None else json.dumps(reply.body).encode())
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), _RequestHandler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeServer:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fake-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def bearer_ok(headers: dict[str, str], api_key: str) -> bool:
    """True when the request carries ``Authorization: Bearer <api_key>`` (header names are case-insensitive)."""
    value = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
    return value == f"Bearer {api_key}"


def serve_forever_cli(name: str, make: Callable[[int], FakeServer]) -> None:
    """``python -m tests.fakes.<name> --port N``: run the fake in the foreground until Ctrl-C."""
    parser = argparse.ArgumentParser(prog=f"python -m tests.fakes.{name}")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = make(args.port).start()
    print(f"{name} fake listening on {server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
