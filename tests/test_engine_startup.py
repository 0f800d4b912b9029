"""The startup-script seam: every launch carries the script its machine boots with, rendered from the job's
manifest for that node (launch id, node rank), through the engine as ``build_service`` assembles it."""

from __future__ import annotations

from dataclasses import replace

from orchestrator.engine.hooks import StartupScriptError
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.runtime.boot import boot_files
from orchestrator.store import repo
from providers.base import Instance, LaunchSpec
from tests.daemon_world import LAMBDA_A100, add_job, running_fakes, service_for
from tests.fakes.memory_provider import MemoryProvider
from tests.fakes.memory_store import MemoryStore
from tests.test_engine import CATALOG, Clock, engine, spec


class RecordingProvider(MemoryProvider):
    """The in-memory cloud, keeping every launch request it was sent."""

    def __init__(self, name: str, offers: list) -> None:  # type: ignore[type-arg]
        super().__init__(name, offers)
        self.specs: list[LaunchSpec] = []

    def launch(self, spec: LaunchSpec) -> Instance:
        self.specs.append(spec)
        return super().launch(spec)


def test_each_node_boots_with_its_rendered_startup_script() -> None:
    clock, store = Clock(), MemoryStore()
    aws = RecordingProvider("aws", CATALOG)
    rec = engine(store, {"aws": aws}, CATALOG, clock)
    job = store.add_job(spec(plan=replace(spec().plan, nodes=2)), clock())
    rec.tick()
    attempts = {a.launch_id: a for a in store.attempts_for_job(job.id)}
    assert len(aws.specs) == 2
    for sent in aws.specs:
        # The boot script installs the agent and the job's startup.sh (rendered for this node) and starts it.
        assert sent.startup_script.startswith("#!/usr/bin/env bash")
        start = "setsid nohup python3 orch_agent.py --config agent.json > agent.log 2>&1 < /dev/null &"
        assert start in sent.startup_script.splitlines()
        files = boot_files(sent.startup_script)
        assert sorted(files) == ["agent.json", "orch_agent.py", "startup.sh"]
        script = files["startup.sh"].decode()
        assert "python train.py" in script
        assert f"export ORCH_LAUNCH_ID={sent.launch_id}" in script.splitlines()
        assert f"export ORCH_NODE_RANK={attempts[sent.launch_id].node_rank}" in script.splitlines()


def test_a_script_that_cannot_be_rendered_is_reported_and_the_machine_boots_without_one() -> None:
    class Broken:
        def render(self, job: JobRecord, attempt: AttemptRecord) -> str:
            raise StartupScriptError("data[0].source: unsupported store")

    clock, store = Clock(), MemoryStore()
    aws = RecordingProvider("aws", CATALOG)
    rec = engine(store, {"aws": aws}, CATALOG, clock, startup=Broken())
    store.add_job(spec(), clock())
    report = rec.tick()
    assert [s.startup_script for s in aws.specs] == [""] and report.launched == 1
    assert "startup-script" in store.kinds() and any("unsupported store" in e for e in report.errors)


def test_a_launch_through_the_lambda_api_carries_the_script_as_user_data(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with running_fakes() as fakes:
        service = service_for(fakes, f"sqlite:///{tmp_path / 'orch.db'}", catalog=[LAMBDA_A100])
        try:
            job = add_job(service.store, "train", providers=["lambda"], market="on-demand")
            service.reconciler.tick()
            [sent] = fakes.lam.launches()
            assert service.store is not None
            with service.store.transaction() as tx:
                [attempt] = repo.list_attempts(tx, job)
            user_data = boot_files(str((sent.body or {}).get("user_data", "")))["startup.sh"].decode()
            assert f"export ORCH_LAUNCH_ID={attempt.launch_id}" in user_data.splitlines()
        finally:
            service.close()
