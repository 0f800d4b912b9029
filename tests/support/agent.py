"""The node agent's package (orchestrator/runtime/templates/agent/orch_agent), loaded from its folder for tests by
its own name, ``orch_agent``, as the node imports it from the zipapp (it imports nothing of orch's, and orch
never imports it: it only ships it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from orchestrator.runtime.agent_app import AGENT_PACKAGE, agent_dir

AGENT_DIR: Path = agent_dir()


def load_agent() -> ModuleType:
    """The agent's package, loaded once per process (later calls return the same module)."""
    loaded = sys.modules.get(AGENT_PACKAGE)
    if loaded is not None:
        assert Path(loaded.__file__ or "").parent == AGENT_DIR, f"another {AGENT_PACKAGE} is imported: {loaded}"
        return loaded
    spec = importlib.util.spec_from_file_location(AGENT_PACKAGE, AGENT_DIR / "__init__.py",
                                                  submodule_search_locations=[str(AGENT_DIR)])
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[AGENT_PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[AGENT_PACKAGE]
        raise
    return module
