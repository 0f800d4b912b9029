"""A built wheel, installed in a fresh virtual environment, runs orch from another directory.

The wheel is built from this checkout without build isolation (offline), installed with ``--no-deps`` into a
new venv whose dependencies come from this test environment's site-packages (a ``.pth`` line: no network, and
the checkout itself is NOT on that venv's path), then each command runs with the working directory and every
orch directory outside the checkout. This is what a ``pip install orch`` user gets: the on-node templates and
the migrations must be inside the package.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from orchestrator.runtime.agent_app import agent_dir, agent_zipapp

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = """\
apiVersion: orch/v1
kind: Job
name: wheel-check
resources: {gpu: A100-80G, count: 4}
market: spot
run: {launcher: torchrun, script: train.py}
checkpoint: {path: /ckpt, store: s3://bucket/wheel-check}
policies: {estimated_hours: 2}
"""


def _outside_env() -> dict[str, str]:
    """This environment without PYTHON* (PYTHONPATH would put a checkout on the installed venv's path)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fresh venv's bin/ with the wheel installed (its `orch` console script included)."""
    base = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(base / "dist"), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = (base / "dist").glob("orch-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", purelib], capture_output=True, text=True,
                               check=True).stdout.strip())
    # Dependencies from this environment; a path line in a .pth does not run that directory's own .pth files,
    # so the editable install of the checkout stays out.
    (site / "zz_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                           "--no-deps", "--no-index", "-q", str(wheel)], capture_output=True, text=True, timeout=300,
                          env=_outside_env())
    assert done.returncode == 0, done.stderr[-2000:]
    return venv / "bin"


def _orch(bin_dir: Path, work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "XDG_", "PYTHON"))}
    env.update(XDG_CONFIG_HOME=str(work / "config"), XDG_DATA_HOME=str(work / "data"), HOME=str(work),
               ORCH_DATABASE_URL=f"sqlite:///{work / 'data' / 'orch.db'}", COLUMNS="100")
    return subprocess.run([str(bin_dir / "orch"), *args], cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_installed_wheel_runs_orch_from_another_directory(installed: Path, tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "job.yaml").write_text(MANIFEST)
    where = subprocess.run([str(installed / "python"), "-c", "import orchestrator, sys; print(orchestrator.__file__)"],
                           cwd=work, env=_outside_env(), capture_output=True, text=True, check=True).stdout.strip()
    assert str(ROOT) not in where and "site-packages" in where, where

    quote = _orch(installed, work, "quote", "--gpu", "A100-80G", "--count", "4")
    assert quote.returncode == 0 and "A100" in quote.stdout, quote.stderr
    render = _orch(installed, work, "render", "job.yaml", "--part", "script")
    assert render.returncode == 0 and render.stdout.startswith("#!"), render.stderr
    upgrade = _orch(installed, work, "db", "upgrade")
    assert upgrade.returncode == 0, upgrade.stderr
    current = _orch(installed, work, "db", "current", "--json")
    assert current.returncode == 0 and '"current"' in current.stdout, current.stderr
    validate = _orch(installed, work, "validate", "job.yaml")
    assert validate.returncode == 0, validate.stderr
    plan = _orch(installed, work, "plan", "job.yaml")
    assert plan.returncode == 0 and "wheel-check" in plan.stdout, plan.stderr
    status = _orch(installed, work, "status")
    assert status.returncode == 0, status.stderr
    for done in (quote, render, upgrade, current, validate, plan, status):
        assert "Traceback" not in done.stderr


def test_the_wheel_carries_the_templates_and_the_migrations(installed: Path) -> None:
    site = installed.parent / "lib"
    names = {p.relative_to(site).as_posix().split("site-packages/", 1)[-1] for p in site.rglob("*") if p.is_file()}
    # Every module of the agent's package: the installed orch builds the node's zipapp from them.
    agent = sorted(f"orchestrator/runtime/templates/agent/orch_agent/{p.name}" for p in agent_dir().glob("*.py"))
    assert len(agent) > 10 and "orchestrator/runtime/templates/agent/orch_agent/__main__.py" in agent
    for needed in ("orchestrator/runtime/templates/startup.sh.tmpl", *agent,
                   "orchestrator/store/migrations/env.py", "orchestrator/store/migrations/alembic.ini",
                   "orchestrator/store/migrations/versions/0001_initial.py"):
        assert needed in names, needed
    # The installed orch ships the node the very zipapp this checkout builds (same bytes: nothing in it depends
    # on where orch is installed).
    build = ("import sys; from orchestrator.runtime import agent_app as a; "
             "sys.stdout.buffer.write(str(a.agent_dir()).encode() + b'\\n' + a.agent_zipapp())")
    out = subprocess.run([str(installed / "python"), "-c", build], cwd=installed, env=_outside_env(),
                         capture_output=True, check=True, timeout=120).stdout
    where, shipped = out.split(b"\n", 1)
    assert str(ROOT).encode() not in where and b"site-packages" in where, where
    assert shipped == agent_zipapp()
