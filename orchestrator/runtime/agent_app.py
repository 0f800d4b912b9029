"""The node agent as orch ships it: one zipapp, ``orch_agent.pyz``, built in memory from the agent's package
(``templates/agent/orch_agent/``, standard library only) and run on the node with ``python3 orch_agent.pyz``.

One file, so the node runs one thing: one upload, one tar member, one name in the process table, and nothing
unpacked beside the job's code (which the agent unpacks into the same work dir). Deterministic: equal sources
give equal bytes (members sorted, fixed timestamps and modes, stored uncompressed: the boot payload is gzip'd
whole, which compresses across the modules better than zip's per-member deflate).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.runtime.render import templates_dir

__all__ = ["AGENT_PACKAGE", "AgentModule", "agent_dir", "agent_modules", "agent_zipapp", "zipapp"]

AGENT_PACKAGE = "orch_agent"
#: The zip's first bytes: the node may run the file itself (it is shipped 0755) as well as ``python3 FILE``.
_SHEBANG = b"#!/usr/bin/env python3\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)   # the earliest time a zip member can hold
_UNIX = 3                        # a zip member's "made by" system (zipfile's default differs on Windows)


@dataclass(frozen=True)
class AgentModule:
    """One member of the zipapp: its name in the zip and its source."""

    name: str
    source: bytes


def agent_dir() -> Path:
    """The agent's package in orch's own (an installed wheel has it too)."""
    return templates_dir() / "agent" / AGENT_PACKAGE


def agent_modules() -> tuple[AgentModule, ...]:
    """The zipapp's members, sorted: the package's modules under ``orch_agent/``, and its ``__main__.py`` at the
    zip's root (a zipapp runs the root's; it imports the package by name, the zip being first on the path)."""
    members = [AgentModule("__main__.py" if p.name == "__main__.py" else f"{AGENT_PACKAGE}/{p.name}", p.read_bytes())
               for p in agent_dir().glob("*.py")]
    return tuple(sorted(members, key=lambda m: m.name))


def zipapp(modules: Iterable[AgentModule]) -> bytes:
    """A runnable zip of ``modules`` (shebang first): the same modules give the same bytes."""
    raw = io.BytesIO()
    raw.write(_SHEBANG)
    with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED) as zf:
        for module in sorted(modules, key=lambda m: m.name):
            info = zipfile.ZipInfo(module.name, date_time=_EPOCH)
            info.create_system = _UNIX
            info.external_attr = 0o644 << 16
            zf.writestr(info, module.source)
    return raw.getvalue()


def agent_zipapp(transform: Callable[[bytes], bytes] | None = None) -> bytes:
    """The agent's zipapp. ``transform``: applied to each module's source (the boot script's compaction)."""
    modules = agent_modules()
    if transform is not None:
        modules = tuple(AgentModule(m.name, transform(m.source)) for m in modules)
    return zipapp(modules)
