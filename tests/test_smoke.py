"""``orch smoke``'s use case (orchestrator/app/smoke.py) on the in-memory provider, with a fake clock.

What the e2e test (tests/e2e/test_smoke.py) cannot show cheaply: a run that never hears its agent times out and
still tears down; a refused launch or a script that cannot be built spends nothing and leaves nothing; a machine
that will not go, or a resource that stays, is a leftover and fails the run; the cost is the offer's price over
the time held; the offer chosen; and the CLI's refusals. The clock only moves when smoke waits (``wait``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from typing import Any

import pytest

from orchestrator.app.smoke import SmokeSeams, run_smoke
from orchestrator.app.smoke_targets import MachineKind, SmokeOptions, choose_offer, plan_targets
from orchestrator.engine.hooks import AgentReport, StartupScriptError
from orchestrator.engine.ports import AttemptRecord, JobRecord
from providers.base import Availability, CloudResource, Instance, Market, Offer, ResourceKind
from providers.errors import InsufficientCapacityError, ResourceInUseError
from providers.gpus import Interconnect
from tests.fakes.memory_provider import MemoryProvider

OWNER = "tester"


def offer(price: float = 0.36, market: Market = Market.ON_DEMAND, itype: str = "a10.1x", provider: str = "mem",
          availability: Availability = Availability.UNKNOWN) -> Offer:
    return Offer(provider, itype, "us-east-1", "us-east-1a", "A10G-24G", 1, 24.0, 4.0, 16.0, Interconnect.PCIE,
                 market, price, date(2026, 12, 1), availability=availability)


@dataclass
class Clock:
    now: float = 1000.0
    waits: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


@dataclass
class Renderer:
    error: str = ""
    rendered: list[str] = field(default_factory=list)

    def render(self, job: JobRecord, attempt: AttemptRecord) -> str:
        if self.error:
            raise StartupScriptError(self.error)
        self.rendered.append(attempt.launch_id)
        return f"#!/bin/sh\necho {attempt.launch_id}\n"


@dataclass
class Agent:
    """Reports once it has been asked ``after`` times (None: never)."""

    after: int | None
    reads: int = 0

    def read(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> AgentReport | None:
        self.reads += 1
        return AgentReport() if self.after is not None and self.reads > self.after else None


OPTS = SmokeOptions(owner=OWNER, timeout_s=60.0, teardown_timeout_s=30.0, poll_s=5.0)


def _run(provider: MemoryProvider, agent: Agent, renderer: Renderer | None = None, clock: Clock | None = None,
         target_offer: Offer | None = None) -> Any:
    clock = clock or Clock()
    [target] = plan_targets({provider.name: provider}, OPTS) if target_offer is None else [None]
    if target_offer is not None:
        from orchestrator.app.smoke_targets import SmokeTarget

        target = SmokeTarget(provider.name, target_offer)
    lines: list[str] = []
    result = run_smoke(target, provider, SmokeSeams(renderer or Renderer(), agent), OPTS, progress=lines.append,
                       clock=clock, wait=clock.wait)
    return result, lines


def test_first_report_then_teardown_costs_the_time_held() -> None:
    provider = MemoryProvider("mem", [offer(0.36)])
    clock = Clock()
    result, lines = _run(provider, Agent(after=2), clock=clock)
    assert result.ok and result.result == "ok" and result.error == ""
    assert result.first_report_s == 10.0                  # two polls of 5 s before the third read reported
    assert result.held_s == 10.0 and result.cost_usd == pytest.approx(0.36 * 10 / 3600, abs=1e-4)
    assert result.leftovers == () and provider.live() == []
    assert any("first report" in line for line in lines)


def test_no_report_times_out_and_still_tears_down() -> None:
    provider = MemoryProvider("mem", [offer()])
    result, lines = _run(provider, Agent(after=None))
    assert not result.ok and result.first_report_s is None
    assert result.error == f"no report from the agent within {OPTS.timeout_s:g}s (machine running)", result.error
    assert result.launched and result.leftovers == () and provider.live() == []
    assert result.held_s > OPTS.timeout_s                 # held until the timeout, then gone at once
    waiting = [line for line in lines if "waiting for the agent" in line]
    assert [w.rsplit(" ", 1)[1] for w in waiting] == ["(0s)", "(30s)", "(60s)"]   # a sign of life every 30 s


def test_refused_launch_spends_nothing_and_leaves_nothing() -> None:
    provider = MemoryProvider("mem", [offer()])
    provider.fail("launch", InsufficientCapacityError("no capacity", provider="mem"))
    result, _ = _run(provider, Agent(after=0))
    assert not result.ok and result.error == "the cloud refused: no capacity", result.error
    assert result.leftovers == () and provider.cloud.instances == {}


def test_a_script_that_cannot_be_built_launches_nothing() -> None:
    provider = MemoryProvider("mem", [offer()])
    result, _ = _run(provider, Agent(after=0), renderer=Renderer(error="secrets not set: HF_TOKEN"))
    assert not result.launched and "HF_TOKEN" in result.error and result.cost_usd == 0.0
    assert provider.cloud.calls["launch"] == 0


class Sticky(MemoryProvider):
    """A cloud whose terminate does nothing, and which keeps a per-launch public IP that is always in use."""

    def __init__(self, *args: Any, keep_instance: bool = True, ip_in_use: bool = True) -> None:
        super().__init__(*args)
        self.keep_instance, self.ip_in_use = keep_instance, ip_in_use
        self.deleted: list[str] = []
        self.resources: dict[str, CloudResource] = {}

    def launch(self, spec: Any) -> Instance:
        inst = super().launch(spec)
        res = CloudResource("mem", ResourceKind.PUBLIC_IP, f"ip-{spec.launch_id}", f"{spec.launch_id}-pip", OWNER,
                            in_use=True, launch_id=spec.launch_id)
        self.resources[res.resource_id] = res
        return inst

    def terminate(self, instance_id: str) -> None:
        if not self.keep_instance:
            super().terminate(instance_id)
            self.resources = {k: replace(r, in_use=self.ip_in_use) for k, r in self.resources.items()}

    def list_network_resources(self, owner: str) -> list[CloudResource]:
        return list(self.resources.values())

    def delete_network_resource(self, resource: CloudResource) -> None:
        if self.resources[resource.resource_id].in_use:
            raise ResourceInUseError("in use", provider="mem")
        self.deleted.append(resource.resource_id)
        del self.resources[resource.resource_id]


def test_a_machine_that_will_not_go_is_a_leftover() -> None:
    provider = Sticky("mem", [offer()])
    result, _ = _run(provider, Agent(after=0))
    assert not result.ok and result.result == "FAILED" and result.first_report_s is not None
    assert any(x.startswith("instance mem-") for x in result.leftovers)
    assert any(x.endswith("-pip (in use)") for x in result.leftovers)


def test_what_the_launch_created_is_deleted_once_unused() -> None:
    provider = Sticky("mem", [offer()], keep_instance=False, ip_in_use=False)
    result, _ = _run(provider, Agent(after=0))
    assert result.ok and result.leftovers == () and len(provider.deleted) == 1


def test_choose_offer_prefers_on_demand_and_skips_what_is_out_of_capacity() -> None:
    spot = offer(0.10, Market.SPOT, "cheap-spot")
    gone = offer(0.20, itype="out", availability=Availability.NOT_AVAILABLE)
    od = offer(0.30, itype="od")
    dearer = offer(0.50, itype="dear")
    assert choose_offer([dearer, spot, gone, od]) == od
    assert choose_offer([spot]) == spot                   # only spot listed: the cheapest spot
    assert choose_offer([]) is None


def test_plan_names_the_most_it_may_cost_and_takes_an_own_host_as_it_is() -> None:
    host = offer(0.5, provider="ssh", itype="own-1")
    targets = plan_targets({"mem": MemoryProvider("mem", [offer(0.36)]), "ssh": MemoryProvider("ssh", [host])}, OPTS)
    by = {t.provider: t for t in targets}
    assert by["mem"].max_cost_usd == pytest.approx(0.36 * (60 + 30) / 3600, abs=1e-4)
    assert by["ssh"].offer == host and by["ssh"].note.startswith("your own machine: nothing launched")
    [none] = plan_targets({"ssh": MemoryProvider("ssh", [])}, OPTS)
    assert none.offer is None and none.problem == "the provider lists no offer"


def test_an_own_host_of_several_gpus_is_a_target() -> None:
    """Smoke asked every provider for one-GPU offers only: a configured 2-GPU box was "lists no offer"."""
    box = replace(offer(0.5, provider="ssh", itype="box1"), gpu_count=2)
    [target] = plan_targets({"ssh": MemoryProvider("ssh", [box])}, OPTS)
    assert target.offer == box and target.problem == ""
    # A cloud is still asked for one-GPU machines only (one listing call, not one per count).
    [cloud] = plan_targets({"mem": MemoryProvider("mem", [replace(offer(0.5), gpu_count=8)])}, OPTS)
    assert cloud.offer is None and cloud.problem == "the provider lists no offer"


@dataclass
class Starter:
    """The engine's bootstrapper for an own machine: unreachable ``misses`` times, then started."""

    misses: int
    calls: int = 0

    def start(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        self.calls += 1
        return self.calls > self.misses


@dataclass
class HeardOnlyOnceStarted:
    starter: Starter
    reads: int = 0

    def read(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> AgentReport | None:
        self.reads += 1
        assert self.starter.calls > self.starter.misses, "read before the agent was started"
        return AgentReport()


def test_an_own_machine_is_started_over_ssh_then_heard_then_stopped() -> None:
    host = offer(0.5, provider="ssh", itype="own-1")
    provider, clock, starter = MemoryProvider("ssh", [host]), Clock(), Starter(misses=2)
    renderer = Renderer(error="an own machine boots no script: never rendered")
    [target] = plan_targets({"ssh": provider}, OPTS)
    lines: list[str] = []
    result = run_smoke(target, provider, SmokeSeams(renderer, HeardOnlyOnceStarted(starter), starter), OPTS,
                       progress=lines.append, clock=clock, wait=clock.wait)
    assert result.ok and result.leftovers == () and starter.calls == 3
    assert [i for i in provider.list_instances(OWNER) if not i.state.is_gone] == []
    assert "reserving own-1" in lines[0] and "starting the agent over SSH" in lines[0]
    no_starter = run_smoke(target, MemoryProvider("ssh", [host]), SmokeSeams(renderer, Agent(after=0)), OPTS,
                           clock=clock, wait=clock.wait)
    assert not no_starter.ok and "no bootstrapper" in no_starter.error and not no_starter.launched


def test_cli_refuses_without_a_store_and_for_an_unknown_provider(tmp_path: Any, monkeypatch: Any) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli.main import app

    config = tmp_path / "orch.yaml"
    config.write_text("owner: tester\nproviders:\n  lambda: {}\n")
    monkeypatch.setenv("ORCH_CONFIG", str(config))
    monkeypatch.delenv("ORCH_STATE_STORE", raising=False)
    shown = CliRunner().invoke(app, ["smoke", "--yes"])
    assert shown.exit_code == 2 and "needs a store" in shown.stderr
    shown = CliRunner().invoke(app, ["smoke", "--store", "s3://b/p", "--provider", "aws"])
    assert shown.exit_code == 2 and "not a configured provider: aws (configured: lambda)" in shown.stderr
    # A misspelt provider is told as such, with or without a store (it was hidden behind the store's
    # requirement, then "not a configured provider" without a suggestion).
    for args in (["--provider", "lambdaa"], ["--store", "s3://b/p", "--provider", "lambdaa"]):
        shown = CliRunner().invoke(app, ["smoke", *args])
        assert shown.exit_code == 2 and "unknown provider 'lambdaa' (did you mean lambda" in shown.stderr
    shown = CliRunner().invoke(app, ["smoke", "--store", "s3://b/p", "--timeout", "nan"])
    assert shown.exit_code == 2 and "--timeout must be more than 0" in shown.stderr


def test_the_table_fits_80_columns_and_names_each_leftover(capsys: Any) -> None:
    from orchestrator.cli.smoke import _print_results

    provider = Sticky("mem", [offer(itype="Standard_NC24ads_A100_v4_with_a_long_name")])
    result, _ = _run(provider, Agent(after=0))
    ok, _ = _run(MemoryProvider("mem", [offer()]), Agent(after=1))
    _print_results([result, ok], as_json=False)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["PROVIDER", "MACHINE", "REPORT", "HELD", "COST", "LEFT", "RESULT"]
    # The machine too long for its column is whole on its line; the row's other columns follow on the next.
    assert out[1].split() == ["mem", "Standard_NC24ads_A100_v4_with_a_long_name", "us-east-1a"]
    assert out[2].split()[-2:] == ["2", "FAILED"] and out[3].split()[-2:] == ["0", "ok"]
    assert "5s" in out[3].split()                     # one poll of 5 s before the agent's first report
    assert any("left: instance mem-" in line for line in out[4:])
    assert all(len(line) <= 80 for line in out), [len(line) for line in out]


@pytest.mark.parametrize("cloud, machine", [("aws", "m5.large"), ("gcp", "e2-standard-2"),
                                            ("azure", "Standard_D2s_v5")])
def test_a_provider_with_cpu_machines_gets_its_small_cpu_type_where_its_cheapest_offer_is(cloud: str,
                                                                                        machine: str) -> None:
    from orchestrator.app.smoke_targets import CPU_TYPES

    place = offer(0.36, provider=cloud)
    [target] = plan_targets({cloud: MemoryProvider(cloud, [offer(0.50, provider=cloud), place])}, OPTS)
    chosen = target.offer
    assert chosen is not None and target.kind is MachineKind.CPU and target.note == ""
    assert (chosen.instance_type, chosen.gpu_count, chosen.gpu) == (machine, 0, "")
    assert (chosen.region, chosen.zone, chosen.market) == (place.region, place.zone, Market.ON_DEMAND)
    assert chosen.price_hr == CPU_TYPES[cloud].price_hr and CPU_TYPES[cloud].source in chosen.price_source
    assert target.max_cost_usd == pytest.approx(chosen.price_hr * (60 + 30) / 3600, abs=1e-4)


@pytest.mark.parametrize("cloud", ["vastai", "lambda", "runpod"])
def test_a_provider_without_cpu_machines_keeps_its_cheapest_gpu_offer_and_says_why(cloud: str) -> None:
    cheapest = offer(0.36, provider=cloud)
    [target] = plan_targets({cloud: MemoryProvider(cloud, [offer(0.50, provider=cloud), cheapest])}, OPTS)
    assert target.offer == cheapest and target.kind is MachineKind.GPU and target.note.startswith("GPU: ")


def test_a_cpu_machine_boots_a_job_with_no_gpu_and_tears_down() -> None:
    from orchestrator.app.smoke import smoke_job
    from orchestrator.app.smoke_targets import cpu_offer

    cpu = cpu_offer("gcp", offer(provider="gcp"))
    assert cpu is not None
    job = smoke_job(cpu, datetime.now(UTC))
    assert job.manifest.resources.gpu == [] and job.spec.plan.gpus == ()
    provider = MemoryProvider("gcp", [offer(provider="gcp")])
    result, lines = _run(provider, Agent(after=0), target_offer=cpu)
    assert result.ok and result.kind is MachineKind.CPU and result.offer == cpu
    assert any("e2-standard-2 (CPU)" in line for line in lines)


def test_the_plan_shows_machine_kind_and_max_cost_in_80_columns(capsys: Any) -> None:
    from orchestrator.cli.smoke import _print_plan

    targets = plan_targets({"aws": MemoryProvider("aws", [offer(provider="aws")]),
                            "vastai": MemoryProvider("vastai", [offer(provider="vastai")]),
                            "ssh": MemoryProvider("ssh", [])}, OPTS)
    _print_plan(targets, as_json=False)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["PROVIDER", "MACHINE", "KIND", "MARKET", "$/H", "MAX", "COST"]
    assert out[1].split()[:2] == ["aws", "m5.large"] and out[1].split()[3] == "CPU"
    assert out[2].split()[:2] == ["vastai", "a10.1x"] and out[2].split()[3] == "GPU"
    assert any("vastai: GPU: Vast.ai rents GPU machines only" in line for line in out)
    assert any("aws: $/h from orch smoke's table" in line for line in out)
    assert all(len(line) <= 80 for line in out), [len(line) for line in out]
