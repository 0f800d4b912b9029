"""The test sshd (tests/support/sshd.py): ready when its own process listens, stopped when nothing listens."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import paramiko

from tests.support.sshd import Sshd, free_port, listening_sockets, listens, require_sshd

HOST = "127.0.0.1"


def _holder(sock: socket.socket) -> subprocess.Popen[bytes]:
    """Another process holding a copy of ``sock`` (as a child sshd forks does) until its stdin closes."""
    return subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                            pass_fds=[sock.fileno()])


def test_a_process_listens_on_a_port_only_through_a_listening_socket_it_holds() -> None:
    port = free_port()
    assert not listening_sockets(HOST, port) and not listens(os.getpid(), HOST, port)
    with socket.socket() as s:
        s.bind((HOST, port))
        assert not listens(os.getpid(), HOST, port)   # bound, not yet listening: a connection is refused
        s.listen()
        assert listens(os.getpid(), HOST, port) and len(listening_sockets(HOST, port)) == 1
        assert not listens(os.getpid(), HOST, free_port())
        other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        try:
            assert not listens(other.pid, HOST, port)
        finally:
            other.communicate(b"")
    assert not listening_sockets(HOST, port)


def test_a_copy_of_the_listener_in_another_process_keeps_the_port_listening_after_its_owner_closes_it() -> None:
    with socket.socket() as s:
        s.bind((HOST, 0))
        s.listen()
        port = s.getsockname()[1]
        child = _holder(s)
    try:
        assert listening_sockets(HOST, port)           # the owner closed it; the copy still listens
        assert listens(child.pid, HOST, port) and not listens(os.getpid(), HOST, port)
    finally:
        child.communicate(b"")
    assert not listening_sockets(HOST, port)


def test_restart_returns_once_the_new_sshd_listens_with_the_new_key_and_stop_once_nothing_listens(
        tmp_path: Path) -> None:
    require_sshd()
    server = Sshd(tmp_path / "sshd").start()
    try:
        old_pid, old_key = server.pid, server.host_key_line
        assert old_pid is not None and listens(old_pid, server.host, server.port)
        # A connection the old listener may accept as it is told to stop: its child holds the listener a moment.
        with socket.create_connection((server.host, server.port)):
            server.restart(new_host_key=True)
        assert server.pid is not None and server.pid != old_pid
        assert listens(server.pid, server.host, server.port)
        assert not listens(old_pid, server.host, server.port)
        transport = paramiko.Transport((server.host, server.port))
        try:
            transport.start_client(timeout=10)
            key = transport.get_remote_server_key()
        finally:
            transport.close()
        assert f"{key.get_name()} {key.get_base64()}" == server.host_key_line != old_key
    finally:
        server.stop()
    assert not server.running and not listening_sockets(server.host, server.port)
