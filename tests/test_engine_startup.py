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
        # sh hands the boot program to python3: nothing else is needed on the machine.
        assert sent.startup_script.startswith("#!/bin/sh\n")
        assert "exec python3 - <<'ORCH_BOOT'" in sent.startup_script.splitlines()
        files = boot_files(sent.startup_script)
        assert sorted(files) == ["agent.json", "orch_agent.pyz", "startup.sh"]
        script = files["startup.sh"].decode()
        assert "python train.py" in script
        assert f"export ORCH_LAUNCH_ID={sent.launch_id}" in script.splitlines()
        assert f"export ORCH_NODE_RANK={attempts[sent.launch_id].node_rank}" in script.splitlines()


def test_a_script_that_cannot_be_rendered_launches_nothing_and_the_job_waits() -> None:
    """Nothing is launched that cannot start: no cloud call, the attempt ended, an event, the job PENDING."""
    class Broken:
        def render(self, job: JobRecord, attempt: AttemptRecord) -> str:
            raise StartupScriptError("data[0].source: unsupported store")

    clock, store = Clock(), MemoryStore()
    aws = RecordingProvider("aws", CATALOG)
    rec = engine(store, {"aws": aws}, CATALOG, clock, startup=Broken())
    job = store.add_job(spec(), clock())
    report = rec.tick()
    assert aws.specs == [] and report.launched == 0
    assert "startup-script" in store.kinds() and any("unsupported store" in e for e in report.errors)
    assert store.job(job.id).status.value == "pending"
    # One attempt per provider and tick, not one per offer (aws has two here): its script cannot be built at all.
    assert [a.state.value for a in store.attempts_for_job(job.id)] == ["failed"]
    rec.tick()                      # still nothing: the job waits until the script can be built
    assert aws.specs == []


def test_a_script_over_one_providers_limit_moves_on_to_a_provider_that_takes_it() -> None:
    class AwsTooBig:
        def render(self, job: JobRecord, attempt: AttemptRecord) -> str:
            if attempt.offer.provider == "aws":
                raise StartupScriptError("the boot script is 17000 bytes; aws takes 16384")
            return "#!/bin/sh\ntrue\n"

    clock, store = Clock(), MemoryStore()
    aws = RecordingProvider("aws", CATALOG)
    gcp = RecordingProvider("gcp", CATALOG)
    rec = engine(store, {"aws": aws, "gcp": gcp}, CATALOG, clock, startup=AwsTooBig())
    store.add_job(spec(), clock())
    report = rec.tick()
    assert aws.specs == [] and len(gcp.specs) == 1 and report.launched == 1


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
