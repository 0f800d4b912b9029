"""Ending a launch on your own machine for real: every process of the launch stopped, its ports free.

The SSH provider runs :data:`CLEAN_PROGRAM` on the host (python3, standard library; Linux ``/proc``) before it
frees the host. A launch's processes are those whose environment holds ``ORCH_LAUNCH_ID=<launch id>``: the
agent (its start line sets it) and everything the job started (``startup.sh`` exports it, and children
inherit it), whatever process group or session they moved to. The sequence (docs/providers/ssh.md):

1. note the TCP ports those processes listen on (the rendezvous port, 29500 by default, among them);
2. SIGTERM them all (the agent passes it to the job, which may checkpoint, and writes its last status);
3. wait up to ``grace_s`` for them to exit, then SIGKILL what is left and wait again (a few seconds);
4. verify: no process of the launch remains (zombies excepted: they hold nothing) and none of the noted ports
   is still listening.

The program prints one JSON line and exits 0 only when the host is clean; the provider frees the host only
then, and otherwise keeps it reserved and marked unusable, so no other job is given it.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

__all__ = ["CLEAN_PROGRAM", "CleanResult", "clean_command", "parse_clean"]

CLEAN_PROGRAM = r'''
import json, os, signal, sys, time
launch, grace = sys.argv[1], float(sys.argv[2])
mark, me = ("ORCH_LAUNCH_ID=" + launch).encode(), os.getpid()

def ours():
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as fh:
                if mark not in fh.read().split(b"\0"):
                    continue
            with open("/proc/%s/stat" % d) as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    continue
        except (OSError, IndexError):
            continue
        found.append(int(d))
    return found

def listening(inodes=None):
    out = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "0A" and (inodes is None or f[9] in inodes):
                out.add(int(f[1].rsplit(":", 1)[1], 16))
    return out

def sockets(pids):
    inodes = set()
    for p in pids:
        try:
            fds = os.listdir("/proc/%d/fd" % p)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("/proc/%d/fd/%s" % (p, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    return inodes

def signal_all(pids, sig):
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass

def wait(seconds):
    end = time.monotonic() + seconds
    while ours() and time.monotonic() < end:
        time.sleep(0.1)
    return ours()

found = ours()
ports = listening(sockets(found))
signal_all(found, signal.SIGTERM)
left = wait(grace)
signal_all(left, signal.SIGKILL)
remaining = wait(5.0)
end = time.monotonic() + 5.0
busy = ports & listening()
while busy and time.monotonic() < end:
    time.sleep(0.1)
    busy = ports & listening()
print(json.dumps({"found": len(found), "killed": len(left), "remaining": remaining, "ports": sorted(ports),
                  "busy": sorted(busy)}))
sys.exit(0 if not remaining and not busy else 3)
'''


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What the clean found and did on the host."""

    found: int                      # processes of the launch when it began
    killed: int                     # of those, still there after the grace (SIGKILLed)
    remaining: tuple[int, ...]      # pids still there after SIGKILL: the host is not clean
    ports: tuple[int, ...]          # ports the launch listened on
    busy: tuple[int, ...]           # of those, still listening: the host is not clean

    @property
    def clean(self) -> bool:
        return not self.remaining and not self.busy

    def describe(self) -> str:
        text = f"processes of the launch stopped: {self.found} ({self.killed} needed SIGKILL)"
        if self.remaining:
            text += f"; still running after SIGKILL: pids {', '.join(map(str, self.remaining))}"
        if self.busy:
            text += f"; ports still in use: {', '.join(map(str, self.busy))}"
        return text


def clean_command(launch_id: str, grace_s: float) -> str:
    return f"python3 -c {shlex.quote(CLEAN_PROGRAM)} {shlex.quote(launch_id)} {grace_s:g}"


def parse_clean(stdout: str) -> CleanResult | None:
    """The program's JSON line, or None when it printed none (it could not run: no python3, no /proc)."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "found" in doc:
            return CleanResult(int(doc["found"]), int(doc["killed"]), tuple(doc["remaining"]), tuple(doc["ports"]),
                               tuple(doc["busy"]))
    return None
