#!/usr/bin/env python3
"""Probe orch as an attacker and a careless user would: hostile input and misuse, per class.

    python tests/bench/probe_hostile.py [--class NAME] [--verbose]

Every case runs in its own child process (a fresh temporary config and data directory, an address-space
limit of 3 GiB, a 30 s timeout) and is judged on what it printed and how it exited. Per class it prints:
cases tried, tracebacks (a Python traceback, an "internal error", or an exit code outside 0/1/2),
wrong outcomes (a secret echoed, bad input accepted, a second daemon admitted, ...), timeouts, and the
largest wall time and peak RSS of any case. Wall time includes the interpreter's start-up (~0.3 s).

Not a test: it asserts nothing and reports. Run it before and after a change to compare.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 30.0
ADDRESS_SPACE = 3 * 1024**3

# Distinctive fake secrets (none is a real credential; they only look like one).
AKIA = "AKIAQ7XAMPLEZZ4PROBE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYPROBEZZKEY"
GH = "ghp_Pr0beT0kenAbCdEfGhIjKlMnOpQrStUvWx12"
HF = "hf_PrObEtOkEnQwErTyUiOpAsDfGhJkLzXcVbNm"
SLACK = "xoxb-1234567890-0987654321-PrObEsLaCkToKeN"
PEM = "-----BEGIN OPENSSH PRIVATE KEY-----"
PASSWORD = "Pr0beHunter2Pw"
BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.cHJvYmU.c2lnbmF0dXJl"
SECRETS = (AKIA, AWS_SECRET, GH, HF, SLACK, PEM, PASSWORD, "eyJhbGciOiJIUzI1NiJ9")

BASE = """\
apiVersion: orch/v1
kind: Job
name: probe
resources:
  gpu: A100-80G
  count: 2
run:
  launcher: command
  command: python train.py
"""


@dataclass
class Result:
    rc: int
    out: str
    err: str
    seconds: float
    rss_mb: float
    timed_out: bool


@dataclass
class Case:
    cls: str
    name: str
    argv: list[str] | None = None                 # orch arguments; or:
    code: str | None = None                       # a Python snippet run with the repo on sys.path
    files: dict[str, str | bytes] = field(default_factory=dict)   # written under the case's directory
    setup: Callable[[Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    check: Callable[[Result], str | None] | None = None          # a "wrong outcome" description, or None


def orch(*args: str) -> list[str]:
    return list(args)


def _run(case: Case, work: Path) -> Result:
    for rel, content in case.files.items():
        p = work / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
    if case.setup:
        case.setup(work)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update({"XDG_CONFIG_HOME": str(work / "cfg"), "XDG_DATA_HOME": str(work / "data"),
                "XDG_CACHE_HOME": str(work / "cache"), "PYTHONPATH": str(ROOT), "COLUMNS": "100",
                **case.env})
    if case.argv is not None:
        argv = [sys.executable, "-m", "orchestrator", *case.argv]
    else:
        argv = [sys.executable, "-c", textwrap.dedent(case.code or "")]

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
        os.setsid()

    start = time.perf_counter()
    with open(work / ".out", "wb") as out, open(work / ".err", "wb") as err:
        proc = subprocess.Popen(argv, cwd=work, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                preexec_fn=limits)
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > TIMEOUT_S:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
    proc.returncode = 0  # reaped above; keep Popen from waiting again
    seconds = time.perf_counter() - start
    rc = os.waitstatus_to_exitcode(status)
    return Result(rc, (work / ".out").read_text(errors="replace"), (work / ".err").read_text(errors="replace"),
                  seconds, usage.ru_maxrss / 1024, timed_out)


def is_traceback(r: Result) -> bool:
    text = r.out + r.err
    return ("Traceback (most recent call last)" in text or "internal error" in text
            or (not r.timed_out and r.rc not in (0, 1, 2)))


# -- checks ------------------------------------------------------------------------------------------------

def refused(r: Result) -> str | None:
    return None if r.rc == 2 else f"accepted (exit {r.rc})"


def refused_quietly(*secrets: str) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        for s in secrets:
            if s in r.out or s in r.err:
                return f"echoed {s[:8]}..."
        return refused(r)
    return check


def not_echoed(*secrets: str) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        for s in secrets:
            if s in r.out or s in r.err:
                return f"echoed {s[:8]}..."
        return None
    return check


def failed_clearly(r: Result) -> str | None:
    """Exit 1 or 2 with a short message on stderr (``error: ...`` or ``PATH: ...``)."""
    if r.rc not in (1, 2):
        return f"exit {r.rc}"
    lines = r.err.strip().splitlines()
    return None if lines and len(lines) <= 5 and len(r.err) < 5000 else "no clear error line"


def says(text: str) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        return None if text in r.out else f"stdout lacks {text!r}"
    return check


def printed(text: str) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        return None if text in r.out or text in r.err else f"output lacks {text!r}"
    return check


def with_line(r: Result) -> str | None:
    """A manifest error with file:line."""
    import re

    if r.rc != 2:
        return f"exit {r.rc}"
    return None if re.search(r"\.ya?ml:\d+:\d+: ", r.err) else f"no file:line in {r.err.strip()[:80]!r}"


def valid_json(r: Result) -> str | None:
    import json

    try:
        json.loads(r.out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except ValueError as exc:
        return f"not JSON: {exc}"
    return None


def first_line_ok(r: Result) -> str | None:
    return None if r.out.strip() == "OK" else (r.out.strip() or r.err.strip())[-120:]


def manifest(extra: str = "", base: str = BASE) -> str:
    return base + extra


def replace(old: str, new: str) -> str:
    return BASE.replace(old, new)


# -- the cases ---------------------------------------------------------------------------------------------

_LOCK_SNIPPET = """
import os, sys
from pathlib import Path
from orchestrator.store import open_store
from orchestrator.store.leases import DaemonAlreadyRunningError, daemon_lock
real = Path("real/orch.db"); real.parent.mkdir()
first = open_store(f"sqlite:///{{real}}")
other = Path({other!r})
{make}
second = open_store(f"sqlite:///{{other}}")
with daemon_lock(first):
    try:
        with daemon_lock(second):
            print("BOTH")
    except DaemonAlreadyRunningError:
        print("OK")
