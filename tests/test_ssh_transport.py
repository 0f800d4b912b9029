"""The SSH transport against a REAL sshd on 127.0.0.1, and LocalTransport where the behaviour is shared."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.ssh.connection import SshTransport
from providers.ssh.errors import (
    ExecTimeoutError,
    HostKeyMismatchError,
    RemotePathError,
    TransportAuthError,
    TransportUnreachableError,
    UnknownHostKeyError,
)
from providers.ssh.hostkeys import HostKeyStore, HostTrust, KnownKey
from providers.ssh.local import LocalTransport
from providers.ssh.transport import Transport
from tests.support.sshd import FakeGpu, Sshd, free_port, sshd  # noqa: F401 - fixture


def _ssh(server: Sshd, store: HostKeyStore, trust: HostTrust | None = None, **kw: object) -> SshTransport:
    return SshTransport(server.host, server.port, server.user, key_path=server.client_key_path, host_keys=store,
                        trust=trust if trust is not None else HostTrust(keys=(server.host_key_line,)),
                        connect_timeout=5.0, workdir=str(server.workdir), **kw)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> HostKeyStore:
    return HostKeyStore(tmp_path / "data" / "known_hosts")


@pytest.fixture(params=["ssh", "local"])
def transport(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Transport, Path]]:
    """Either transport, with the directory its relative paths land in."""
    if request.param == "local":
        root = tmp_path / "local-root"
        yield LocalTransport(root), root
        return
    server: Sshd = request.getfixturevalue("sshd")
    t = _ssh(server, HostKeyStore(tmp_path / "kh"))
    yield t, server.workdir
    t.close()


# -- behaviour shared by both transports --------------------------------------------------------------
def test_exec_reports_exit_code_stdout_and_stderr(transport: tuple[Transport, Path]) -> None:
    t, _ = transport
    r = t.exec("echo out; echo err >&2; exit 7", timeout=10)
    assert (r.exit_code, r.stdout, r.stderr) == (7, "out\n", "err\n")
    assert not r.ok
    assert t.exec("true", timeout=10).ok


def test_exec_env_stdin_and_working_dir(transport: tuple[Transport, Path]) -> None:
    t, root = transport
    r = t.exec('printf "%s|" "$GREETING"; cat; pwd', timeout=10, env={"GREETING": "it's a b"}, stdin=b"from-stdin|")
    assert r.stdout == f"it's a b|from-stdin|{root}\n"
    with pytest.raises(ValueError):
        t.exec("true", timeout=10, env={"BAD NAME": "x"})


def test_exec_timeout_raises_and_transport_stays_usable(transport: tuple[Transport, Path]) -> None:
    t, _ = transport
    with pytest.raises(ExecTimeoutError):
        t.exec("sleep 30", timeout=0.3)
    assert t.exec("echo still-here", timeout=10).stdout == "still-here\n"


def test_put_get_roundtrip_with_mode_and_parents(transport: tuple[Transport, Path], tmp_path: Path) -> None:
    t, root = transport
    t.put(b"\x00binary\xff", "deep/dir/blob.bin")
    assert t.get("deep/dir/blob.bin") == b"\x00binary\xff"
    assert (root / "deep/dir/blob.bin").read_bytes() == b"\x00binary\xff"

    local = tmp_path / "script.sh"
    local.write_text("#!/bin/sh\necho ran\n")
    t.put(local, "bin/script.sh", mode=0o750)
    assert (root / "bin/script.sh").stat().st_mode & 0o777 == 0o750
    assert t.exec("./bin/script.sh", timeout=10).stdout == "ran\n"

    t.put("replaced\n", "bin/script.sh")  # overwrite goes through a temp file + rename
    assert t.get(str(root / "bin/script.sh")) == b"replaced\n"
    assert sorted(p.name for p in (root / "bin").iterdir()) == ["script.sh"]


def test_get_missing_file_is_a_remote_path_error(transport: tuple[Transport, Path]) -> None:
    t, _ = transport
    with pytest.raises(RemotePathError):
        t.get("no/such/file")


def test_local_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    t = LocalTransport(tmp_path)
    with pytest.raises(ExecTimeoutError):
        t.exec("sleep 30 & echo $! > child.pid; wait", timeout=0.5)
    child = int((tmp_path / "child.pid").read_text())
    # The signal is delivered asynchronously: poll (bounded) until the background child is gone.
    deadline = time.monotonic() + 60
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# -- SSH: one connection, kept and re-made -------------------------------------------------------------
def _client_port(t: SshTransport) -> str:
    return t.exec("echo $SSH_CLIENT", timeout=10).stdout.split()[1]


def test_one_connection_is_reused_across_calls(sshd: Sshd, store: HostKeyStore) -> None:  # noqa: F811
    with _ssh(sshd, store) as t:
        ports = {_client_port(t) for _ in range(3)}
        t.put(b"x", "f")
        assert t.get("f") == b"x"
        ports.add(_client_port(t))
        assert t.connect_count == 1
        assert len(ports) == 1, "the server saw one TCP connection"


def test_reconnects_after_the_server_drops_the_connection(sshd: Sshd, store: HostKeyStore) -> None:  # noqa: F811
    with _ssh(sshd, store) as t:
        before = _client_port(t)
        t.put(b"x", "f")
        sshd.drop_connections()
        after = _client_port(t)
        assert t.get("f") == b"x"  # sftp re-opened on the new connection
        assert t.connect_count == 2
        assert after != before


def test_reconnect_gives_up_after_the_deadline(sshd: Sshd, store: HostKeyStore) -> None:  # noqa: F811
    now = [0.0]
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    with _ssh(sshd, store, reconnect_deadline_s=3.0, clock=lambda: now[0], sleep=sleep) as t:
        assert t.exec("true", timeout=10).ok
        sshd.stop()
        with pytest.raises(TransportUnreachableError):
            t.exec("true", timeout=10)
        assert len(sleeps) >= 2 and sum(sleeps) <= 3.0
        sshd.start()
        assert t.exec("true", timeout=10).ok


def test_unreachable_port_raises_transport_error(store: HostKeyStore, tmp_path: Path) -> None:
    key = tmp_path / "k"
    from tests.support.sshd import generate_ed25519

    generate_ed25519(key)
    t = SshTransport("127.0.0.1", free_port(), "root", key_path=key, host_keys=store, connect_timeout=1,
                     reconnect_deadline_s=0)
    with pytest.raises(TransportUnreachableError):
        t.exec("true", timeout=5)


def test_refused_client_key_is_an_auth_error_and_not_retried(sshd: Sshd, store: HostKeyStore) -> None:  # noqa: F811
    sshd.revoke_client_key()
    with _ssh(sshd, store, reconnect_deadline_s=60) as t, pytest.raises(TransportAuthError):
        t.exec("true", timeout=10)


# -- SSH: host key pinning ---------------------------------------------------------------------------
def test_pinned_key_is_accepted_and_recorded(sshd: Sshd, store: HostKeyStore) -> None:  # noqa: F811
    with _ssh(sshd, store, HostTrust(keys=(sshd.host_key_line,))) as t:
        assert t.exec("true", timeout=10).ok
    assert store.keys_for(sshd.host, sshd.port) == (KnownKey.parse(sshd.host_key_line),)
    # Later contact without explicit keys is checked against the store.
    with _ssh(sshd, store, HostTrust()) as t:
        assert t.exec("true", timeout=10).ok


def test_pinned_fingerprint_is_accepted(sshd: Sshd, store: HostKeyStore) -> None:  # noqa: F811
    with _ssh(sshd, store, HostTrust(fingerprints=(sshd.host_fingerprint,))) as t:
        assert t.exec("true", timeout=10).ok
    assert [k.fingerprint for k in store.keys_for(sshd.host, sshd.port)] == [sshd.host_fingerprint]


def test_store_is_readable_by_openssh(sshd: Sshd, store: HostKeyStore) -> None:  # noqa: F811
    with _ssh(sshd, store) as t:
        t.exec("true", timeout=10)
    out = subprocess.run(["ssh-keygen", "-F", f"[{sshd.host}]:{sshd.port}", "-f", str(store.path)],
                         capture_output=True, text=True, check=True).stdout
    assert sshd.host_key_line.split()[1] in out


def test_changed_key_is_refused_naming_both_fingerprints(sshd: Sshd, store: HostKeyStore) -> None:  # noqa: F811
    old_fp = sshd.host_fingerprint
    t = _ssh(sshd, store, HostTrust(allow_first_contact=True), reconnect_deadline_s=60)
    assert t.exec("true", timeout=10).ok
    sshd.restart(new_host_key=True)
    new_fp = sshd.host_fingerprint
    assert new_fp != old_fp
    # The kept connection died with the restart; the reconnect meets a new key and is refused at once.
    with pytest.raises(HostKeyMismatchError) as info:
        t.exec("true", timeout=10)
    assert info.value.seen == new_fp and info.value.expected == (old_fp,)
    assert old_fp in str(info.value) and new_fp in str(info.value)
    assert store.keys_for(sshd.host, sshd.port)[0].fingerprint == old_fp, "the store is not rewritten"
    t.close()


def test_key_differing_from_configured_key_is_refused(sshd: Sshd, store: HostKeyStore) -> None:  # noqa: F811
    configured = sshd.host_key_line
    sshd.restart(new_host_key=True)
    with _ssh(sshd, store, HostTrust(keys=(configured,))) as t, pytest.raises(HostKeyMismatchError) as info:
        t.exec("true", timeout=10)
    assert KnownKey.parse(configured).fingerprint in str(info.value)
    assert sshd.host_fingerprint in str(info.value)
    assert store.keys_for(sshd.host, sshd.port) == ()


def test_unknown_key_is_refused_without_first_contact_trust(sshd: Sshd, store: HostKeyStore) -> None:  # noqa: F811
    with _ssh(sshd, store, HostTrust(allow_first_contact=False)) as t, pytest.raises(UnknownHostKeyError) as info:
        t.exec("true", timeout=10)
    assert info.value.seen == sshd.host_fingerprint
    assert str(store.path) in str(info.value)
    assert store.keys_for(sshd.host, sshd.port) == ()


def test_first_contact_records_then_enforces(sshd: Sshd, store: HostKeyStore) -> None:  # noqa: F811
    tofu = HostTrust(allow_first_contact=True)
    with _ssh(sshd, store, tofu) as t:
        assert t.exec("true", timeout=10).ok
    assert [k.fingerprint for k in store.keys_for(sshd.host, sshd.port)] == [sshd.host_fingerprint]
    sshd.restart(new_host_key=True)
    with _ssh(sshd, store, tofu) as t, pytest.raises(HostKeyMismatchError):
        t.exec("true", timeout=10)
    store.forget(sshd.host, sshd.port)  # the operator's fix for a reinstalled machine
    with _ssh(sshd, store, tofu) as t:
        assert t.exec("true", timeout=10).ok


def test_store_keeps_other_hosts_when_pinning(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    store = HostKeyStore(tmp_path / "kh")
    store.pin("10.0.0.1", 22, [sshd.host_key_line])
    store.pin("10.0.0.2", 2222, [sshd.host_key_line])
    store.forget("10.0.0.1", 22)
    assert store.keys_for("10.0.0.1", 22) == ()
    assert len(store.keys_for("10.0.0.2", 2222)) == 1
    assert store.path.read_text().startswith("[10.0.0.2]:2222 ssh-ed25519 ")
    assert oct(os.stat(store.path).st_mode & 0o777) == "0o600"


def test_fake_nvidia_smi_reflects_state_between_polls(sshd: Sshd, store: HostKeyStore) -> None:  # noqa: F811
    query = ("nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total,power.draw "
             "--format=csv,noheader,nounits")
    with _ssh(sshd, store) as t:
        assert t.exec(query, timeout=10).stdout == "0, 0, 0, 81920, 60.00\n"
        sshd.set_gpus([FakeGpu(0, utilization=97, memory_used_mib=4000), FakeGpu(1, utilization=3)])
        assert t.exec(query, timeout=10).stdout.splitlines() == ["0, 97, 4000, 81920, 60.00",
                                                                 "1, 3, 0, 81920, 60.00"]
        assert t.exec("nvidia-smi -L", timeout=10).stdout.count("GPU ") == 2
        assert len(sshd.nvidia_smi_calls) == 3


def test_two_machines_are_separate(tmp_path: Path) -> None:
    from tests.support.sshd import sshd_servers

    store = HostKeyStore(tmp_path / "kh")
    with sshd_servers(2, tmp_path / "machines") as (a, b):
        assert a.port != b.port and a.host_fingerprint != b.host_fingerprint
        with _ssh(a, store) as ta, _ssh(b, store) as tb:
            ta.put(b"A", "who")
            tb.put(b"B", "who")
            assert ta.exec("cat who; echo $ORCH_MACHINE_ROOT", timeout=10).stdout == f"A{a.workdir}\n"
            assert tb.get("who") == b"B"
        pids = [s.pid for s in (a, b)]
    assert all(not Path(f"/proc/{p}").exists() for p in pids), "stopped servers leave no process"
