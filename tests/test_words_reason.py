"""An exception is said to a user in its own words, never by its class name (``orchestrator.words.reason``), and
the CLI's catch-all for a failed apply or launch says it so."""

from __future__ import annotations

import pytest

from orchestrator.cli.common import fail_internal
from orchestrator.words import reason


class _Wrapped(Exception):
    """Like SQLAlchemy's DBAPIError: its text starts with the driver's class, its ``orig`` is the driver's."""

    def __init__(self, orig: BaseException) -> None:
        super().__init__(f"(psycopg.OperationalError) {orig}\n[SQL: SELECT 1]")
        self.orig = orig


def test_reason_is_the_first_line_of_the_words_never_the_class() -> None:
    assert reason(TimeoutError("no report within 600s\nmore")) == "no report within 600s"
    assert reason(_Wrapped(OSError("connection failed: Connection refused"))) == "connection failed: Connection refused"
    assert reason(RuntimeError()) == "no reason given" and reason(RuntimeError(" "), "nothing") == "nothing"


def test_a_failed_apply_says_the_reason_not_the_class(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        fail_internal("apply", _Wrapped(OSError("connection failed: Connection refused")))
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and err == "error: apply failed: connection failed: Connection refused\n", err
