"""The engine's default StartupRenderer: the node's startup script, rendered from the job's manifest.

Given to the provider as the machine's user data (UserData, startup-script, customData, user_data, onstart)
when orch does not start jobs over SSH. The script carries the launch id (``ORCH_LAUNCH_ID``), the node
rank and, for a gang's rank > 0, node 0's address when the engine knows it.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.engine.hooks import StartupScriptError
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.runtime.from_manifest import render_input_for
from orchestrator.runtime.node_facts import NodeSettings, launch_facts, node_settings_for
from orchestrator.runtime.objectstore import UnsupportedStoreError
from orchestrator.runtime.render import render_node
from orchestrator.runtime.render_input import RenderInputError

__all__ = ["ManifestStartupRenderer"]


class ManifestStartupRenderer:
    def __init__(self, node_settings: Mapping[str, NodeSettings] | None = None) -> None:
        self.node_settings = dict(node_settings or {})

    def render(self, job: JobRecord, attempt: AttemptRecord) -> str:
        node = node_settings_for(self.node_settings, attempt.offer.provider, attempt.instance_id)
        facts = launch_facts(job, attempt, node, self.node_settings.get(attempt.master_key or ""))
        try:
            return render_node(render_input_for(job.manifest, facts)).script
        except (RenderInputError, UnsupportedStoreError) as exc:
            raise StartupScriptError(str(exc)) from None
