"""Logs say each thing once and the same in both formats (issue 31): a console request is logged once (the
"logged" mark was set on wsgiref's copy of the environ, so the handler logged it again), and ``--log-format
text`` prints the structured fields the JSON format carries, as ``key=value``."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.console.server import start_console
from orchestrator.console.settings import console_settings
from orchestrator.daemon.observability import JsonFormatter, RedactingFormatter
from orchestrator.store.db import Store, open_store
from tests.support import console_world

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'orch.db'}")
    console_world.fill(s, NOW)
    try:
        yield s
    finally:
        s.close()


def test_each_console_request_is_logged_once(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="orch")
    console = start_console(store, console_settings("127.0.0.1:0", None))
    try:
        with socket.create_connection(("127.0.0.1", console.port)) as conn:
            conn.sendall(b"GET /jobs/llama-ft HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            answer = b""
            while chunk := conn.recv(65536):   # to EOF: the server closes after its handler has logged
                answer += chunk
        assert answer.startswith(b"HTTP/1.0 200")
    finally:
        console.stop()
    lines = [r.getMessage() for r in caplog.records if "/jobs/llama-ft" in r.getMessage()]
    assert lines == ["GET /jobs/llama-ft 200"]


def test_text_format_prints_the_same_fields_as_json() -> None:
    record = logging.LogRecord("orch.engine", logging.WARNING, __file__, 1, "launch refused", None, None)
    record.fields = {"provider": "aws", "outcome": "refused", "error": "no capacity in us-east-1a", "count": 3}
    doc = json.loads(JsonFormatter().format(record))
    text = RedactingFormatter("%(levelname)s %(name)s: %(message)s").format(record)
    assert text == ('WARNING orch.engine: launch refused provider=aws outcome=refused '
                    'error="no capacity in us-east-1a" count=3')
    assert {k: doc[k] for k in record.fields} == record.fields
