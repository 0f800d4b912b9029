"""The startup script's fabric steps (orchestrator/runtime/fabric_env.py), run in POSIX sh (dash) against a stand-in
`ip` and `docker`: the NICs NCCL is pointed at on a GPUDirect-TCPX node, and a clear stop when they are missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.runtime.fabric_env import docker_args, host_lines, inner_lines, nccl_env
from providers.fabric import Fabric

A3_ADDRS = ("1: lo    inet 127.0.0.1/8\n2: ens4    inet 10.128.0.5/32\n3: enp6s0    inet 10.0.1.2/32\n"
            "4: enp12s0    inet 10.0.2.2/32\n5: docker0    inet 172.17.0.1/16\n6: enp134s0    inet 10.0.3.2/32\n"
            "7: enp140s0    inet 10.0.4.2/32\n")


def _bin(tmp: Path, addrs: str) -> Path:
    b = tmp / "bin"
    b.mkdir()
    (b / "ip").write_text('#!/bin/sh\ncase "$*" in\n'
                          ' *route*) echo "default via 10.128.0.1 dev ens4 proto dhcp src 10.128.0.5";;\n'
                          f" *addr*) printf '%s' '{addrs}';;\nesac\n")
    (b / "docker").write_text('#!/bin/sh\necho "docker $*" >> "$ORCH_TEST_LOG"\n')
    for f in b.iterdir():
        f.chmod(0o755)
    return b


def _run(tmp: Path, addrs: str, extra: str = "") -> subprocess.CompletedProcess[str]:
    b = _bin(tmp, addrs)
    lines = [line.replace("/run/tcpx", str(tmp / "uds")) for line in host_lines(Fabric.GPUDIRECT_TCPX)]
    script = "set -eu\n" + "\n".join(lines) + "\n" + extra
    env = {**os.environ, "PATH": f"{b}:{os.environ['PATH']}", "ORCH_TEST_LOG": str(tmp / "docker.log")}
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=30)


def test_tcpx_points_nccl_at_the_default_route_nic_and_the_gpu_nics_in_their_order(tmp_path: Path) -> None:
    done = _run(tmp_path, A3_ADDRS, 'echo "$NCCL_SOCKET_IFNAME|$NCCL_GPUDIRECTTCPX_CTRL_DEV|'
                                    '$NCCL_GPUDIRECTTCPX_SOCKET_IFNAME|$GLOO_SOCKET_IFNAME"')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ens4|ens4|enp6s0,enp12s0,enp134s0,enp140s0|ens4"
    docker = (tmp_path / "docker.log").read_text()
    assert "nccl-plugin-gpudirecttcpx install --install-nccl" in docker
    assert "--name orch-tcpx-rxdm" in docker and "--gpu_nic_preset a3vm" in docker


def test_tcpx_stops_with_a_reason_when_the_gpu_nics_are_missing(tmp_path: Path) -> None:
    done = _run(tmp_path, "1: lo    inet 127.0.0.1/8\n2: ens4    inet 10.128.0.5/32\n")
    assert done.returncode == 1 and "no GPU NIC found" in done.stderr


def test_a_name_the_manifest_sets_is_left_to_it() -> None:
    lines = host_lines(Fabric.GPUDIRECT_TCPX, user_env=frozenset({"NCCL_SOCKET_IFNAME"}))
    assert not any(line.startswith("export NCCL_SOCKET_IFNAME=") for line in lines)
    assert any(line.startswith("export NCCL_GPUDIRECTTCPX_SOCKET_IFNAME=") for line in lines)


@pytest.mark.parametrize("fabric", [Fabric.EFA, Fabric.INFINIBAND, Fabric.ROCE])
def test_rdma_fabrics_give_the_container_the_devices_only_where_the_host_has_them(fabric: Fabric,
                                                                                  tmp_path: Path) -> None:
    script = "\n".join(host_lines(fabric)).replace("/dev/infiniband", str(tmp_path / "ib"))
    probe = ["sh", "-c", script + '\necho "[$ORCH_RDMA_ARGS]"']
    assert subprocess.run(probe, capture_output=True, text=True, timeout=30).stdout.strip() == "[]"
    (tmp_path / "ib").mkdir()
    out = subprocess.run(probe, capture_output=True, text=True, timeout=30).stdout
    assert "--cap-add=IPC_LOCK --ulimit memlock=-1" in out
    assert docker_args(fabric) == ["$ORCH_RDMA_ARGS"] and inner_lines(fabric) == []


def test_plain_tcp_gets_nothing() -> None:
    assert (nccl_env(None), host_lines(None), docker_args(None), inner_lines(None)) == ([], [], [], [])
