"""A webhook receiver on 127.0.0.1 for the alert tests: records what it is sent, answers as told, and can
hang (until released) or fail a number of times first. Everything a test waits on is a condition."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    body: dict[str, Any]
    authorization: str | None


@dataclass
class Receiver:
    server: ThreadingHTTPServer
    received: list[Received] = field(default_factory=list)
    requests: int = 0
    fail_first: int = 0            # answer this many requests with ``fail_status`` first
    fail_status: int = 503
    status: int = 200
    hang: threading.Event | None = None    # set: the handler waits on ``release`` before answering
    release: threading.Event = field(default_factory=threading.Event)
    hanging: threading.Event = field(default_factory=threading.Event)     # a request is being held
    changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def wait_for(self, predicate: Callable[[Receiver], bool], timeout: float = 30.0) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: predicate(self), timeout)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def start_receiver() -> Receiver:
    holder: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            r = holder["r"]
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with r.changed:
                r.requests += 1
                n = r.requests
                r.changed.notify_all()
            if r.hang is not None and r.hang.is_set():
                r.hanging.set()
                r.release.wait(120)
            status = r.fail_status if n <= r.fail_first else r.status
            if status < 300:
                with r.changed:
                    r.received.append(Received(self.path, body, self.headers.get("Authorization")))
                    r.changed.notify_all()
            try:
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:
                pass   # the client gave up (a timeout the test asked for)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver = Receiver(server)
    holder["r"] = receiver
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return receiver
