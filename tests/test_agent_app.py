"""The agent as orch ships it (orchestrator/runtime/agent_app.py): one zipapp built from the agent's package, the
same bytes for the same sources, runnable by ``python3 orch_agent.pyz`` with nothing else on the path, in
grammar any python3 of 3.7 or newer reads (as the single-file agent before it)."""

from __future__ import annotations

import ast
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from orchestrator.runtime import boot
from orchestrator.runtime.agent_app import AgentModule, agent_modules, agent_zipapp, zipapp
from orchestrator.runtime.status import JobState, parse_status
from tests.support.agent import AGENT_DIR

#: The oldest python3 the agent runs on: its modules import ``annotations`` from __future__ (3.7).
OLDEST = (3, 7)


def _members(app: bytes) -> list[zipfile.ZipInfo]:
    assert app.startswith(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(io.BytesIO(app)) as zf:
        assert zf.testzip() is None
        return zf.infolist()


def test_the_zipapp_holds_the_package_and_its_main_at_the_root() -> None:
    names = [m.filename for m in _members(agent_zipapp())]
    package = sorted(f"orch_agent/{p.name}" for p in AGENT_DIR.glob("*.py") if p.name != "__main__.py")
    assert names == sorted(["__main__.py", *package]) and "orch_agent/__init__.py" in names
    with zipfile.ZipFile(io.BytesIO(agent_zipapp())) as zf:
        assert zf.read("orch_agent/store.py") == (AGENT_DIR / "store.py").read_bytes()     # verbatim over SSH
        assert zf.read("__main__.py") == (AGENT_DIR / "__main__.py").read_bytes()


def test_equal_sources_give_equal_bytes_whatever_the_files_times() -> None:
    a = [AgentModule("orch_agent/b.py", b"B = 2\n"), AgentModule("__main__.py", b"import orch_agent\n")]
    first = zipapp(a)
    assert zipapp(list(reversed(a))) == first           # order given does not matter: members are sorted
    assert zipapp([AgentModule("orch_agent/b.py", b"B = 3\n"), a[1]]) != first
    for m in _members(first):
        assert m.date_time == (1980, 1, 1, 0, 0, 0) and m.compress_type == zipfile.ZIP_STORED
        assert m.create_system == 3 and m.external_attr == 0o644 << 16
    assert agent_zipapp() == agent_zipapp()
    assert agent_zipapp(boot._compact) == boot.compacted_agent()


@pytest.mark.parametrize("compacted", [False, True], ids=["as-shipped-over-ssh", "as-in-the-boot-script"])
def test_the_zipapp_runs_alone_from_any_directory(tmp_path: Path, compacted: bool) -> None:
    """``python3 -I orch_agent.pyz``: no PYTHONPATH, no site directory, no orch: the zip is the whole agent."""
    app = tmp_path / "node" / "orch_agent.pyz"
    app.parent.mkdir()
    app.write_bytes(boot.compacted_agent() if compacted else agent_zipapp())
    cfg = {"job_name": "t", "status_path": "status.json", "command": ["true"], "job_log": "job.log",
           "window": 3, "cloud": "none", "metadata": {}, "checkpoint": None}
    (tmp_path / "agent.json").write_text(json.dumps(cfg))
    out = subprocess.run([sys.executable, "-I", str(app), "--config", "agent.json", "--once", "--no-job"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60, env={"PATH": "/nonexistent"})
    assert out.returncode == 0, out.stderr
    status = parse_status((tmp_path / "status.json").read_bytes())
    assert status.job.state is JobState.PENDING and status.gpu_error == "nvidia-smi not found"


def test_every_module_reads_as_python_3_7_shipped_or_compacted() -> None:
    """ast's feature_version refuses the grammar newer Pythons added (walrus, positional-only parameters,
    ``match``...): neither the package nor its compaction (ast.unparse) may use it."""
    modules = agent_modules()
    assert len(modules) > 10
    for m in modules:
        for text in (m.source, boot._compact(m.source)):
            ast.parse(text, filename=m.name, feature_version=OLDEST)
    with pytest.raises(SyntaxError):
        ast.parse("if (n := 1):\n    pass\n", feature_version=OLDEST)       # the check does refuse newer grammar
