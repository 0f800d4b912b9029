"""Requests waitress refuses before the console's app sees them are logged like the app's answers: method, path
as sent (no query string), status; never a header, a cookie or the token. A real server on 127.0.0.1; each
check waits for the server's whole answer (it closes the connection after a refusal), and the line is written
before the answer, so no time window is involved."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.console import server
from orchestrator.console.requestlog import FIRST_LINE_BYTES
from orchestrator.console.server import RunningConsole, start_console
from orchestrator.console.settings import console_settings
from orchestrator.store.db import open_store
from tests.support import console_world

TOKEN = "s3cret-console-token-0123456789"
SECRET = "query-s3cret-value"


@pytest.fixture
def console(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[RunningConsole]:
    caplog.set_level(logging.INFO, logger="orch")
    store = open_store(f"sqlite:///{tmp_path / 'orch.db'}")
    console_world.fill(store, datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    running = start_console(store, console_settings("127.0.0.1:0", TOKEN))
    try:
        yield running
    finally:
        running.stop()
        store.close()


def exchange(console: RunningConsole, request: bytes) -> bytes:
    """Send ``request`` and read the answer to its end (the server closes the connection after a refusal). The
    server reads every byte sent (a request stops at the cap exactly, a body is not sent), so its close is a FIN
    after the answer, not a reset."""
    with socket.create_connection(("127.0.0.1", console.port), timeout=30) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def up_to_the_cap(start: str) -> bytes:
    """``start`` padded to exactly the server's header cap, with no end of headers: refused when it is all in."""
    return (start + "x" * (server.MAX_HEADER_BYTES - len(start))).encode()


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "orch.console"]


def test_an_oversized_header_block_is_logged_with_its_real_request_line(
    console: RunningConsole, caplog: pytest.LogCaptureFixture
) -> None:
    head = f"POST /jobs/llama-ft/stop?t={SECRET} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
    answer = exchange(console, up_to_the_cap(head + "X-Pad: "))
    assert answer.startswith(b"HTTP/1.0 431")  # waitress answers a request it cannot read in 1.0
    assert "POST /jobs/llama-ft/stop 431" in lines(caplog)  # not waitress's stand-in "GET /"
    record = next(r for r in caplog.records if r.getMessage() == "POST /jobs/llama-ft/stop 431")
    assert record.fields == {
        "method": "POST",
        "path": "/jobs/llama-ft/stop",
        "status": "431",  # type: ignore[attr-defined]
        "answered_by": "server",
    }
    assert TOKEN not in caplog.text and SECRET not in caplog.text


def test_an_over_long_request_line_is_logged_cut(console: RunningConsole, caplog: pytest.LogCaptureFixture) -> None:
    request = up_to_the_cap("GET /jobs/")
    answer = exchange(console, request)
    assert b" 431 " in answer.split(b"\r\n", 1)[0]
    path = request.decode()[4:]
    [line] = [m for m in lines(caplog) if m.endswith(" 431")]
    method, logged_path, _ = line.split(" ")
    assert method == "GET" and path.startswith(logged_path) and len(logged_path) <= FIRST_LINE_BYTES


def test_a_body_over_the_cap_is_logged(console: RunningConsole, caplog: pytest.LogCaptureFixture) -> None:
    answer = exchange(
        console,
        f"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-"
        f"urlencoded\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {server.MAX_BODY_BYTES + 1}\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 413")
    assert "POST /login 413" in lines(caplog) and TOKEN not in caplog.text


def test_a_malformed_request_is_logged_with_its_path_quoted(
    console: RunningConsole, caplog: pytest.LogCaptureFixture
) -> None:
    answer = exchange(console, b"GET /jobs/a\x1bb HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n")
    assert answer.startswith(b"HTTP/1.0 400")  # waitress answers a request it cannot read in 1.0
    assert "GET /jobs/a%1Bb 400" in lines(caplog)  # a control character never reaches the log raw


def test_an_answer_of_the_app_is_logged_once_and_not_as_refused(
    console: RunningConsole, caplog: pytest.LogCaptureFixture
) -> None:
    answer = exchange(console, b"GET /jobs HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.0 401")  # no token: refused by the app, not the server
    assert lines(caplog).count("GET /jobs 401") == 1
    assert all("answered_by" not in getattr(r, "fields", {}) for r in caplog.records if "/jobs" in r.getMessage())
