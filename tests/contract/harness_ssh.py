"""Contract harness for the SSH provider: two configured hosts served by one REAL sshd on 127.0.0.1.

Faults are real conditions, not mocks: CAPACITY reserves every host for another owner (in the shared
state dir, as a second orch would); AUTH makes the server refuse the client key (authorized_keys
emptied). QUOTA, THROTTLE and SERVER_ERROR have no meaning for machines you own and are not supported.
"""

from __future__ import annotations

import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from providers.base import GpuRequest, LaunchSpec, Market, Provider
from providers.registry import create_provider, load_settings
from providers.ssh.reservations import Reservation, ReservationBook
from tests.contract.harness import Fault, ProviderHarness
from tests.support.sshd import Sshd, require_sshd

HOSTS = ("box1", "box2")


class SshHarness(ProviderHarness):
    name = "ssh"
    supports_spot = False
    supported_faults = frozenset({Fault.CAPACITY, Fault.AUTH})
    missing_instance_id = "no-such-host"

    def __init__(self) -> None:
        require_sshd()
        self.base = Path(tempfile.mkdtemp(prefix="orch-ssh-contract-"))
        self.sshd = Sshd(self.base / "sshd").start()
        self.state_dir = self.base / "state"
        self.book = ReservationBook(self.state_dir)

    def _settings(self) -> dict[str, object]:
        s = self.sshd
        return {
            "hosts": [
                {"name": name, "address": s.host, "port": s.port, "user": s.user, "gpu": "A100-80G",
                 "gpu_count": 1, "vcpus": 8, "memory_gb": 64, "host_key": s.host_key_line,
                 "workdir": str(s.workdir)}
                for name in HOSTS
            ],
            "key_path": str(s.client_key_path),
            "state_dir": str(self.state_dir),
            "known_hosts": str(self.base / "known_hosts"),
            "connect_timeout_s": 5.0,
            "reconnect_deadline_s": 0.5,
            "verify_timeout_s": 10.0,
        }

    def provider(self) -> Provider:
        return create_provider("ssh", load_settings("ssh", self._settings()))

    def launch_spec(self, launch_id: str, owner: str, market: Market = Market.ON_DEMAND) -> LaunchSpec:
        p = self.provider()
        offer = next(o for o in p.offers(GpuRequest(gpus=("A100-80G",), count=1)) if o.instance_type == HOSTS[0])
        return LaunchSpec(launch_id=launch_id, owner=owner, job="contract-job", offer=offer)

    def inject(self, fault: Fault, times: int = 1) -> None:
        # Both faults are conditions of the machines, so they last until reset (``times`` is moot).
        if fault is Fault.CAPACITY:
            for i, host in enumerate(HOSTS):
                self.book.reserve(Reservation(host=host, launch_id=f"lother{i:011d}", owner="another-orch",
                                              job="theirs", reserved_at=datetime.now(UTC)))
        elif fault is Fault.AUTH:
            self.sshd.revoke_client_key()
        else:
            raise NotImplementedError(f"ssh has no {fault} failure mode")

    def reset(self) -> None:
        self.sshd.authorize_client_key()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def close(self) -> None:
        self.sshd.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def make_harness() -> ProviderHarness:
    return SshHarness()
