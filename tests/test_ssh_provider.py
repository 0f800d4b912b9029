"""The SSH provider (bring your own machines) against a REAL sshd on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import multiprocessing
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from providers.base import (
    Availability,
    Capability,
    GpuRequest,
    InstanceState,
    LaunchSpec,
    Market,
    OfferOrigin,
    new_launch_id,
)
from providers.errors import (
    AuthError,
    GpuCheckFailedError,
    InsufficientCapacityError,
    InvalidRequestError,
    MissingWorkdirError,
    ProviderUnavailableError,
)
from providers.fabric import Fabric
from providers.registry import PROVIDERS, config_offers_function, create_provider, load_settings
from providers.ssh.adapter import SshProvider
from providers.ssh.hostkeys import HostKeyStore
from providers.ssh.reservations import HostReservedError, Reservation, ReservationBook
from providers.ssh.settings import Settings
from tests.support.sshd import Sshd, free_port, sshd  # noqa: F401 - fixture

OWNER = "alice"


def _host(server: Sshd, name: str = "box1", **over: Any) -> dict[str, Any]:
    h: dict[str, Any] = {"name": name, "address": server.host, "port": server.port, "user": server.user,
                         "gpu": "A100-80G", "gpu_count": 1, "vcpus": 8, "memory_gb": 64,
                         "host_key": server.host_key_line}
    h.update(over)
    return {k: v for k, v in h.items() if v is not None}


def _provider(tmp_path: Path, server: Sshd, hosts: list[dict[str, Any]] | None = None, **over: Any) -> SshProvider:
    raw: dict[str, Any] = {
        "hosts": hosts if hosts is not None else [_host(server)],
        "key_path": str(server.client_key_path),
        "state_dir": str(tmp_path / "state"),
        "known_hosts": str(tmp_path / "known_hosts"),
        "connect_timeout_s": 5.0,
        "reconnect_deadline_s": 0.0,
    }
    raw.update(over)
    p = create_provider("ssh", load_settings("ssh", raw))
    assert isinstance(p, SshProvider)
    return p


def _spec(p: SshProvider, host: str = "box1", owner: str = OWNER, launch_id: str | None = None) -> LaunchSpec:
    offer = next(o for o in p.offers(GpuRequest(count=p.settings.host(host).gpu_count)) if o.instance_type == host)
    return LaunchSpec(launch_id=launch_id or new_launch_id(), owner=owner, job="train", offer=offer)


# -- reservations --------------------------------------------------------------------------------------
def test_two_providers_sharing_a_state_dir_cannot_reserve_the_same_host(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    p1, p2 = _provider(tmp_path, sshd), _provider(tmp_path, sshd)
    mine = p1.launch(_spec(p1))
    with pytest.raises(InsufficientCapacityError) as info:
        p2.launch(_spec(p2, owner="bob"))
    assert mine.launch_id in str(info.value) and OWNER in str(info.value)
    got = p2.get("box1")
    assert got is not None and got.launch_id == mine.launch_id and got.owner == OWNER
    assert p2.list_instances("bob") == []
    [offer] = p2.offers(GpuRequest(gpus=("A100-80G",)))
    assert offer.availability is Availability.NOT_AVAILABLE
    p1.terminate("box1")
    assert p2.launch(_spec(p2, owner="bob")).owner == "bob"


def _race(state_dir: str, i: int, results: Any) -> None:
    book = ReservationBook(Path(state_dir))
    try:
        book.reserve(Reservation("box1", f"l{i:012x}", f"p{i}", "j", datetime.now(UTC)))
        results.put(i)
    except HostReservedError:
        results.put(-1)


def test_concurrent_processes_reserve_a_host_exactly_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path), i, results)) for i in range(6)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(30)
    outcomes = [results.get(timeout=5) for _ in procs]
    winners = [o for o in outcomes if o >= 0]
    assert len(winners) == 1
    held = ReservationBook(tmp_path).get("box1")
    assert held is not None and held.owner == f"p{winners[0]}"


def test_launch_is_idempotent_and_returns_ssh_details(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    p = _provider(tmp_path, sshd)
    spec = _spec(p)
    inst = p.launch(spec)
    calls = len(sshd.nvidia_smi_calls)
    assert calls == 1 and sshd.nvidia_smi_calls[0] == "-L"
    again = p.launch(spec)
    assert again.instance_id == inst.instance_id == "box1"
    assert len(sshd.nvidia_smi_calls) == calls, "an existing reservation is returned, not re-verified"
    assert inst.state is InstanceState.RUNNING
    assert (inst.public_ip, inst.ssh_port, inst.ssh_user) == (sshd.host, sshd.port, sshd.user)
    assert inst.host_keys == (sshd.host_key_line,)
    assert dict(inst.extra)["key_path"] == str(sshd.client_key_path)
    assert [i.instance_id for i in p.list_instances(OWNER)] == ["box1"]
    with p.transport(inst.instance_id) as t:
        assert t.exec("nvidia-smi -L", timeout=10).stdout.startswith("GPU 0: ")


def test_terminate_releases_and_missing_is_fine(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    p = _provider(tmp_path, sshd)
    p.launch(_spec(p))
    p.terminate("box1")
    assert p.get("box1") is None and p.list_instances(OWNER) == []
    p.terminate("box1")
    p.terminate("never-configured")
    p.terminate("../escape")


def test_launch_of_an_unknown_host_is_invalid(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    p = _provider(tmp_path, sshd)
    spec = _spec(p)
    bogus = dataclasses.replace(spec, offer=dataclasses.replace(spec.offer, instance_type="nope"))
    with pytest.raises(InvalidRequestError, match="box1"):
        p.launch(bogus)


# -- verification ----------------------------------------------------------------------------------------
def test_failing_verify_command_releases_the_reservation(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    p = _provider(tmp_path, sshd)
    sshd.fail_nvidia_smi("NVIDIA-SMI has failed: driver not loaded")
    with pytest.raises(GpuCheckFailedError) as info:     # an InsufficientCapacityError: the planner moves on
        p.launch(_spec(p))
    assert isinstance(info.value, InsufficientCapacityError)
    assert info.value.code == "verify-failed" and "driver not loaded" in str(info.value)
    assert p.get("box1") is None and p.list_instances(OWNER) == []
    sshd.fail_nvidia_smi(None)
    assert p.launch(_spec(p)).instance_id == "box1"


def test_verify_command_stand_in(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    sshd.write_command("gpu-check", '#!/bin/sh\n[ -f "$ORCH_MACHINE_ROOT/healthy" ]\n')
    p = _provider(tmp_path, sshd, verify_command="gpu-check")
    with pytest.raises(InsufficientCapacityError):
        p.launch(_spec(p))
    (sshd.workdir / "healthy").touch()
    assert p.launch(_spec(p)).state is InstanceState.RUNNING
    assert sshd.nvidia_smi_calls == []


def test_unknown_host_key_is_refused_with_a_clear_message(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    p = _provider(tmp_path, sshd, hosts=[_host(sshd, host_key=None)])
    with pytest.raises(AuthError) as info:
        p.launch(_spec(p))
    msg = str(info.value)
    assert info.value.code == "host-key-unknown"
    assert sshd.host_fingerprint in msg and "host_key" in msg and "box1" in msg
    assert p.get("box1") is None
    assert HostKeyStore(tmp_path / "known_hosts").keys_for(sshd.host, sshd.port) == (), "never auto-accepted"


def test_key_already_in_the_store_is_trusted(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    HostKeyStore(tmp_path / "known_hosts").pin(sshd.host, sshd.port, [sshd.host_key_line])
    p = _provider(tmp_path, sshd, hosts=[_host(sshd, host_key=None)])
    inst = p.launch(_spec(p))
    assert inst.host_keys == (sshd.host_key_line,)


def test_configured_fingerprint_pins_the_key(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    p = _provider(tmp_path, sshd, hosts=[_host(sshd, host_key=None, host_key_fingerprint=sshd.host_fingerprint)])
    inst = p.launch(_spec(p))
    assert inst.host_keys == (sshd.host_key_line,), "the key seen is recorded and reported"


def test_changed_host_key_is_refused_naming_both_fingerprints(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    old = sshd.host_fingerprint
    p = _provider(tmp_path, sshd)
    sshd.restart(new_host_key=True)
    with pytest.raises(AuthError) as info:
        p.launch(_spec(p))
    assert info.value.code == "host-key-changed"
    assert old in str(info.value) and sshd.host_fingerprint in str(info.value)
    assert p.get("box1") is None


def test_unreachable_host_is_provider_unavailable(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    p = _provider(tmp_path, sshd, hosts=[_host(sshd, port=free_port())])
    with pytest.raises(ProviderUnavailableError):
        p.launch(_spec(p))
    assert p.get("box1") is None


# -- offers, settings, credentials ------------------------------------------------------------------------
def test_offers_price_zero_by_default_and_configured_prices(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    hosts = [_host(sshd, "free"), _host(sshd, "priced", price_hr=1.25),
             _host(sshd, "gamer", gpu="RTX 4090", gpu_count=2, region="lab-b")]
    p = _provider(tmp_path, sshd, hosts=hosts)
    by_name = {o.instance_type: o for o in p.offers(GpuRequest(gpus=("A100-80G",)))}
    assert set(by_name) == {"free", "priced"}
    assert by_name["free"].price_hr == 0.0 and by_name["priced"].price_hr == 1.25
    assert all(o.source == OfferOrigin.OWN and o.market is Market.ON_DEMAND and o.region == "onprem"
               for o in by_name.values())
    [gamer] = p.offers(GpuRequest(gpus=("RTX4090-24G",), count=2))
    assert (gamer.gpu, gamer.gpu_count, gamer.vram_gb, gamer.region) == ("RTX4090-24G", 2, 24.0, "lab-b")
    internal = _provider(tmp_path, sshd, hosts=hosts, price_hr=0.4)
    prices = {o.instance_type: o.price_hr for o in internal.offers(GpuRequest(gpus=("A100-80G",)))}
    assert prices == {"free": 0.4, "priced": 1.25}
    assert p.offers(GpuRequest(gpus=("A100-80G",), markets=frozenset({Market.SPOT}))) == []
    assert [o.instance_type for o in p.offers(GpuRequest(regions=("lab-*",), count=2))] == ["gamer"]


def test_the_registry_lists_the_same_offers_from_settings_alone(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    """`orch quote` / `orch plan` list hosts through the registry hook (no adapter): the same values."""
    hosts = [_host(sshd, "a", disk_gb=900), _host(sshd, "b", price_hr=2.0)]
    p = _provider(tmp_path, sshd, hosts=hosts)
    p.launch(_spec(p, "b"))
    listed = config_offers_function("ssh")(p.settings)
    assert listed == p.offers(GpuRequest(gpus=("A100-80G",)))
    assert [(o.instance_type, o.availability, o.max_disk_gb) for o in listed] == [
        ("a", Availability.AVAILABLE, 900), ("b", Availability.NOT_AVAILABLE, None)]
    assert Capability.CONFIG_OFFERS in p.capabilities


def test_providers_with_a_config_offers_hook_say_so_in_their_capabilities() -> None:
    import importlib

    for e in PROVIDERS:
        try:
            cls = getattr(importlib.import_module(f"{e.package}.adapter"), e.adapter_class)
        except ImportError:
            continue
        assert (e.config_offers is not None) == (Capability.CONFIG_OFFERS in cls.capabilities), e.name


def test_settings_validation(sshd: Sshd) -> None:  # noqa: F811
    with pytest.raises(ValidationError, match="unique"):
        Settings.model_validate({"hosts": [_host(sshd), _host(sshd)]})
    with pytest.raises(ValidationError, match="SHA256"):
        Settings.model_validate({"hosts": [_host(sshd, host_key_fingerprint="md5:aa")]})
    with pytest.raises(ValidationError, match="unknown GPU"):
        Settings.model_validate({"hosts": [_host(sshd, gpu="Z9000")]})
    with pytest.raises(ValidationError, match="host name"):
        Settings.model_validate({"hosts": [_host(sshd, name="../x")]})


def test_default_dirs_follow_orch_data_dir(tmp_path: Path) -> None:
    s = Settings()
    # tests/conftest.py points XDG_DATA_HOME into tmp_path
    assert s.state_path == tmp_path / "xdg-data" / "orch" / "ssh"
    assert s.known_hosts_path == tmp_path / "xdg-data" / "orch" / "known_hosts"


def test_settings_import_does_not_import_paramiko() -> None:
    code = "import sys, providers.ssh.settings; assert 'paramiko' not in sys.modules, 'paramiko imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)


def test_check_credentials(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    _provider(tmp_path, sshd).check_credentials()
    with pytest.raises(AuthError, match="no hosts"):
        _provider(tmp_path, sshd, hosts=[]).check_credentials()
    with pytest.raises(AuthError, match="does not exist"):
        _provider(tmp_path, sshd, hosts=[_host(sshd, key_path=str(tmp_path / "missing"))]).check_credentials()
    garbage = tmp_path / "garbage"
    garbage.write_text("not a key")
    with pytest.raises(AuthError, match="cannot read key"):
        _provider(tmp_path, sshd, key_path=str(garbage)).check_credentials()


def test_a_host_declared_on_infiniband_reports_its_fabric(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    p = _provider(tmp_path, sshd, hosts=[_host(sshd, "ib", infiniband=True), _host(sshd, "plain")])
    assert p.launch(_spec(p, "ib")).fabric is Fabric.INFINIBAND
    assert p.launch(_spec(p, "plain")).fabric is None
    assert p.get("ib").fabric is Fabric.INFINIBAND


# -- ending a launch for real (providers/ssh/cleanup.py) ----------------------------------------------------
def _pids_marked(launch_id: str) -> list[int]:
    from tests.e2e.booting import processes_marked

    return processes_marked("ORCH_LAUNCH_ID", launch_id)


def test_terminate_stops_every_process_of_the_launch_before_freeing_the_host(tmp_path: Path,
                                                                             sshd: Sshd) -> None:  # noqa: F811
    p = _provider(tmp_path, sshd, stop_grace_s=0.5)
    inst = p.launch(_spec(p))
    # A process of the launch that ignores SIGTERM and left the session: only SIGKILL after the grace ends it.
    flag = sshd.workdir / "started"
    stubborn = f"trap '' TERM; touch {flag}; while true; do sleep 1; done"
    with p.transport("box1") as t:
        assert t.exec(f"ORCH_LAUNCH_ID={inst.launch_id} setsid nohup sh -c \"{stubborn}\" >/dev/null 2>&1 "
                      f"< /dev/null & while [ ! -f {flag} ]; do sleep 0.05; done; echo started",
                      timeout=10).stdout.strip() == "started"
    assert _pids_marked(inst.launch_id)
    p.terminate("box1")
    assert _pids_marked(inst.launch_id) == []
    assert p.get("box1") is None and p.book.unusable("box1") is None


def test_a_host_that_cannot_be_cleaned_stays_reserved_and_unusable(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    p = _provider(tmp_path, sshd)
    p.launch(_spec(p))
    sshd.stop()                      # orch cannot reach it to stop the launch: it cannot vouch that it is clean
    with pytest.raises(ProviderUnavailableError) as info:
        p.terminate("box1")
    assert info.value.code == "host-unclean" and "box1 is unusable" in str(info.value)
    held = p.get("box1")
    assert held is not None and held.raw_state == "unusable" and "could not be stopped" in (held.raw_reason or "")
    [offer] = p.offers(GpuRequest(count=1))
    assert offer.availability is Availability.NOT_AVAILABLE   # never given to the next job
    with pytest.raises(InsufficientCapacityError):
        p.launch(_spec(p))


def test_a_missing_workdir_is_a_configuration_error_not_capacity(tmp_path: Path, sshd: Sshd) -> None:  # noqa: F811
    p = _provider(tmp_path, sshd, hosts=[_host(sshd, workdir=str(sshd.workdir / "not-there"))])
    with pytest.raises(MissingWorkdirError) as info:
        p.launch(_spec(p))
    assert isinstance(info.value, InvalidRequestError) and not isinstance(info.value, InsufficientCapacityError)
    assert info.value.code == "workdir-missing" and "not-there does not exist" in str(info.value)
    assert "GPU driver" not in str(info.value) and p.get("box1") is None


def test_an_adapter_is_built_from_its_validated_settings_never_a_mapping() -> None:
    from providers.registry import load_settings

    with pytest.raises(TypeError, match=r"takes providers\.ssh\.settings\.Settings, not builtins\.dict"):
        create_provider("ssh", {"hosts": []})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"not providers\.runpod\.settings\.Settings"):
        create_provider("ssh", load_settings("runpod", {"api_key": "k"}))   # another provider's settings


def test_a_one_gpu_host_is_pcie_as_the_catalogs_one_gpu_rows_are(tmp_path: Path) -> None:
    """A single GPU has no peer to link to: the catalog's one-GPU rows say PCIe, so an own one-GPU A100 box
    (whose model's usual link is NVLink) must too, or `--interconnect pcie` would leave it out and `--interconnect
    nvlink --count 1` match it alone. A declared link and a multi-GPU host's model default are kept."""
    from providers.gpus import Interconnect
    from providers.ssh.offers import host_offers

    hosts = [
        {"name": "one", "address": "10.0.0.1", "gpu": "A100-80G", "gpu_count": 1},
        {"name": "eight", "address": "10.0.0.2", "gpu": "A100-80G", "gpu_count": 8},
        {"name": "declared", "address": "10.0.0.3", "gpu": "A100-80G", "gpu_count": 1, "interconnect": "nvlink"},
    ]
    links = {o.instance_type: o.interconnect for o in host_offers(Settings(hosts=hosts, state_dir=tmp_path))}
    assert links == {"one": Interconnect.PCIE, "eight": Interconnect.NVLINK, "declared": Interconnect.NVLINK}
