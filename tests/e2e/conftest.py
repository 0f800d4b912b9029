"""The e2e world: two real OpenSSH "machines", a fake AWS metadata server for machine A, moto S3 as
the checkpoint store, the SSH provider over both hosts, and the engine with the SSH hooks.

Everything the fixtures start is stopped at teardown: the processes under each machine's working root
(agent, startup script, torchrun and its ranks), the sshd servers, the metadata server and moto.
See docs/e2e.md for what is real and what stands in for what.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import ServiceSettings, build_service
from orchestrator.daemon.loop import DaemonSettings
from orchestrator.engine.hooks import AgentReport
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.reconciler import Reconciler
from orchestrator.engine.states import AttemptState
from orchestrator.runtime.engine_hooks import SshBootstrapper
from orchestrator.runtime.node_facts import NodeSettings
from orchestrator.runtime.render_input import CloudKind
from orchestrator.runtime.ssh_monitor import SshMonitor
from orchestrator.runtime.transport_pool import TransportPool
from orchestrator.store import open_store
from orchestrator.store.sqlstore import SqlEngineStore
from providers.base import Capability, GpuRequest, Instance, InstanceState, LaunchSpec, Market, Offer
from providers.catalog.query import match_offers
from providers.errors import InsufficientCapacityError
from providers.ssh.adapter import SshProvider
from providers.ssh.settings import HostSettings, Settings
from tests.fakes.metadata import MetadataState, metadata_server
from tests.support.sshd import SSHD, FakeGpu, Sshd, free_port

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "train_tiny.py"
OWNER = "e2e"
JOB = "tiny"
GPU = "A100-80G"
STEPS = 20
SEED = 1234
#: SIGTERM -> SIGKILL when orch ends a launch on an e2e machine (providers/ssh/cleanup.py).
STOP_GRACE_S = 2.0
#: The daemon's own cadence (orchestrator/daemon/loop.py's defaults): a reconcile tick every 15 s, the wake watch
#: polled every 1 s between ticks (its waiters and a launching tick's follow-up at once).
DAEMON = DaemonSettings()
#: How long machine A keeps running after its interruption notice before the "cloud" kills it.
NOTICE_WINDOW_S = 3.0
WORK = Path(".orch") / "jobs" / JOB  # the job's work dir, relative to each machine's working root
#: A secret value that must never land in a file on a machine (moto accepts any credentials).
SECRET_VALUE = f"e2e-secret-{uuid.uuid4().hex}"


def require_tools() -> None:
    """Skip ONLY when a real piece is missing; each is installed here and in CI."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("torch is not installed: the tiny DDP job cannot run (pip install torch, CPU wheel)")
    if not SSHD.exists():
        pytest.skip(f"{SSHD} is not installed (apt-get install openssh-server): machines are real sshd servers")
    if shutil.which("rclone") is None:
        pytest.skip("rclone is not installed (apt-get install rclone): the agent uploads checkpoints with it")


# --- machine A as a spot machine ---------------------------------------------------------------------

class SpotSshProvider(SshProvider):
    """The real SSH provider, with named hosts sold as SPOT and a ``reclaim`` switch.

    A test double for a spot cloud's API view of a machine: the SSH provider itself has no spot market
    and no way to learn that one of your machines died. ``reclaim(host)`` makes the provider report the
    reserved host as PREEMPTED (like Vast's ``exited``/RunPod's EXITED for an interruptible instance);
    launches on a reclaimed host are refused as out of capacity. Everything else is SshProvider's.
    """

    capabilities = SshProvider.capabilities | {Capability.SPOT}

    def __init__(self, settings: Settings, spot_hosts: frozenset[str]) -> None:
        super().__init__(settings)
        self.spot_hosts = spot_hosts
        self.reclaimed: set[str] = set()

    def reclaim(self, host: str) -> None:
        self.reclaimed.add(host)

    def _as_sold(self, inst: Instance) -> Instance:
        if inst.instance_id not in self.spot_hosts:
            return inst
        inst = replace(inst, market=Market.SPOT)
        if inst.instance_id in self.reclaimed:
            inst = replace(inst, state=InstanceState.PREEMPTED, raw_state="reclaimed",
                           raw_reason="spot host reclaimed (test)")
        return inst

    def offers(self, req: GpuRequest) -> list[Offer]:
        mine = super().offers(replace(req, markets=frozenset(Market)))
        sold = [replace(o, market=Market.SPOT) if o.instance_type in self.spot_hosts else o for o in mine]
        return match_offers(sold, req)

    def launch(self, spec: LaunchSpec) -> Instance:
        if spec.offer.instance_type in self.reclaimed:
            raise InsufficientCapacityError(f"{spec.offer.instance_type} was reclaimed", provider=self.name)
        own = replace(spec, offer=replace(spec.offer, market=Market.ON_DEMAND))
        return self._as_sold(super().launch(own))

    def get(self, instance_id: str) -> Instance | None:
        inst = super().get(instance_id)
        return None if inst is None else self._as_sold(inst)

    def list_instances(self, owner: str) -> list[Instance]:
        return [self._as_sold(i) for i in super().list_instances(owner)]

    def terminate(self, instance_id: str) -> None:
        # A reclaimed spot machine is gone with everything on it (its sshd too): nothing left to stop, as on
        # a cloud. Own machines are stopped for real (SshProvider.terminate).
        if instance_id in self.reclaimed:
            self.book.release(instance_id)
            return
        super().terminate(instance_id)


