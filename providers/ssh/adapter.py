"""The SSH provider: bring your own machines.

A configured host is an "instance" while it is reserved for a launch. ``launch`` reserves the host the
offer names (``offer.instance_type`` is the host name), then proves over SSH that it answers, that its
host key is the pinned one, and that ``verify_command`` (default ``nvidia-smi -L``) succeeds; on any
failure the reservation is released before the error is raised. ``terminate`` stops the launch for real
before it frees the host (providers/ssh/cleanup.py): every process of the launch is sent SIGTERM, then SIGKILL
after ``stop_grace_s``, and the host is released only once none remains and its ports are free; a host that
cannot be cleaned (or reached) stays reserved, marked unusable, and terminate raises a ProviderError saying so
(the engine asks again on a later tick; a clean then frees it). The machine itself keeps running (it is yours).

Host keys of configured hosts are never trusted on first contact: the key (or its fingerprint) must be
in the config or already in orch's known_hosts store.
"""

from __future__ import annotations

import shlex
from datetime import UTC, datetime

from providers.base import (
    Capability,
    GpuRequest,
    Instance,
    InstanceState,
    LaunchSpec,
    Market,
    Offer,
    Provider,
)
from providers.catalog.query import match_offers
from providers.errors import (
    AuthError,
    GpuCheckFailedError,
    InsufficientCapacityError,
    InvalidRequestError,
    MissingWorkdirError,
    ProviderError,
    ProviderUnavailableError,
)
from providers.fabric import Fabric
from providers.ssh.cleanup import clean_command, parse_clean
from providers.ssh.connection import SshTransport
from providers.ssh.errors import (
    ExecTimeoutError,
    HostKeyError,
    HostKeyMismatchError,
    TransportAuthError,
    TransportError,
)
from providers.ssh.hostkeys import HostKeyStore, HostTrust
from providers.ssh.offers import host_offers
from providers.ssh.reservations import HostReservedError, Reservation, ReservationBook
from providers.ssh.settings import HostSettings, Settings
from providers.ssh.transport import ExecResult

__all__ = ["SshProvider", "translate_error"]

NAME = "ssh"


class WorkdirMissingError(Exception):
    """The host's configured ``workdir`` does not exist: a configuration error, not a capacity one."""

    def __init__(self, host: str, workdir: str, detail: str) -> None:
        self.host = host
        super().__init__(f"host {host}: workdir {workdir} does not exist or is not a directory ({detail})")


#: What the verify exec prints when the host's workdir is missing (then it runs nothing else).
_NO_WORKDIR = "orch-workdir-missing"


class VerifyFailedError(Exception):
    """verify_command exited non-zero on the host."""

    def __init__(self, host: str, command: str, result: ExecResult) -> None:
        self.host = host
        self.result = result
        detail = (result.stderr.strip() or result.stdout.strip())[-500:]
        super().__init__(f"host {host}: {command!r} exited {result.exit_code}: {detail}")


def translate_error(exc: Exception, host: str = "") -> ProviderError:
    """The ONE place SSH/reservation failures become taxonomy errors."""
    where = f"host {host}: " if host else ""
    if isinstance(exc, HostReservedError):
        return InsufficientCapacityError(str(exc), provider=NAME, code="reserved")
    if isinstance(exc, WorkdirMissingError):
        return MissingWorkdirError(str(exc), provider=NAME, code="workdir-missing",
                                   hint="create the directory on the host, or fix workdir in providers.ssh.hosts")
    if isinstance(exc, VerifyFailedError):
        # The machine answers but cannot serve GPUs now: the planner should move on to another offer.
        return GpuCheckFailedError(str(exc), provider=NAME, code="verify-failed",
                                   hint="check the GPU driver on the host, or set verify_command")
    if isinstance(exc, HostKeyError):
        code = "host-key-changed" if isinstance(exc, HostKeyMismatchError) else "host-key-unknown"
        return AuthError(f"{where}{exc}", provider=NAME, code=code,
                         hint="pin the host's key with host_key or host_key_fingerprint in providers.ssh.hosts")
    if isinstance(exc, TransportAuthError):
        return AuthError(f"{where}{exc}", provider=NAME, code="key-refused",
                         hint="add the public half of key_path to the host's ~/.ssh/authorized_keys")
    if isinstance(exc, ExecTimeoutError):
        return ProviderUnavailableError(f"{where}{exc}", provider=NAME, code="timeout")
    if isinstance(exc, TransportError):
        return ProviderUnavailableError(f"{where}{exc}", provider=NAME, code="unreachable")
    return ProviderUnavailableError(f"{where}{type(exc).__name__}: {exc}", provider=NAME)


