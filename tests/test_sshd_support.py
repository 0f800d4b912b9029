"""The test sshd's readiness probe (tests/support/sshd.py ``accepts``): a server, not the probe itself."""

from __future__ import annotations

import socket

import pytest

from tests.support import sshd as support
from tests.support.sshd import accepts, free_port


def test_a_listening_server_accepts_and_a_closed_port_does_not() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert accepts("127.0.0.1", server.getsockname()[1])
    assert not accepts("127.0.0.1", free_port())


class _OwnPortSocket(socket.socket):
    """A probe whose kernel-chosen port happens to be the one it dials (forced here, by chance in CI)."""

    def connect(self, address: object) -> None:
        host, port = address  # type: ignore[misc]
        self.bind((host, port))
        super().connect((host, port))


def test_a_probe_connected_to_itself_is_not_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    with _OwnPortSocket() as s:  # TCP's simultaneous open: nothing listens, yet connect succeeds
        s.connect(("127.0.0.1", port))
        assert s.getsockname() == s.getpeername()
    monkeypatch.setattr(support.socket, "socket", _OwnPortSocket)
    assert not accepts("127.0.0.1", free_port())