class RecordingMonitor(SshMonitor):
    """SshMonitor that keeps every report it handed to the engine, per instance (for assertions)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.reports: dict[str, list[AgentReport]] = {}

    def read(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> AgentReport | None:
        report = super().read(job, attempt, instance)
        if report is not None:
            self.reports.setdefault(instance.instance_id, []).append(report)
        return report


# --- processes on a machine ------------------------------------------------------------------------

def machine_processes(machine: Sshd) -> list[int]:
    """Pids of everything started in ``machine``'s sessions (sshd exports ORCH_MACHINE_ROOT to them)."""
    from tests.e2e.booting import processes_marked

    return processes_marked("ORCH_MACHINE_ROOT", str(machine.workdir))


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:].split()[0] in ("Z", "X")


def kill_machine(machine: Sshd, deadline_s: float = 10.0) -> int:
    """SIGKILL the process tree under the machine's working root, like a reclaim; returns how many."""
    victims = machine_processes(machine)
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    poll_until(lambda: all(_gone(p) for p in victims), f"processes of {machine.workdir} to die", deadline_s)
    return len(victims)


def poll_until(cond: Callable[[], Any], what: str, deadline_s: float, interval_s: float = 0.1) -> Any:
    """Poll ``cond`` until it returns something truthy (returned); AssertionError after the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def agents_on(machine: Sshd) -> int:
    """How many orch agents run on the machine (a child forked by an agent, before its exec, is not one)."""
    agents = set()
    for pid in machine_processes(machine):
        with contextlib.suppress(OSError):
            if b"orch_agent.pyz" in Path(f"/proc/{pid}/cmdline").read_bytes() and not _gone(pid):
                agents.add(pid)
    return len({p for p in agents if _ppid(p) not in agents})


def _ppid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat[stat.rfind(")") + 2:].split()[1])


def files_containing(machine: Sshd, needle: str) -> list[Path]:
    return [p for p in machine.root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def steps_logged(machine: Sshd) -> list[int]:
    path = machine.workdir / WORK / "steps.log"
    if not path.exists():
        return []
    return [int(line.split()[1]) for line in path.read_text().splitlines() if line.startswith("step ")]


# --- the checkpoint store ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 in server mode on 127.0.0.1 (an ephemeral port), for the whole module."""
    require_tools()
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per S3 request otherwise

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@dataclass
class Bucket:
    client: Any
    name: str
    prefix: str

    @property
    def uri(self) -> str:
        return f"s3://{self.name}/{self.prefix}"

    def latest(self) -> str | None:
        try:
            body = self.client.get_object(Bucket=self.name, Key=f"{self.prefix}/LATEST")["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None
        return body.decode().strip() or None

    def latest_step(self) -> int | None:
        """The step of LATEST's checkpoint (``step-<N>``); None while there is none."""
        latest = self.latest()
        if latest is None:
            return None
        assert latest.startswith("step-"), latest
        return int(latest.removeprefix("step-"))


@pytest.fixture
def bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    import boto3

    # The job's credentials: secrets the bootstrapper reads from THIS process's environment by name.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_VALUE)
    # rclone 1.60 refuses an S3 endpoint when AWS_CA_BUNDLE is set (LoadCustomCABundleError). The remote
    # sessions never inherit it (sshd gives them a clean environment); the test's own boto3 needs it gone too.
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    name = f"orch-e2e-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=name)
    return Bucket(client, name, f"ckpt/{JOB}")


# --- the uninterrupted reference run ------------------------------------------------------------------

class ReferenceWeights(Mapping[str, Any]):
    """The final weights of an uninterrupted run (``reference_weights``), loaded on first use: the run goes on
    in the background while the test drives its own job, and only the comparison at its end waits for it."""

    def __init__(self, final: Path, lock: Path, work: Callable[[], Path]) -> None:
        self._final, self._lock, self._work = final, lock, work
        self._weights: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        if self._weights is None:
            import fcntl

            import torch

            with self._lock.open("w") as held:
                fcntl.flock(held, fcntl.LOCK_EX)      # the worker running it holds the lock until it is done
                if not self._final.exists():          # that run failed (its error was raised there): run it here
                    _publish(_start_reference(self._work()), self._final)
            self._weights = dict(torch.load(self._final, weights_only=True))
        return self._weights

    def __getitem__(self, key: str) -> Any:
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


@pytest.fixture(scope="session")
def reference_weights(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceWeights]:
    """The final weights of an uninterrupted run with the same script, steps and seed (the tests compare resumed
    runs with them bit for bit): two ranks of examples/train_tiny.py in a gloo world of 2, as torchrun starts
    them (``_start_reference``).

    Run once per test session, not once per module that compares with it (three): the same script, steps and
    seed give the same weights. Under pytest-xdist the workers share the file in the session's shared temporary
    root: the first worker to need it starts the run and holds a lock until the file is there, the others wait
    for the lock when they compare. The run starts when the first test asks for it and is waited for at that
    test's comparison (``ReferenceWeights``), so it no longer holds up the setup of the tests that need it."""
    require_tools()
    import fcntl
    import hashlib
    import threading

    import torch

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent    # the controller's basetemp; each worker's is popen-gwN under it
    key = hashlib.sha256(SCRIPT.read_bytes() + f" {STEPS} {SEED} {torch.__version__}".encode()).hexdigest()[:16]
    final, lock = shared / f"e2e-reference-{key}.pt", shared / f"e2e-reference-{key}.lock"
    held = lock.open("w")
    publisher = None
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        held.close()              # another worker runs it; ReferenceWeights waits for its lock
    else:
        if final.exists():
            held.close()
        else:
            ranks = _start_reference(tmp_path_factory.mktemp("reference"))

            def publish() -> None:
                try:
                    _publish(ranks, final)
                finally:
                    held.close()  # releases the lock: the file is there, or a waiter runs it again

            publisher = threading.Thread(target=publish, name="e2e-reference", daemon=True)
            publisher.start()
    yield ReferenceWeights(final, lock, lambda: tmp_path_factory.mktemp("reference"))
    if publisher is not None:
        publisher.join()


@dataclass
class _ReferenceRun:
    work: Path
    ranks: list[subprocess.Popen[bytes]]


def _start_reference(work: Path) -> _ReferenceRun:
    """Start the two ranks of the uninterrupted run, with the environment torchrun gives its workers (rank, world,
    rendezvous address): the same processes torchrun would start, without its launcher process (one torch import,
    ~3 s of CPU, less)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-u", str(SCRIPT), "--steps", str(STEPS), "--seed", str(SEED), "--ckpt-every", "5",
            "--ckpt-dir", str(work / "ckpt"), "--out", str(work / "final.pt"), "--steps-log", str(work / "steps.log")]
    ranks = []
    for rank in range(2):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
               "GROUP_RANK": "0"}
        log = (work / f"rank{rank}.log").open("wb")
        ranks.append(subprocess.Popen(argv, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL))
        log.close()
    return _ReferenceRun(work, ranks)


def _publish(run: _ReferenceRun, final: Path) -> None:
    """Wait for the ranks (killed after 120 s); on success move the weights to ``final``, else fail with their logs."""
    codes = []
    for proc in run.ranks:
        try:
            codes.append(proc.wait(timeout=120))
        except subprocess.TimeoutExpired:
            for p in run.ranks:
                p.kill()
            codes.append(proc.wait())
    logs = "".join((run.work / f"rank{r}.log").read_text(errors="replace")[-3000:] for r in range(len(run.ranks)))
    assert codes == [0] * len(run.ranks), f"reference run failed ({codes}):\n{logs}"
    (run.work / "final.pt").replace(final)


# --- the world --------------------------------------------------------------------------------------

def make_store(path: Path, catalog: Sequence[Offer]) -> SqlEngineStore:
    """The e2e's store: orch's own SQL store (SQLite), as the daemon uses it."""
    return SqlEngineStore(open_store(f"sqlite:///{path}"), OWNER, catalog=catalog)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def code_repo(where: Path) -> Path:
    """The user's repository, made here: the tiny job's script and a VERSION file, committed. The machines
    get the script only from it (the code pack), never from this checkout."""
    repo = where / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "e2e@example.invalid")
    git(repo, "config", "user.name", "e2e")
    shutil.copy(SCRIPT, repo / "train_tiny.py")
    (repo / "VERSION").write_text("1\n")
    (repo / ".orchignore").write_text("outputs/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v1")
    return repo


def move_repo_on(repo: Path) -> str:
    """A later commit a relaunch must NOT run: the script now fails at once. Returns the new commit."""
    script = repo / "train_tiny.py"
    script.write_text("raise SystemExit('this commit was never applied')\n" + script.read_text())
    (repo / "VERSION").write_text("2\n")
    git(repo, "commit", "-q", "-am", "v2")
    return git(repo, "rev-parse", "HEAD")


def add_job(store: SqlEngineStore, manifest_yaml: str, where: Path) -> JobRecord:
    """``orch apply`` of one YAML manifest: the real loader and the real apply, then the job's record.
    ``where`` is the user's repository (``code_repo``): apply pins its HEAD as the job's code."""
    from orchestrator.app import jobs as app_jobs

    path = where / f"{JOB}.yaml"
    path.write_text(manifest_yaml)
    app_jobs.apply(store.store, app_jobs.load([path]))
    [job] = [j for j in store.active_jobs() if j.name == JOB]
    return job


def job_manifest(bucket: Bucket, args: list[str], *, resume: str, notify: str, nodes: int = 1,
                 gpus: int = 2) -> str:
    """The job as a user writes it (docs/manifests.md). Relative paths live in each machine's work dir, where
    the code pack (the repository's train_tiny.py) is unpacked before the job starts.
    ``resume``/``notify``: the YAML flow mappings for checkpoint.resume and checkpoint.notify."""
    job_args = ", ".join(json.dumps(a) for a in
                         ["--steps", str(STEPS), "--seed", str(SEED), "--ckpt-every", "5", *args])
    return f"""\
apiVersion: orch/v1
kind: Job
name: {JOB}
resources: {{gpu: {GPU}, count: {gpus}, nodes: {nodes}}}
run:
  launcher: torchrun
  script: train_tiny.py
  args: [{job_args}]
env: {{OMP_NUM_THREADS: "1", AWS_REGION: us-east-1}}
secrets: [AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY]
checkpoint:
  path: ckpt
  store: {bucket.uri}
  resume: {resume}
  notify: {notify}
policies:
  estimated_hours: 1
  preempted_zone_cooldown: 30m
"""


def node_settings(s3_endpoint: str, **kw: Any) -> NodeSettings:
    """A machine's facts for the e2e: the moto S3 endpoint and fast agent loops."""
    return NodeSettings(store_endpoint=s3_endpoint, sample_interval_s=0.5, notice_interval_s=0.5, **kw)


class ManualClock:
    """The engine's clock, moved on only by the test (``advance``): a window the engine times, such as a
    notice's drain, ends when the test says so, never because a loaded machine ran slow."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class World:
    a: Sshd
    b: Sshd
    metadata: MetadataState
    provider: SpotSshProvider
    store: SqlEngineStore
    monitor: RecordingMonitor
    rec: Reconciler
    pool: TransportPool
    clock: ManualClock
    started: float = field(default_factory=time.monotonic)

    def tick_until(self, cond: Callable[[], Any], what: str, deadline_s: float = 60.0, *,
                   daemon: bool = False) -> Any:
        """Tick the engine until ``cond`` holds, with 0.2 s between ticks, or at once when the engine's wake watch
        says a tick is due (a tick that launched a machine; a waiter that heard a notice or a commit on a node:
        orchestrator/engine/wake.py). ``daemon``: at the daemon's cadence instead (``DAEMON``): the next tick when
        the wake watch says one is due (its waiters and a launch's follow-up at once, its poll every
        ``wake_interval_s``), else a ``reconcile_interval_s`` after the last."""
        end = time.monotonic() + deadline_s
        while True:
            report = self.rec.tick()
            assert not [e for e in report.errors if "bootstrap" in e], report.errors
            if value := cond():
                return value
            if time.monotonic() > end:
                raise AssertionError(f"timed out after {deadline_s:.0f}s waiting for {what}")
            self._pause(daemon)

    def _pause(self, daemon: bool) -> None:
        """Between two ticks (see ``tick_until``)."""
        wake = self.rec.wake
        if not daemon:
            wake.wait(0.2)
            return
        due_at = time.monotonic() + DAEMON.reconcile_interval_s
        while time.monotonic() < due_at:
            if wake.wait(DAEMON.wake_interval_s) is not None or wake.due() is not None:
                return

    def attempts(self, job: JobRecord) -> list[AttemptRecord]:
        return list(self.store.attempts_for_job(job.id))

    def running_on(self, job: JobRecord, host: str) -> AttemptRecord | None:
        return next((a for a in self.attempts(job) if a.instance_id == host and a.state is AttemptState.RUNNING),
                    None)


def host_settings(name: str, machine: Sshd, price: float, region: str, gpus: int = 2) -> HostSettings:
    """The SSH provider's entry for one e2e machine."""
    return HostSettings(name=name, address=machine.host, port=machine.port, user=machine.user,
                        key_path=machine.client_key_path, gpu=GPU, gpu_count=gpus, vcpus=2, memory_gb=8,
                        region=region, price_hr=price, host_key=machine.host_key_line, workdir=str(machine.workdir))


def torch_on_path(machine: Sshd) -> None:
    # The "machine" has PyTorch installed: torchrun on its PATH is this interpreter's.
    machine.write_command("torchrun", f'#!/bin/sh\nexec {sys.executable} -m torch.distributed.run "$@"\n')


def ssh_settings(hosts: tuple[HostSettings, ...], key_owner: Sshd, tmp_path: Path) -> Settings:
    """The SSH provider's settings for e2e machines: short timeouts, state and known hosts under tmp_path."""
    return Settings(hosts=hosts, key_path=key_owner.client_key_path, state_dir=tmp_path / "ssh-state",
                    known_hosts=tmp_path / "known_hosts", connect_timeout_s=3.0, auth_timeout_s=5.0,
                    reconnect_deadline_s=1.0, verify_timeout_s=10.0, stop_grace_s=STOP_GRACE_S)


def ssh_engine(stack: contextlib.ExitStack, tmp_path: Path, provider: SshProvider, catalog: Sequence[Offer],
               nodes: dict[str, NodeSettings], clock: Callable[[], datetime] | None = None,
               ) -> tuple[SqlEngineStore, TransportPool, RecordingMonitor, Reconciler]:
    """orch's engine over the e2e machines, wired as the daemon wires it: the SQL store, kept-alive SSH
    transports (closed with ``stack``), the recording monitor, the SSH bootstrapper, the e2e's notice window."""
    store = make_store(tmp_path / "orch.db", catalog)
    pool = TransportPool({"ssh": provider})
    stack.callback(pool.close)
    monitor = RecordingMonitor(pool, nodes)
    service = build_service(config=OrchConfig(owner=OWNER), engine_store=store, providers={"ssh": provider},
                            catalog=catalog, settings=ServiceSettings(notice_drain=timedelta(seconds=NOTICE_WINDOW_S)),
                            monitor=monitor, bootstrapper=SshBootstrapper(pool, nodes, status_deadline_s=30.0),
                            clock=clock)
    return store, pool, monitor, service.reconciler


@pytest.fixture
def world(tmp_path: Path, s3_endpoint: str) -> Iterator[World]:
    require_tools()
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(Sshd(tmp_path / "machine-a", gpus=(FakeGpu(0, utilization=87),
                                                                     FakeGpu(1, utilization=93))))
        b = stack.enter_context(Sshd(tmp_path / "machine-b", gpus=(FakeGpu(0, utilization=61),
                                                                     FakeGpu(1, utilization=64))))
        for m in (a, b):
            torch_on_path(m)
            # Registered after the server, so it runs first: nothing started on the machine outlives the test.
            stack.callback(kill_machine, m)
        url, metadata = stack.enter_context(metadata_server())
        hosts = (host_settings("host-a", a, 0.40, "site-a"), host_settings("host-b", b, 0.90, "site-b"))
        settings = ssh_settings(hosts, a, tmp_path)
        provider = SpotSshProvider(settings, spot_hosts=frozenset({"host-a"}))
        catalog = provider.offers(GpuRequest(gpus=(GPU,), count=2))
        assert [(o.instance_type, o.market) for o in catalog] == [("host-a", Market.SPOT),
                                                                  ("host-b", Market.ON_DEMAND)]
        assert all(o.price_as_of == date.today() for o in catalog)
        # Per-machine settings: A is an AWS spot stand-in whose metadata is the fake server; both machines
        # share one loopback, so each gets its own torchrun master port.
        nodes = {"ssh/host-a": node_settings(s3_endpoint, cloud=CloudKind.AWS, aws_metadata_url=url,
                                             master_port=free_port()),
                 "ssh/host-b": node_settings(s3_endpoint, master_port=free_port())}
        clock = ManualClock()
        store, pool, monitor, rec = ssh_engine(stack, tmp_path, provider, catalog, nodes, clock)
        yield World(a, b, metadata, provider, store, monitor, rec, pool, clock)



class NoticeTimeline:
    """Where the time between a spot notice and the replacement running goes, for the e2e's printed breakdown
    (seconds after the notice was served). The agents' own timestamps (their status files: both machines
    share this clock) say when A heard the notice, finished its notice checkpoint on disk, committed it to the
    store, and when B's agent and job started; the engine's steps (A ended, B launched, B running) are
    sampled after each tick, so each is an upper bound within one tick. It measures; it asserts nothing."""

    def __init__(self, world: World, job: JobRecord) -> None:
        self.world, self.job = world, job
        self.served_wall, self.served = time.time(), time.monotonic()
        self.marks: dict[str, float] = {}
        self.ticks = 0
        boot = world.rec.hooks.bootstrapper
        started = boot.start

        def timed_start(job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
            # When the engine first asked B's machine to start, and when it answered started.
            host_b = instance.instance_id == "host-b"
            self._mark("b-start-asked", host_b)
            ok = started(job, attempt, instance)
            self._mark("b-start-done", host_b and ok)
            return ok

        boot.start = timed_start  # type: ignore[method-assign]

    def _mark(self, name: str, hit: bool) -> None:
        if hit and name not in self.marks:
            self.marks[name] = time.monotonic() - self.served

    def seen(self) -> bool:
        """Record the engine's steps that hold now; always True (it rides in a ``tick_until`` condition)."""
        self.ticks += 1
        attempts = self.world.attempts(self.job)
        self._mark("engine-ended-a", any(a.instance_id == "host-a" and a.state is AttemptState.PREEMPTED
                                         for a in attempts))
        self._mark("b-launched", any(a.instance_id == "host-b" for a in attempts))
        self._mark("b-running", self.world.running_on(self.job, "host-b") is not None)
        return True

    def _agent_marks(self) -> dict[str, float]:
        def status(machine: Sshd) -> dict[str, Any]:
            try:
                return dict(json.loads((machine.workdir / WORK / "status.json").read_text()))
            except (OSError, ValueError):
                return {}

        a, b = status(self.world.a), status(self.world.b)
        wall: dict[str, float | None] = {
            "a-heard": next((n.get("seen_at") for n in a.get("notices", [])), None),
            "a-ckpt-on-disk": (a.get("job") or {}).get("drained_at"),
            "a-job-ended": (a.get("job") or {}).get("ended_at"),
            "a-committed": max((c.get("committed_at") or 0 for c in a.get("checkpoints", [])), default=None),
            "b-agent-up": (b.get("agent") or {}).get("started_at"),
            "b-job-started": (b.get("job") or {}).get("started_at"),
        }
        return {k: v - self.served_wall for k, v in wall.items() if v}

    def line(self) -> str:
        """One line: every step by time since the notice, then how many ticks ran."""
        marks = {**self._agent_marks(), **self.marks}
        return " ".join(f"{k}={v:.2f}s" for k, v in sorted(marks.items(), key=lambda kv: kv[1])) + \
            f" ticks={self.ticks}"