"""


def _lock_case(name: str, other: str, make: str) -> Case:
    return Case("daemon-identity", name, code=_LOCK_SNIPPET.format(other=other, make=make), check=first_line_ok)


_OWNER_SNIPPET = """
import os, socket, subprocess, sys
code = ("import os, socket; os.getpid = lambda: 1; socket.gethostname = lambda: 'box'; "
        "from orchestrator.daemon.assembly import default_lease_owner; print(default_lease_owner())")
a = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, {env}))
b = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, {env}))
print("OK" if a.stdout.strip() != b.stdout.strip() and a.stdout.strip() else "SAME " + a.stdout.strip()
      + a.stderr[-200:])
"""


def identity_cases() -> list[Case]:
    return [
        _lock_case("symlink", "link.db", "os.symlink(real.resolve(), other)"),
        _lock_case("hardlink", "hard.db", "os.link(real, other)"),
        _lock_case("symlinked directory", "dirlink/orch.db", "os.symlink(real.parent.resolve(), 'dirlink')"),
        _lock_case("dot-dot path", "real/../real/orch.db", "pass"),
        Case("daemon-identity", "lease owner: two pid-1 containers", code=_OWNER_SNIPPET.format(env=""),
             check=first_line_ok),
        Case("daemon-identity", "lease owner: same ORCH_LEASE_OWNER",
             code=_OWNER_SNIPPET.format(env="ORCH_LEASE_OWNER='worker'"), check=first_line_ok),
    ]


def secret_cases() -> list[Case]:
    v = "m.yaml"
    cases = [
        ("price is a key id", replace("count: 2", f"count: 2\nmax_price_hr: '{AKIA}'"), AKIA),
        ("budget is a secret key", manifest(f"policies:\n  budget_usd: '{AWS_SECRET}'\n"), AWS_SECRET),
        ("checkpoint store with password", manifest(
            f"checkpoint:\n  path: /ckpt\n  store: https://admin:{PASSWORD}@minio.local/b\n"), PASSWORD),
        ("data source with password", manifest(
            f"data:\n  - source: ftp://svc:{PASSWORD}@files.local/x\n    path: /data\n"), PASSWORD),
        ("deadline is a GitHub token", manifest(f"policies:\n  deadline: {GH}\n"), GH),
        ("GPU is a private key line", replace("gpu: A100-80G", f"gpu: '{PEM}'"), PEM),
        ("region is a Slack token", manifest(f"regions:\n  allow: ['{SLACK}']\n"), SLACK),
        ("provider is an HF token", manifest(f"providers:\n  deny: [{HF}]\n"), HF),
        ("unknown field named like a key id", manifest(f"{AKIA}: 1\n"), AKIA),
        ("signal is a bearer token", manifest(
            f"checkpoint:\n  path: /c\n  store: s3://b/c\n  notify: {{signal: '{BEARER}'}}\n"), "eyJhbGciOiJIUzI1NiJ9"),
        ("env key is a token", manifest(f"env:\n  {GH}: x\n"), GH),
        ("interconnect is a secret key", manifest(f"resources:\n  gpu: A100-80G\n  interconnect: '{AWS_SECRET}'\n",
                                                  base=BASE.replace("resources:\n  gpu: A100-80G\n  count: 2\n", "")),
         AWS_SECRET),
        ("launcher is a token", BASE.replace("launcher: command", f"launcher: {GH}"), GH),
    ]
    out = [Case("secrets", name, orch("validate", v), files={v: text}, check=refused_quietly(secret))
           for name, text, secret in cases]
    out += [
        Case("secrets", "env value is an AWS key id", orch("validate", v),
             files={v: manifest(f"env:\n  AWS_KEY_ID: {AKIA}\n")}, check=refused_quietly(AKIA)),
        Case("secrets", "env value is a private key", orch("validate", v),
             files={v: manifest(f"env:\n  DEPLOY: \"{PEM}\\nMIIabc\"\n")}, check=refused_quietly(PEM)),
        Case("secrets", "env value is a Slack token", orch("validate", v),
             files={v: manifest(f"env:\n  NOTIFY: {SLACK}\n")}, check=refused_quietly(SLACK)),
        Case("secrets", "env value is a URL with a password", orch("validate", v),
             files={v: manifest(f"env:\n  DB: postgres://app:{PASSWORD}@db:5432/x\n")},
             check=refused_quietly(PASSWORD)),
        Case("secrets", "render with a token in env", orch("render", v),
             files={v: manifest(f"env:\n  HUB: {HF}\n")}, check=not_echoed(HF)),
        Case("secrets", "name with a trailing newline", orch("validate", v),
             files={v: BASE.replace("name: probe", 'name: "probe\\n"')}, check=refused),
        Case("secrets", "resume env with a trailing newline", orch("validate", v),
             files={v: manifest('checkpoint:\n  path: /c\n  store: s3://b/c\n  resume: {env: "RESUME\\n"}\n')},
             check=refused),
        Case("secrets", "quote --gpu key id", orch("quote", "--gpu", AKIA), check=refused_quietly(AKIA)),
        Case("secrets", "quote --provider token", orch("quote", "--provider", GH), check=refused_quietly(GH)),
        Case("secrets", "quote --region token", orch("quote", "--region", f"x{SLACK}/"),
             check=refused_quietly(SLACK)),
        Case("secrets", "db current with a password URL", orch("db", "current", "--url",
                                                               f"postgresql://u:{PASSWORD}@127.0.0.1:1/x"),
             check=not_echoed(PASSWORD)),
        Case("secrets", "simulate --work is a token", orch("simulate", "--traces", "t.json", "--work", GH),
             files={"t.json": '{"metadata": {"gap_seconds": 600}, "data": [1, 1, 0]}'}, check=refused_quietly(GH)),
        Case("secrets", "simulate --policy is a key id", orch("simulate", "--traces", "t.json", "--policy", AKIA),
             files={"t.json": '{"metadata": {"gap_seconds": 600}, "data": [1, 1, 0]}'},
             check=refused_quietly(AKIA)),
        Case("secrets", "trace gap is a token", orch("simulate", "--traces", "t.json"),
             files={"t.json": f'{{"metadata": {{"gap_seconds": "{GH}"}}, "data": [1]}}'},
             check=refused_quietly(GH)),
        Case("secrets", "config owner is a key id", orch("providers"),
             files={"cfg/orch/config.yaml": f"owner: '{AKIA}'\n"}, check=not_echoed(AKIA)),
    ]
    return out


def _fifo(work: Path) -> None:
    os.mkfifo(work / "fifo.yaml")


def bounded_cases() -> list[Case]:
    big_gpu = "Z" * 1_000_000
    unknown_keys = "".join(f"k{i:05d}x: 1\n" for i in range(20_000))
    many_docs = "---\n" * 200_000
    deep_flow = "x: " + "[" * 5000 + "]" * 5000 + "\n"
    deep_json = "[" * 200_000 + "]" * 200_000
    return [
        Case("bounded", "1 MB GPU name", orch("validate", "m.yaml"),
             files={"m.yaml": replace("gpu: A100-80G", f"gpu: {big_gpu}")}, check=refused),
        Case("bounded", "20k unknown fields", orch("validate", "m.yaml"), files={"m.yaml": manifest(unknown_keys)},
             check=refused),
        Case("bounded", "20k unknown GPU names", orch("validate", "m.yaml"),
             files={"m.yaml": replace("gpu: A100-80G", "gpu: [" + ", ".join(f"Q{i}X" for i in range(20_000)) + "]")},
             check=refused),
        Case("bounded", "quote --gpu 100 kB", orch("quote", "--gpu", "Q" * 100_000), check=refused),
        Case("bounded", "quote 300 --gpu names", orch("quote", *[a for i in range(300) for a in ("-g", f"W{i}" * 50)]),
             check=refused),
        Case("bounded", "quote --provider 100 kB", orch("quote", "--provider", "p" * 100_000), check=refused),
        Case("bounded", "manifest is /dev/zero", orch("validate", "/dev/zero"), check=failed_clearly),
        Case("bounded", "manifest is a FIFO", orch("validate", "fifo.yaml"), setup=_fifo, check=failed_clearly),
        Case("bounded", "200k empty documents", orch("validate", "m.yaml"), files={"m.yaml": many_docs},
             check=failed_clearly),
        Case("bounded", "deep flow nesting", orch("validate", "m.yaml"), files={"m.yaml": manifest(deep_flow)},
             check=with_line),
        Case("bounded", "deep block nesting", orch("validate", "m.yaml"),
             files={"m.yaml": manifest("".join("  " * i + f"k{i}:\n" for i in range(1000)))}, check=with_line),
        Case("bounded", "trace with a tiny gap", orch("simulate", "--traces", "t.json", "--no-optimum", "--starts", "1",
                                                      "--policy", "greedy"),
             files={"t.json": '{"metadata": {"gap_seconds": 1e-9}, "data": [1, 0, 1]}'}, check=failed_clearly),
        Case("bounded", "trace nested 200k deep", orch("simulate", "--traces", "t.json"),
             files={"t.json": deep_json}, check=failed_clearly),
        Case("bounded", "trace is /dev/zero", orch("simulate", "--traces", "/dev/zero"), check=failed_clearly),
        Case("bounded", "trace is a FIFO", orch("simulate", "--traces", "fifo.yaml"), setup=_fifo,
             check=failed_clearly),
        Case("bounded", "trace of 3M ticks", orch("simulate", "--traces", "t.json", "--no-optimum", "--starts", "1",
                                                  "--policy", "greedy"),
             files={"t.json": '{"metadata": {"gap_seconds": 60}, "data": [' + ",".join(["1"] * 3_000_000) + "]}"},
             check=failed_clearly),
    ]


def numeric_cases() -> list[Case]:
    v = "m.yaml"
    bad_manifests = [
        ("deadline year 1 east of UTC", manifest("policies:\n  deadline: '0001-01-01T01:00:00+03:00'\n"), with_line),
        ("deadline year 9999 west of UTC", manifest("policies:\n  deadline: '9999-12-31T22:00:00-04:00'\n"),
         with_line),
        ("YAML timestamp year 1", manifest("policies:\n  deadline: 0001-01-01 00:30:00 +02:00\n"), with_line),
        ("month 13", manifest("policies:\n  deadline: '2025-13-01T00:00:00Z'\n"), with_line),
        (".inf VRAM", replace("count: 2", "count: 2\n  min_vram_gb: .inf"), with_line),
        (".inf hours", manifest("policies:\n  estimated_hours: .inf\n"), with_line),
        (".nan disk", replace("count: 2", "count: 2\n  disk_gb: .nan"), with_line),
        ("-.inf util", manifest("policies:\n  idle: {min_gpu_util_pct: -.inf}\n"), with_line),
        ("octal count 010", replace("count: 2", "count: 010"), with_line),
        ("sexagesimal nodes 1:04", replace("count: 2", "count: 2\n  nodes: 1:04"), with_line),
        ("sexagesimal window 2:15", manifest("policies:\n  idle: {window: 2:15}\n"), with_line),
        ("yes as a max_relaunches", manifest("policies:\n  max_relaunches: on\n"), with_line),
        ("control char in command", BASE.replace("python train.py", '"python train.py\\x1b[2J"'), with_line),
        ("newline in image", manifest('image: "pytorch/pytorch\\nrm -rf /"\n'), with_line),
        ("NUL in script", BASE.replace("launcher: command\n  command: python train.py",
                                       'launcher: torchrun\n  script: "train\\0.py"'), with_line),
        ("tab in checkpoint path", manifest('checkpoint:\n  path: "/c\\tx"\n  store: s3://b/c\n'), with_line),
        ("signed hex count +0x10", replace("count: 2", "count: +0x10"), with_line),
    ]
    out = [Case("numeric-time", name, orch("validate", v), files={v: text}, check=check)
           for name, text, check in bad_manifests]
    inf_json = manifest("policies:\n  estimated_hours: 1e400\n")
    out += [
        Case("numeric-time", "env value 'off': text or refused", orch("render", v, "--part", "script"),
             files={v: manifest("env:\n  SWITCH: off\n")},
             check=lambda r: None if r.rc == 2 and "ambiguous" in r.err else says("SWITCH=off")(r)),
        Case("numeric-time", "plan --json with 1e400 hours", orch("plan", v, "--json"), files={v: inf_json},
             check=lambda r: None if r.rc == 2 else valid_json(r)),
        Case("numeric-time", "300-char file name", orch("validate", "a" * 300 + ".yaml"), check=failed_clearly),
        Case("numeric-time", "300-char render name", orch("render", "b" * 300 + ".yaml"), check=failed_clearly),
        Case("numeric-time", "300-char trace name", orch("simulate", "--traces", "c" * 300 + ".json"),
             check=failed_clearly),
        Case("numeric-time", "quote --max-price nan", orch("quote", "--max-price", "nan"), check=refused),
        Case("numeric-time", "quote --min-vram inf", orch("quote", "--min-vram", "inf", "--json"), check=refused),
        Case("numeric-time", "events --poll nan", orch("events", "--follow", "--poll", "nan", "--max-wait", "0"),
             check=refused),
        Case("numeric-time", "events --max-wait inf", orch("events", "--follow", "--max-wait", "inf"),
             check=refused),
        Case("numeric-time", "down --poll nan", orch("down", "x", "--yes", "--poll", "nan"), check=refused),
        Case("numeric-time", "down --timeout inf", orch("down", "x", "--yes", "--timeout", "inf"), check=refused),
        Case("numeric-time", "daemon --interval nan", orch("daemon", "--interval", "nan"), check=refused),
        Case("numeric-time", "daemon --interval inf", orch("daemon", "--interval", "inf"), check=refused),
        Case("numeric-time", "daemon --metrics-port 70000", orch("daemon", "--metrics-port", "70000"),
             check=refused),
        Case("numeric-time", "daemon --metrics-port -5", orch("daemon", "--metrics-port", "-5"), check=refused),
        Case("numeric-time", "daemon unbindable metrics host", orch("daemon", "--metrics-port", "0", "--metrics-host",
                                                                    "192.0.2.77"), check=failed_clearly),
        Case("numeric-time", "simulate --spot-price nan", orch("simulate", "--traces", "t.json", "--spot-price", "nan"),
             files={"t.json": '{"metadata": {"gap_seconds": 600}, "data": [1, 1, 0]}'}, check=refused),
        Case("numeric-time", "simulate --work 1e400h", orch("simulate", "--traces", "t.json", "--work", "1e400h"),
             files={"t.json": '{"metadata": {"gap_seconds": 600}, "data": [1, 1, 0]}'}, check=refused),
        Case("numeric-time", "ORCH_LEASE_TTL_S=nan", orch("tick"), env={"ORCH_LEASE_TTL_S": "nan"},
             check=failed_clearly),
    ]
    return out


_STORE_MODE = """
import os, stat
from pathlib import Path
os.umask(0o022)
from orchestrator.store import open_store
d = Path("data/orch"); db = d / "orch.db"
open_store(f"sqlite:///{db}").close()
modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in [d, *d.iterdir()]}
bad = {k: m for k, m in modes.items() if (int(m, 8) & 0o077)}
print("OK" if not bad else f"modes {bad}")
"""

_SECRETS_MODE = """
import os, stat
from pathlib import Path
os.umask(0o022)
seen = []
real_chmod = os.chmod
def spy(path, mode, *a, **k):
    p = Path(path)
    if p.exists():
        seen.append(oct(stat.S_IMODE(p.stat().st_mode)))
    return real_chmod(path, mode, *a, **k)
