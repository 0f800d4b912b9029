"""Own machines stop for real (providers/ssh/cleanup.py): ``orch down`` and the console's "Relaunch now" end
the launch's whole process tree on the host, a stubborn process and one that left the job's session included,
free its port, and only then free the host for the next job; the monitor reads the current launch only.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from orchestrator.app import down as app_down
from orchestrator.app import jobs as app_jobs
from orchestrator.app import status as app_status
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.store import repo as repo_
from orchestrator.store.requests import request_relaunch
from tests.e2e.booting import processes_marked
from tests.e2e.conftest import WORK, World, agents_on, git, poll_until
from tests.support.sshd import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

#: The job: listens on a port, ignores SIGTERM, and forks a child into its own session (out of the job's
#: process group) that ignores SIGTERM too. Only a kill of every process of the launch, SIGKILL after the grace,
#: ends it all.
HOLD_PORT = """\
import os, signal, socket, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    time.sleep(3600)
    os._exit(0)
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
open("listening", "w").write(sys.argv[1])
while True:
    time.sleep(1)
"""

BIND_ONCE = """\
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("bound", sys.argv[1])
"""


def _repo(where: Path) -> Path:
    repo = where / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "e2e@example.invalid")
    git(repo, "config", "user.name", "e2e")
    (repo / "hold_port.py").write_text(HOLD_PORT)
    (repo / "bind_once.py").write_text(BIND_ONCE)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "jobs")
    return repo


def _apply(world: World, repo: Path, name: str, command: str) -> JobRecord:
    """``orch apply`` of a one-command job kept on site A (host-a), from the repository."""
    path = repo / f"{name}.yaml"
    path.write_text(f"""\
apiVersion: orch/v1
kind: Job
name: {name}
resources: {{gpu: A100-80G, count: 2}}
regions: {{allow: [site-a]}}
run: {{launcher: command, command: "{command}"}}
policies: {{estimated_hours: 1}}
""")
    app_jobs.apply(world.store.store, app_jobs.load([path]))
    with world.store.store.transaction() as tx:
        row = repo_.get_job(tx, name)
        assert row is not None and row.id is not None
        job_id = row.id
    return world.store.job(job_id)     # read through (the engine's cached reads refresh at its next tick)


def _ps_on_host(needle: str) -> list[str]:
    """``ps`` on the host (the e2e machines share this kernel): the lines whose command holds ``needle``."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,stat=,args="], capture_output=True, text=True, check=True).stdout
    return [ln for ln in out.splitlines() if needle in ln and " Z" not in ln[:12]]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _running(world: World, job: JobRecord) -> AttemptRecord | None:
    return world.running_on(job, "host-a")


def test_down_kills_the_whole_tree_frees_the_port_and_the_next_job_runs(world: World, tmp_path: Path) -> None:
    assert shutil.which("ps"), "procps is needed: the test checks the host with ps"
    port = free_port()
    repo = _repo(tmp_path)
    job = _apply(world, repo, "holder", f"python3 hold_port.py {port}")
    world.tick_until(lambda: _running(world, job), "the holder to run on host-a")
    poll_until(lambda: (world.a.workdir / ".orch/jobs/holder/listening").exists(), "the holder to listen", 60.0)
    attempt = _running(world, job)
    assert attempt is not None
    assert len(_ps_on_host("hold_port.py")) == 2       # the holder and its setsid child
    assert not _port_free(port)

    app_down.mark_down(world.store.store, ["holder"])
    world.tick_until(lambda: world.provider.list_instances("e2e") == [], "host-a to be freed")
    # terminate returned only after the clean: nothing of the launch is left and its port is free.
    assert processes_marked("ORCH_LAUNCH_ID", attempt.launch_id) == []
    assert _ps_on_host("hold_port.py") == []
    assert agents_on(world.a) == 0
    assert _port_free(port)
    assert world.provider.book.unusable("host-a") is None

    nxt = _apply(world, repo, "next", f"python3 bind_once.py {port}")
    world.tick_until(lambda: world.store.job(nxt.id).status is JobStatus.SUCCEEDED, "the next job to finish")
    assert f"bound {port}" in (world.a.workdir / ".orch/jobs/next/job.log").read_text()
    [done] = world.attempts(nxt)
    assert (done.instance_id, done.state) == ("host-a", AttemptState.SUCCEEDED)


def test_relaunch_now_ends_the_old_run_before_the_new_one_exactly_one_runs(world: World, tmp_path: Path) -> None:
    port = free_port()
    repo = _repo(tmp_path)
    job = _apply(world, repo, "holder", f"python3 hold_port.py {port}")
    world.tick_until(lambda: _running(world, job), "the holder to run on host-a")
    listening = world.a.workdir / ".orch/jobs/holder/listening"
    poll_until(listening.exists, "the holder to listen", 60.0)
    first = _running(world, job)
    assert first is not None
    listening.unlink()

    with world.store.store.transaction() as tx:
        request_relaunch(tx, "holder", by="console")
    world.tick_until(lambda: (r := _running(world, job)) is not None and r.launch_id != first.launch_id,
                     "the relaunch to run on host-a")
    # The new run got the port (the old one's processes are gone): it did not die on EADDRINUSE.
    poll_until(listening.exists, "the relaunched holder to listen", 60.0)
    second = _running(world, job)
    assert second is not None and second.launch_id != first.launch_id
    assert processes_marked("ORCH_LAUNCH_ID", first.launch_id) == []
    assert agents_on(world.a) == 1
    holders = [ln for ln in _ps_on_host("hold_port.py") if "python3 hold_port.py" in ln]
    assert len(holders) == 2        # exactly one run: the holder and its setsid child, both of the new launch
    status = (world.a.workdir / WORK.parent / "holder" / "status.json").read_text()
    assert second.launch_id in status and first.launch_id not in status
    [ended] = [a for a in world.attempts(job) if a.launch_id == first.launch_id]
    assert ended.state is not AttemptState.RUNNING


def test_a_failed_setup_says_what_happened_in_the_nodes_words(world: World, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    path = repo / "broken.yaml"
    path.write_text("""\
apiVersion: orch/v1
kind: Job
name: broken
resources: {gpu: A100-80G, count: 2}
regions: {allow: [site-a]}
setup: [no-such-tool --install]
run: {launcher: command, command: "python3 bind_once.py 1"}
""")
    app_jobs.apply(world.store.store, app_jobs.load([path]))
    with world.store.store.transaction() as tx:
        row = repo_.get_job(tx, "broken")
        assert row is not None and row.id is not None
        job_id = row.id
    world.tick_until(lambda: world.store.job(job_id).status is JobStatus.FAILED, "the broken job to fail")
    [failed] = world.attempts(world.store.job(job_id))
    assert failed.state is AttemptState.FAILED and failed.reason is not None
    # The failed setup line is said as such (orchestrator/engine/failure.py), with the node's own words.
    # the shell's own words: dash says "no-such-tool: not found", bash "no-such-tool: command not found"
    assert failed.reason.startswith("setup: job exited 78: ") and re.search(r"no-such-tool: (command )?not found",
                                                                             failed.reason)
    assert "capacity" not in failed.reason.lower() and "driver" not in failed.reason.lower()
    events = app_status.events(world.store.store, "broken")
    assert any(re.search(r"no-such-tool: (command )?not found", e.message) for e in events), [e.message for e in events]