class SshProvider(Provider):
    name = NAME
    # Multi-node: the hosts of one region (site) are taken to share a network, as a rack or a LAN does.
    # CONFIG_OFFERS: its offers are the configured hosts, known without any call (providers/ssh/offers.py).
    capabilities = frozenset({Capability.HOST_KEYS, Capability.MULTI_NODE, Capability.CONFIG_OFFERS})

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.book = ReservationBook(settings.state_path)
        self.host_keys = HostKeyStore(settings.known_hosts_path)

    # -- helpers -------------------------------------------------------------------------------------
    def _host(self, name: str) -> HostSettings:
        host = self.settings.host(name)
        if host is None:
            known = ", ".join(h.name for h in self.settings.hosts) or "none"
            raise InvalidRequestError(f"no configured host named {name!r} (configured: {known})", provider=NAME)
        return host

    def trust(self, host: HostSettings) -> HostTrust:
        """Configured hosts: only config keys/fingerprints or the store. Never first-contact."""
        return HostTrust(
            keys=(host.host_key,) if host.host_key else (),
            fingerprints=(host.host_key_fingerprint,) if host.host_key_fingerprint else (),
            allow_first_contact=False,
        )

    def transport(self, instance_id: str) -> SshTransport:
        """A transport to a configured host, with its key and host key rules (the caller closes it)."""
        host = self._host(instance_id)
        s = self.settings
        return SshTransport(
            host.address, host.port, host.user, key_path=s.host_key_path(host), host_keys=self.host_keys,
            trust=self.trust(host), connect_timeout=s.connect_timeout_s, auth_timeout=s.auth_timeout_s,
            banner_timeout=s.auth_timeout_s, reconnect_deadline_s=s.reconnect_deadline_s, workdir=host.workdir,
        )

    def _instance(self, res: Reservation) -> Instance:
        host = self.settings.host(res.host)
        if host is None:
            # Reserved, then removed from the config: still listed so it can be released.
            return Instance(provider=NAME, instance_id=res.host, launch_id=res.launch_id, owner=res.owner,
                            job=res.job, state=InstanceState.RUNNING, instance_type=res.host, region="unknown",
                            raw_state="reserved", raw_reason="host no longer in config", created_at=res.reserved_at)
        if host.host_key:
            keys: tuple[str, ...] = (host.host_key,)
        else:
            keys = tuple(k.line for k in self.host_keys.keys_for(host.address, host.port))
        extra = [("key_path", str(self.settings.host_key_path(host)))]
        unusable = self.book.unusable(host.name)
        if host.workdir:
            extra.append(("workdir", host.workdir))
        return Instance(
            provider=NAME, instance_id=host.name, launch_id=res.launch_id, owner=res.owner, job=res.job,
            state=InstanceState.RUNNING, instance_type=host.name, region=host.region, zone=None,
            market=Market.ON_DEMAND, raw_state="unusable" if unusable else "reserved", raw_reason=unusable,
            public_ip=host.address, ssh_port=host.port,
            ssh_user=host.user, host_keys=keys, created_at=res.reserved_at,
            price_hr=self.settings.host_price(host), extra=tuple(extra),
            fabric=Fabric.INFINIBAND if host.infiniband else None,
        )

    # -- the protocol --------------------------------------------------------------------------------
    def check_credentials(self) -> None:
        if not self.settings.hosts:
            raise AuthError("no hosts configured", provider=NAME,
                            hint="declare machines under providers.ssh.hosts in orch's config")
        import paramiko

        for host in self.settings.hosts:
            path = self.settings.host_key_path(host)
            try:
                paramiko.PKey.from_path(path)
            except FileNotFoundError:
                raise AuthError(f"host {host.name}: key file {path} does not exist", provider=NAME,
                                hint="set key_path (provider-wide or per host) to a readable private key") from None
            except (OSError, paramiko.SSHException, ValueError) as exc:
                raise AuthError(f"host {host.name}: cannot read key {path}: {exc}", provider=NAME,
                                hint="use an unencrypted key file readable by orch") from None

    def offers(self, req: GpuRequest) -> list[Offer]:
        """The configured hosts matching ``req`` (settings and reservations only: no SSH, no cloud call)."""
        return match_offers(host_offers(self.settings), req)

    def launch(self, spec: LaunchSpec) -> Instance:
        if spec.offer.market is not Market.ON_DEMAND:
            raise InvalidRequestError("own machines have no spot market", provider=NAME)
        host = self._host(spec.offer.instance_type)
        wanted = Reservation(host=host.name, launch_id=spec.launch_id, owner=spec.owner, job=spec.job,
                             reserved_at=datetime.now(UTC))
        try:
            res, new = self.book.reserve(wanted)
        except HostReservedError as exc:
            raise translate_error(exc, host.name) from exc
        if not new:
            return self._instance(res)
        try:
            self._verify(host)
        except BaseException as exc:
            self.book.release(host.name, spec.launch_id)
            if isinstance(exc, Exception):
                raise translate_error(exc, host.name) from exc
            raise
        return self._instance(res)

    def _verify(self, host: HostSettings) -> None:
        command = self.settings.verify_command
        # One connection, one exec (each costs a handshake or a round trip on a launch's way, a relaunch's
        # too). The workdir is checked first, apart from the command: a missing workdir would otherwise fail
        # the verify command and read as "no GPU" (InsufficientCapacityError).
        plain = self.transport(host.name)
        plain.workdir = None
        line = command
        if host.workdir:
            q = shlex.quote(host.workdir)
            line = f"if [ -d {q} ]; then cd {q} || exit 1; else echo {_NO_WORKDIR}; exit 1; fi; {command}"
        with plain as t:
            result = t.exec(line, timeout=self.settings.verify_timeout_s)
        if host.workdir and result.stdout.startswith(_NO_WORKDIR):
            raise WorkdirMissingError(host.name, host.workdir, (result.stderr.strip() or "test -d failed")[-300:])
        if not result.ok:
            raise VerifyFailedError(host.name, command, result)

    def get(self, instance_id: str) -> Instance | None:
        res = self.book.get(instance_id) if self._safe_name(instance_id) else None
        return self._instance(res) if res is not None else None

    def list_instances(self, owner: str) -> list[Instance]:
        return [self._instance(r) for r in self.book.all() if r.owner == owner]

    def terminate(self, instance_id: str) -> None:
        """Stop the launch on the host, verify, then free it (see the module docstring and cleanup.py)."""
        if not self._safe_name(instance_id):
            return
        res = self.book.get(instance_id)
        if res is None:
            return
        if self.settings.host(instance_id) is None:
            self.book.release(instance_id, res.launch_id)   # no longer configured: nothing orch can reach
            return
        try:
            plain = self.transport(instance_id)
            plain.workdir = None            # the clean must run even where the workdir is gone
            with plain as t:
                done = t.exec(clean_command(res.launch_id, self.settings.stop_grace_s),
                              timeout=self.settings.stop_grace_s + 60)
            outcome = parse_clean(done.stdout)
            if outcome is None:
                why = f"the stop program did not run (exit {done.exit_code}): {done.stderr.strip()[-300:]}"
            elif not outcome.clean:
                why = outcome.describe()
            else:
                why = ""
        except (TransportError, HostKeyError) as exc:
            why = f"cannot reach it to stop launch {res.launch_id}: {exc}"
        if why:
            reason = f"host {instance_id} is unusable: launch {res.launch_id} could not be stopped: {why}"
            self.book.mark_unusable(instance_id, reason)
            raise ProviderUnavailableError(reason, provider=NAME, code="host-unclean",
                                           hint="stop the launch's processes on the host; orch frees the host "
                                           "at its next clean try")
        self.book.release(instance_id, res.launch_id)
        self.book.clear_unusable(instance_id)

    @staticmethod
    def _safe_name(name: str) -> bool:
        # Instance ids become file names under state_dir: never let one escape it.
        return bool(name) and "/" not in name and name not in (".", "..") and not name.startswith(".")