os.chmod = spy
from providers.ssh.local import LocalTransport
t = LocalTransport(Path("node").resolve())
t.put(b"export TOKEN=x\\n", "work/secrets.env", 0o600)
final = oct(stat.S_IMODE(Path("node/work/secrets.env").stat().st_mode))
wide = [m for m in seen if int(m, 8) & 0o077]
print("OK" if final == "0o600" and not wide else f"created {wide} then {final}")
"""


def mode_cases() -> list[Case]:
    return [
        Case("file-modes", "store file and directory", code=_STORE_MODE, check=first_line_ok),
        Case("file-modes", "node secrets file", code=_SECRETS_MODE, check=first_line_ok),
    ]


def fuzz_cases(n: int, seed: int = 16) -> list[Case]:
    rng = random.Random(seed)
    commands = [["quote"], ["validate"], ["plan"], ["render"], ["schema"], ["simulate"], ["status"], ["events"],
                ["db", "current"], ["providers"], ["down"], ["tick"]]
    atoms = ["--json", "--gpu", "--count", "-c", "--nodes", "--max-price", "--min-vram", "--limit", "--poll",
             "--max-wait", "--traces", "--work", "--deadline", "--node-rank", "--part", "--region", "--provider",
             "--url", "--timeout", "--starts", "--zones", "-1", "0", "nan", "inf", "-inf", "1e309", "9" * 40, "",
             "m.yaml", "t.json", "/dev/null", "/", "A100", "x" * 300, "\x1b[31m", "--", "-", "é", "a,b,,",
             "sqlite:////nonexistent/dir/x.db", "postgresql://u:p@127.0.0.1:1/x", "us-*", "[", "*", "--help"]
    out = []
    for i in range(n):
        cmd = rng.choice(commands)
        args = [rng.choice(atoms) for _ in range(rng.randint(0, 5))]
        out.append(Case("cli-fuzz", f"#{i} {' '.join(cmd + args)[:60]!r}", orch(*cmd, *args),
                        files={"m.yaml": BASE, "t.json": '{"metadata": {"gap_seconds": 600}, "data": [1, 0, 1]}'}))
    return out


CAP = 1024 * 1024   # the manifest cap (orchestrator.inputs.yamlread.MAX_BYTES)


def _fill(unit: Callable[[int], str], head: str = BASE, tail: str = "") -> str:
    parts, size, i = [head], len(head) + len(tail), 0
    while size + len(unit(i).encode()) <= CAP - 64:
        parts.append(unit(i))
        size += len(unit(i).encode())
        i += 1
    return "".join(parts) + tail


def _slow(limit_s: float) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        return f"over {limit_s:g} s" if r.seconds > limit_s else None
    return check


def at_cap_cases() -> list[Case]:
    """Inputs just under the caps, in the shapes that cost most: each should answer in under 2 s."""
    shapes = {
        "unknown keys": _fill(lambda i: f"k{i:07d}x: 1\n"),
        "unknown GPU names": _fill(lambda i: f", G{i}Z", head=BASE.replace("gpu: A100-80G", "gpu: [G"), tail="]\n"),
        "one huge GPU name": BASE.replace("gpu: A100-80G", "gpu: " + "A100" * ((CAP - 300) // 4)),
        "long flow list": _fill(lambda i: "1,", head=BASE + "setup: [", tail="1]\n"),
        "many documents": _fill(lambda i: "---\n" + BASE.replace("name: probe", f"name: j{i}")),
        "huge env": _fill(lambda i: f"  V{i}: {'v' * 60}\n", head=BASE + "env:\n"),
        "credentials everywhere": _fill(lambda i: f"  - ghp_{i:036d}\n", head=BASE + "setup:\n"),
        "alias fan-out": BASE + "x0: &a0 [1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
            f"x{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]\n" for i in range(1, 40)),
    }
    cases = [Case("at-cap", f"manifest: {name}", orch("validate", "m.yaml"), files={"m.yaml": text},
                  check=_slow(2.0)) for name, text in shapes.items()]
    ticks = ",".join(["1,0,1,1"] * 250_000)
    cases += [
        Case("at-cap", "quote --gpu of 100 kB", orch("quote", "--gpu", "A100" * 25_000), check=_slow(2.0)),
        Case("at-cap", "quote --gpu x 2000 names", orch("quote", *[a for i in range(2000) for a in ("-g", f"A{i}0")]),
             check=_slow(2.0)),
        Case("at-cap", "trace of 1,000,000 ticks", orch("simulate", "--traces", "t.json", "--work", "40h",
                                                         "--deadline", "55h", "--starts", "1", "--policy", "greedy",
                                                         "--no-optimum", "--workers", "1"),
             files={"t.json": '{"metadata": {"gap_seconds": 30}, "data": [' + ticks + "]}"}, check=_slow(10.0)),
    ]
    return cases


CLASSES: dict[str, Callable[[], list[Case]]] = {
    "at-cap": at_cap_cases,
    "daemon-identity": identity_cases,
    "secrets": secret_cases,
    "bounded": bounded_cases,
    "numeric-time": numeric_cases,
    "file-modes": mode_cases,
    "cli-fuzz": lambda: fuzz_cases(60),
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--class", dest="only", choices=sorted(CLASSES))
    parser.add_argument("--verbose", "-v", action="store_true")
    args = parser.parse_args()
    rows = []
    for cls, make in CLASSES.items():
        if args.only and cls != args.only:
            continue
        tried = tracebacks = wrong = timeouts = 0
        max_s = max_mb = 0.0
        for case in make():
            work = Path(tempfile.mkdtemp(prefix="orch-probe-"))
            try:
                r = _run(case, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            tried += 1
            tb = is_traceback(r)
            verdict = None if r.timed_out or tb else (case.check(r) if case.check else None)
            tracebacks += tb
            timeouts += r.timed_out
            wrong += verdict is not None
            max_s, max_mb = max(max_s, r.seconds), max(max_mb, r.rss_mb)
            if args.verbose and (tb or r.timed_out or verdict or r.seconds > 2):
                what = ("TIMEOUT" if r.timed_out else "TRACEBACK" if tb else f"WRONG: {verdict}" if verdict
                        else "slow")
                tail = (r.err.strip().splitlines() or [""])[-1][:150]
                print(f"  [{cls}] {case.name}: {what} (exit {r.rc}, {r.seconds:.1f}s, {r.rss_mb:.0f} MB) {tail}")
        rows.append((cls, tried, tracebacks, wrong, timeouts, max_s, max_mb))
    print(f"{'class':<16}{'cases':>6}{'tracebacks':>11}{'wrong':>7}{'timeouts':>9}{'max s':>8}{'max MB':>8}")
    for cls, tried, tb, wrong, to, s, mb in rows:
        print(f"{cls:<16}{tried:>6}{tb:>11}{wrong:>7}{to:>9}{s:>8.2f}{mb:>8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
