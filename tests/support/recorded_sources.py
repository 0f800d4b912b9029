"""A local HTTP server (127.0.0.1) answering like the price sources of ``orch catalog refresh``, from the
recorded responses under tests/fixtures/<source>/ (each folder's PROVENANCE.md says where the format comes from).

Routes (``base`` is the server's URL):

* ``GET  base/gpuhunt/<provider>/version`` and ``.../<version>/catalog.zip``: gpuhunt's published layout; the
  zip holds ``<provider>.csv`` (tests/fixtures/gpuhunt) as gpuhunt's publish script packs it, with a
  ``Last-Modified`` header (the publication time orch records as the rows' capture time);
* ``GET  base/azure/prices``: Retail Prices page 1, whose ``NextPageLink`` leads to page 2;
* ``POST base/vast/bundles/``: the on-demand or the bid search answer, by the body's ``type``;
* ``POST base/runpod/graphql``: the ``gpuTypes`` answer;
* ``GET  base/lambda/instance-types``: the instance types (401 without a Bearer key).

``overrides[path] = body`` answers one path with other bytes (the same for either Vast market).
``break_route(prefix, how)`` makes matching requests fail: ``"500"``, ``"garbage"`` (a body of the wrong
kind), ``"hang"`` (no answer until the server closes). ``requests`` records (method, path) of each call.
"""

from __future__ import annotations

import io
import json
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GPUHUNT_VERSION = "20261202-8841"
GPUHUNT_PROVIDERS = ("aws", "azure", "gcp", "lambdalabs", "runpod")


def catalog_zip(provider: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{provider}.csv", (FIXTURES / "gpuhunt" / f"{provider}.csv").read_bytes())
    return buf.getvalue()


class RecordedSources:
    def __init__(self, published: str = "Wed, 02 Dec 2026 01:42:10 GMT") -> None:
        self.published = published
        self.broken: dict[str, str] = {}
        self.overrides: dict[str, bytes] = {}      # exact path -> body, e.g. a Vast answer with new prices
        self.requests: list[tuple[str, str]] = []
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def break_route(self, prefix: str, how: str) -> None:
        self.broken[prefix] = how

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    # -- answers ---------------------------------------------------------------------------------------

    def _answer(self, method: str, path: str, query: str, body: bytes, auth: str) -> tuple[int, bytes, dict[str, str]]:
        parts = path.strip("/").split("/")
        json_type = {"Content-Type": "application/json"}
        if path in self.overrides:
            return 200, self.overrides[path], json_type
        if parts[0] == "gpuhunt" and len(parts) >= 3 and parts[1] in GPUHUNT_PROVIDERS:
            if parts[2] == "version":
                return 200, (GPUHUNT_VERSION + "\n").encode(), {"Content-Type": "text/plain"}
            if parts[2:] == [GPUHUNT_VERSION, "catalog.zip"]:
                return 200, catalog_zip(parts[1]), {"Content-Type": "application/zip",
                                                     "Last-Modified": self.published}
        if parts[:2] == ["azure", "prices"] and method == "GET":
            page = 2 if "$skip=4" in query else 1
            text = (FIXTURES / "azure-retail-prices" / f"retail-page-{page}.json").read_text()
            text = text.replace("{base}", self.base)
            return 200, text.encode(), json_type
        if parts[:2] == ["vast", "bundles"] and method == "POST":
            kind = json.loads(body or b"{}").get("type")
            name = "bundles-bid.json" if kind == "bid" else "bundles-on-demand.json"
            return 200, (FIXTURES / "vast-bundles" / name).read_bytes(), json_type
        if parts[:2] == ["runpod", "graphql"] and method == "POST":
            return 200, (FIXTURES / "runpod-gputypes" / "gpu-types.json").read_bytes(), json_type
        if parts[:2] == ["lambda", "instance-types"] and method == "GET":
            if not auth.startswith("Bearer "):
                return 401, b'{"error": {"code": "global/invalid-api-key", "message": "API key was invalid"}}', \
                    json_type
            return 200, (FIXTURES / "lambda-instance-types" / "instance-types.json").read_bytes(), json_type
        return 404, b"not found", {"Content-Type": "text/plain"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        sources = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _serve(self) -> None:
                split = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with sources._lock:
                    sources.requests.append((self.command, split.path))
                how = next((h for p, h in sources.broken.items() if split.path.startswith(p)), None)
                if how == "hang":
                    sources._release.wait(timeout=120)
                    return
                if how == "500":
                    status, payload, headers = 500, b"internal error", {"Content-Type": "text/plain"}
                elif how == "garbage":
                    status, payload, headers = 200, b"\x00<html>not what you asked for", {"Content-Type": "text/html"}
                else:
                    status, payload, headers = sources._answer(self.command, split.path, split.query, body,
                                                               self.headers.get("Authorization") or "")
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _serve
            do_POST = _serve

        return Handler


@contextmanager
def recorded_sources() -> Iterator[RecordedSources]:
    sources = RecordedSources()
    try:
        yield sources
    finally:
        sources.close()


__all__ = ["GPUHUNT_VERSION", "RecordedSources", "catalog_zip", "recorded_sources"]
