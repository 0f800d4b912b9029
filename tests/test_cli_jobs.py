"""``orch plan / apply / status / down / events`` through the CLI, against the local fake clouds.

The store is a temp SQLite file, and a fresh PostgreSQL database where ORCH_TEST_DATABASE_URL is set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.main import app
from tests._jobs_clouds import FakeClouds, start_clouds
from tests._store_db import BACKENDS, database_url_for
from tests.support.forkserver import ForkServer

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

MANIFEST = """\
apiVersion: orch/v1
kind: Job
name: {name}
resources:
  gpu: {gpu}
  count: {count}
market: {market}
run:
  launcher: command
  command: {command}
policies:
  estimated_hours: 2
"""


@pytest.fixture(scope="module")
def clouds() -> Iterator[FakeClouds]:
    c = start_clouds()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from database_url_for(request.param, tmp_path)


@pytest.fixture()
def env(clouds: FakeClouds, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """ORCH_CONFIG at the fakes, ORCH_DATABASE_URL at the test database, credentials in the environment."""
    clouds.reset()
    config = clouds.write_config(tmp_path / "config.yaml")
    values = {"ORCH_CONFIG": str(config), "ORCH_DATABASE_URL": db_url,
              "XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_DATA_HOME": str(tmp_path / "data"),
              **clouds.env()}
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return values


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def write(tmp_path: Path, name: str, gpu: str = "RTX4090", count: int = 1, market: str = "on-demand",
          command: str = "nvidia-smi") -> Path:
    d = tmp_path / "jobs"
    d.mkdir(exist_ok=True)
    path = d / f"{name}.yaml"
    path.write_text(MANIFEST.format(name=name, gpu=gpu, count=count, market=market, command=command))
    return path


def status_json() -> dict:
    code, out, err = run("status", "--json")
    assert code == 0, err
    return json.loads(out)


# -- plan -----------------------------------------------------------------------------------------------

def test_plan_text_and_json_agree_and_show_costs_and_flags() -> None:
    code, out, err = run("plan", str(EXAMPLES / "torchrun-ddp.yaml"), "--alternatives", "2", "--json")
    assert code == 0, err
    [job] = json.loads(out)
    assert job["job"] == "llama-finetune"
    assert len(job["alternatives"]) == 2
    chosen = job["chosen"]
    prices = [chosen["total_price_hr"]] + [a["total_price_hr"] for a in job["alternatives"]]
    assert prices == sorted(prices)
    # the whole job: 2 nodes, 14 estimated hours
    assert chosen["total_price_hr"] == pytest.approx(chosen["price_hr"] * 2, rel=1e-3)
    assert chosen["estimated_total_usd"] == pytest.approx(chosen["total_price_hr"] * 14, abs=0.02)
    assert all(o["provider"] != "vastai" for o in [chosen, *job["alternatives"]])   # providers.deny
    # what every node gets: the examples directory at the repository's HEAD
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert (job["code"]["commit"], job["code"]["path"]) == (head, "examples") and job["code"]["files"] >= 5

    code, text, err = run("plan", str(EXAMPLES / "torchrun-ddp.yaml"), "--alternatives", "2")
    assert code == 0, err
    assert max(len(line) for line in text.splitlines()) <= 80        # wrapped at spaces, never inside a number
    text = " ".join(text.split())
    assert "chosen" in text and "alt 2" in text and "alt 3" not in text
    assert f"code commit {head[:12]}, path examples: {job['code']['files']} files" in text
    assert f"${chosen['total_price_hr']:,.2f}/h" in text
    assert f"total ${chosen['estimated_total_usd']:,.2f}" in text
    for option in [chosen, *job["alternatives"]]:
        for flag in option["flags"]:
            assert flag in text
        for note in option["notes"]:
            assert note in text
    # the data lives in us-east-1: offers elsewhere get the egress note with its estimate (12 GB x $0.09)
    if chosen["region"] != "us-east-1":
        assert "egress" in chosen["flags"]
        assert "~$1.08 for 12 GB" in text
    if chosen["market"] == "spot":
        assert "spot: can be preempted" in text


def test_plan_flags_over_budget_vram_rejects_and_egress(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("""\
apiVersion: orch/v1
kind: Job
name: big
resources: {gpu: [A100-40G, A100-80G], count: 8, min_vram_gb: 80}
market: on-demand
run: {launcher: command, command: train}
data: [{source: "s3://b/x", path: /data, size_gb: 100, region: nowhere-1}]
policies: {estimated_hours: 1000, budget_usd: 10}
""")
    code, out, err = run("plan", str(path), "--json")
    assert code == 0, err
    [job] = json.loads(out)
    assert "over-budget" in job["chosen"]["flags"] and "egress" in job["chosen"]["flags"]
    assert any("egress ~$9.00 for 100 GB" in n for n in job["chosen"]["notes"])
    rejected = [r for r in job["rejected"] if "vram-below-need" in r["flags"]]
    assert rejected and all(r["vram_gb"] < 80 for r in rejected)
    code, text, _ = run("plan", str(path))
    text = " ".join(text.split())
    assert "over-budget" in text and "exceeds the budget $10.00" in text
    assert re.search(r"excluded (1 offer|\d+ offers): (\d+ [a-z-]+, )*\d+ vram-below-need", text)
    assert re.search(r"excluded: 40 GB VRAM < 80 asked", text)


def _resources_manifest(tmp_path: Path, resources: str) -> Path:
    path = tmp_path / "res.yaml"
    path.write_text(f"apiVersion: orch/v1\nkind: Job\nname: res\nresources: {{{resources}}}\n"
                    "run: {launcher: command, command: train}\n")
    return path


def test_plan_honours_vcpus_and_ram_per_gpu_and_names_what_excluded_the_near_misses(tmp_path: Path) -> None:
    code, out, _ = run("plan", str(_resources_manifest(tmp_path, "gpu: A100-80G, count: 8")), "--json")
    [free] = json.loads(out)
    cpus = {o["provider"] + o["instance_type"]: o for o in [free["chosen"], *free["alternatives"]]}
    assert code == 0 and cpus

    path = _resources_manifest(tmp_path, "gpu: A100-80G, count: 8, vcpus_per_gpu: 100")
    code, out, err = run("plan", str(path), "--json")
    assert code == 1, err                                   # no machine has 100 vCPUs per GPU
    [job] = json.loads(out)
    assert job["chosen"] is None and job["eligible_count"] == 0 and job["rejected"]
    for r in job["rejected"]:
        [excluded] = [e for e in r["excluded"] if e["constraint"] == "vcpus-below-need"]
        have = float(re.match(r"([\d.]+) vCPU/GPU < 100 asked$", excluded["detail"]).group(1))
        assert have < 100
    assert job["near_misses"] and all(len(n["excluded"]) == 1 for n in job["near_misses"])
    code, text, _ = run("plan", str(path))
    text = " ".join(text.split())
    assert code == 1 and "no eligible offer" in text
    assert re.search(r"excluded (1 offer|\d+ offers): \d+ vcpus-below-need", text)
    assert re.search(r"excluded: \d+ vCPU/GPU < 100 asked", text)

    path = _resources_manifest(tmp_path, "gpu: A100-80G, count: 8, vcpus_per_gpu: 10, ram_gb_per_gpu: 160")
    code, out, err = run("plan", str(path), "--json", "--alternatives", "50")
    assert code == 0, err
    [job] = json.loads(out)
    kinds = {e["constraint"] for r in job["rejected"] for e in r["excluded"]}
    assert kinds == {"vcpus-below-need", "ram-below-need"}   # the catalog has A100x8 below either
    from providers.catalog import load_catalog

    ok = {(o.provider, o.instance_type) for o in load_catalog().offers
          if o.gpu == "A100-80G" and o.gpu_count == 8 and o.vcpus_per_gpu >= 10 and o.memory_gb_per_gpu >= 160}
    chosen = [job["chosen"], *job["alternatives"]]
    assert {(o["provider"], o["instance_type"]) for o in chosen} <= ok


def test_plan_with_no_offer_exits_1(tmp_path: Path) -> None:
    path = write(tmp_path, "nothing", gpu="RTX4090", count=64)
    code, out, _ = run("plan", str(path))
    assert code == 1
    assert "no eligible offer" in out


def test_bad_manifests_exit_2_with_positions(tmp_path: Path, env: dict[str, str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: orch/v1\nkind: Job\nname: Bad_Name\nresources: {gpu: NOPE}\nrun: {}\n")
    for cmd in ("plan", "apply"):
        code, out, err = run(cmd, str(bad))
        assert code == 2
        lines = err.strip().splitlines()
        assert lines and all(re.match(rf"^{re.escape(str(bad))}:\d+:\d+: ", line) for line in lines), err
        assert "Traceback" not in err + out
    assert status_json()["jobs"] == []   # apply recorded nothing


# -- apply ----------------------------------------------------------------------------------------------

def test_apply_reports_created_updated_unchanged_pruned(tmp_path: Path, env: dict[str, str]) -> None:
    a, b = write(tmp_path, "job-a"), write(tmp_path, "job-b")
    code, out, err = run("apply", str(a.parent), "--no-launch")
    assert code == 0, err
    assert re.search(r"^created\s+job-a$", out, re.M) and re.search(r"^created\s+job-b$", out, re.M)

    code, out, _ = run("apply", str(a.parent), "--no-launch")
    assert "2 unchanged" in out and "created" not in out.split("\n")[0]

    write(tmp_path, "job-b", command="nvidia-smi -L")
    code, out, _ = run("apply", str(a.parent), "--no-launch")
    assert re.search(r"^updated\s+job-b$", out, re.M) and re.search(r"^unchanged\s+job-a$", out, re.M)

    a.unlink()
    code, out, _ = run("apply", str(b.parent), "--no-launch", "--prune", "--yes")
    assert code == 0
    assert re.search(r"^pruned\s+job-a$", out, re.M)
    desired = {j["name"]: j["desired_state"] for j in status_json()["jobs"]}
    assert desired == {"job-a": "pruned", "job-b": "active"}


def test_failed_apply_leaves_the_store_as_it_was(tmp_path: Path, env: dict[str, str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    first = write(tmp_path, "keep")
    assert run("apply", str(first), "--no-launch")[0] == 0
    before = status_json()
    code, out, _ = run("events", "--json")
    events_before = out.count("\n")

    write(tmp_path, "keep", command="changed")
    write(tmp_path, "extra")
    from orchestrator.store import repo

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(repo, "record_event", broken)   # fails after every upsert ran
    code, out, err = run("apply", str(first.parent), "--no-launch")
    assert code == 1 and "disk full" in err and "Traceback" not in err
    monkeypatch.undo()
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    after = status_json()
    assert after == before
    assert run("events", "--json")[1].count("\n") == events_before


def test_apply_lost_launch_answer_is_adopted_not_duplicated(tmp_path: Path, env: dict[str, str],
                                                             clouds: FakeClouds) -> None:
    """The cloud creates the machine but the answer is lost (503): one machine, known to the store."""
    clouds.write_config(Path(env["ORCH_CONFIG"]), only=("vastai",))
    clouds.vast.inject("lost-answer", 1)
    path = write(tmp_path, "lost", gpu="RTX4090", market="on-demand")
    code, out, err = run("apply", str(path), "--launch", "--yes")
    assert code == 0, out + err
    assert clouds.raw_counts()["vastai"] == 1
    [inst] = clouds.live_instances()["vastai"]
    [job] = status_json()["jobs"]
    assert job["instance_id"] == inst.instance_id
    assert run("down", "lost", "--yes", "--poll", "0.05")[0] == 0
    assert clouds.raw_counts()["vastai"] == 0


def test_apply_launch_failure_leaves_no_instance(tmp_path: Path, env: dict[str, str], clouds: FakeClouds) -> None:
    clouds.write_config(Path(env["ORCH_CONFIG"]), only=("vastai",))
    clouds.vast.inject("auth", 100)
    path = write(tmp_path, "refused", gpu="RTX4090", market="on-demand")
    code, out, err = run("apply", str(path), "--launch", "--yes", "--max-ticks", "2")
    assert code == 1, out + err
    assert "waiting   refused" in out and "1 job not launched" in err
    assert clouds.raw_counts()["vastai"] == 0
    assert clouds.live_instances()["vastai"] == []
    [job] = status_json()["jobs"]
    assert job["status"] == "pending" and job["burn_usd_per_hour"] == 0


def test_apply_moves_on_after_capacity_error(tmp_path: Path, env: dict[str, str], clouds: FakeClouds) -> None:
    path = write(tmp_path, "mover", gpu="RTX4090", market="on-demand")
    code, out, _ = run("plan", str(path), "--configured", "--live", "--json")
    [plan] = json.loads(out)
    cheapest = plan["chosen"]["provider"]
    {"vastai": lambda: clouds.vast.inject("capacity", 1),
     "runpod": lambda: clouds.runpod.faults.arm("capacity", 1),
     "lambda": lambda: clouds.lambda_fake.faults.arm("capacity", 1)}[cheapest]()
    code, out, err = run("apply", str(path), "--launch", "--yes")
    assert code == 0, err
    [launched] = [line for line in out.splitlines() if line.startswith("launched")]
    alt = plan["alternatives"][0]
    assert f" on {alt['provider']} " in launched and alt["instance_type"] in launched
    assert clouds.raw_counts()[cheapest] == 0 or cheapest == alt["provider"]
    assert run("down", "mover", "--yes", "--poll", "0.05")[0] == 0


def test_apply_does_not_launch_while_a_daemon_holds_the_store(tmp_path: Path, env: dict[str, str],
                                                              clouds: FakeClouds) -> None:
    if not env["ORCH_DATABASE_URL"].startswith("sqlite"):
        pytest.skip("the daemon lock is SQLite's; PostgreSQL daemons hold leases")
    from orchestrator.store import open_store
    from orchestrator.store.leases import daemon_lock

    store = open_store()
    try:
        with daemon_lock(store):
            # the daemon launches what is recorded: without --yes (and no terminal) nothing is recorded
            code, _, err = run("apply", str(write(tmp_path, "later")))
            assert code == 2 and "--yes" in err
            assert status_json()["jobs"] == []
            code, out, _ = run("apply", str(write(tmp_path, "later")), "--yes")
            assert code == 0 and "a daemon is running" in out and "plan: 1 job to launch by the daemon" in out
            code, _, err = run("apply", str(write(tmp_path, "later")), "--launch")
            assert code == 1 and "daemon" in err
    finally:
        store.close()
    assert sum(clouds.raw_counts().values()) == 0


# -- the done-when: examples up on the fakes, status, and all down -------------------------------

def test_examples_launch_on_cheapest_offer_then_status_then_down(env: dict[str, str], clouds: FakeClouds,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from tests.fakes.scoped_store import ScopedStore

    # What the examples' machines need (secrets, and the store keys their scoped credentials are cut from, by a
    # fake token service): without them nothing is launched.
    sts = ScopedStore(time.time).start()
    daemon = sts.daemon_env(env.get("AWS_ACCESS_KEY_ID", "AK"), env.get("AWS_SECRET_ACCESS_KEY", "SK"))
    for name, value in {"HF_TOKEN": "hf-x", "WANDB_API_KEY": "wb-x", **daemon}.items():
        monkeypatch.setenv(name, value)
    code, out, err = run("plan", str(EXAMPLES), "--configured", "--live", "--json")
    expected = {p["job"]: p["chosen"] for p in json.loads(out)}
    code, out, err = run("apply", str(EXAMPLES), "--launch", "--yes")
    # A result line longer than 80 columns goes on in lines indented 10 spaces (under the job's name).
    launched = {m.group(1): " ".join(m.group(0).split())
                for m in re.finditer(r"^launched\s+(\S+) on .*(?:\n {10}\S.*)*", out, re.M)}
    waiting = {m.group(1) for m in re.finditer(r"^waiting\s+(\S+):", out, re.M)}
    assert launched, out + err
    for name, choice in expected.items():
        if choice is None:
            assert name in waiting
            continue
        assert name in launched, f"{name} not launched (expected {choice}):\n{out}\n{err}"
        line = launched[name]
        assert f" on {choice['provider']} " in line and choice["instance_type"] in line, (choice, line)
    assert code == 0, out + err            # a job waiting for an offer is not an error (issue 31)
    if waiting:
        assert re.search(rf"^{len(launched)} launched, {len(waiting)} waits?: ", out, re.M), out

    from orchestrator.manifest import load_manifests

    nodes = {m.manifest.name: m.manifest.resources.nodes for m in load_manifests([EXAMPLES])}
    report = status_json()
    jobs = {j["name"]: j for j in report["jobs"]}
    burn = 0.0
    for name in launched:
        assert jobs[name]["burn_usd_per_hour"] > 0 and jobs[name]["instance_id"]
        burn += jobs[name]["burn_usd_per_hour"]
        if expected[name] is not None:
            assert jobs[name]["provider"] == expected[name]["provider"]
            # one machine per node (a gang for multi-node jobs); spot bids differ from the ask
            assert jobs[name]["burn_usd_per_hour"] == pytest.approx(expected[name]["price_hr"] * nodes[name],
                                                                    rel=0.25)
    assert report["totals"]["burn_usd_per_hour"] == pytest.approx(burn, abs=0.01)
    machines = sum(nodes[name] for name in launched)
    assert report["totals"]["live_instances"] == machines and machines > len(launched)
    live = clouds.live_instances()
    assert sum(len(v) for v in live.values()) == machines

    code, text, _ = run("status")
    assert code == 0
    for name in launched:
        assert re.search(rf"^{name}\s.*\$\d", text, re.M)
    assert "total: " in text and "/h" in text

    code, out, err = run("down", "--all", "--yes", "--poll", "0.05", "--timeout", "30")
    assert code == 0, out + err
    assert "confirmed by the providers" in out
    assert all(v == [] for v in clouds.live_instances().values())
    assert clouds.raw_counts() == {"vastai": 0, "lambda": 0, "runpod": 0, "gcp": 0, "azure": 0}
    sts.stop()
    after = status_json()
    assert after["jobs"] == [] and after["totals"]["live_instances"] == 0


def test_a_job_never_lands_on_a_provider_it_does_not_allow(env: dict[str, str], clouds: FakeClouds) -> None:
    run("apply", str(EXAMPLES / "deepspeed.yaml"), "--launch", "--yes")   # allows aws, gcp, azure only
    try:
        counts = clouds.raw_counts()
        assert counts["vastai"] == counts["lambda"] == counts["runpod"] == 0
    finally:
        run("down", "--all", "--yes", "--poll", "0.05", "--timeout", "30")


# -- down -----------------------------------------------------------------------------------------------

def test_down_without_yes_and_no_tty_refuses(tmp_path: Path, env: dict[str, str]) -> None:
    assert run("apply", str(write(tmp_path, "stay")), "--no-launch")[0] == 0
    code, _, err = run("down", "stay")
    assert code == 2 and "--yes" in err
    [job] = status_json()["jobs"]
    assert job["desired_state"] == "active"


def test_down_bad_input_and_unknown_job(env: dict[str, str]) -> None:
    assert run("down", "--yes")[0] == 2
    assert run("down", "x", "--all", "--yes")[0] == 2
    code, _, err = run("down", "ghost", "--yes")
    assert code == 1 and "no job named 'ghost' (orch status lists the jobs)" in err
    code, _, err = run("status", "ghost")
    assert code == 1 and "no job named 'ghost' (orch status lists the jobs)" in err


def test_a_mistyped_job_name_gets_the_close_one(tmp_path: Path, env: dict[str, str]) -> None:
    assert run("apply", str(write(tmp_path, "eval-sweep")), "--no-launch")[0] == 0
    for args in (["status", "eval-swep"], ["events", "eval_sweep"], ["logs", "evalsweep"],
                 ["down", "eval-swep", "--yes"]):
        code, _, err = run(*args)
        assert code == 1 and "did you mean 'eval-sweep'? (orch status lists the jobs)" in err, (args, err)
    code, _, err = run("status", "ghost")
    assert code == 1 and "no job named 'ghost' (orch status lists the jobs)" in err
    assert status_json()["jobs"][0]["desired_state"] == "active"     # the mistyped down touched nothing


# -- events ---------------------------------------------------------------------------------------------

def test_events_lists_and_follow_stops_after_max_wait(tmp_path: Path, env: dict[str, str]) -> None:
    assert run("apply", str(write(tmp_path, "ev")), "--no-launch")[0] == 0
    code, out, _ = run("events", "ev", "--json")
    kinds = [json.loads(line)["kind"] for line in out.splitlines()]
    assert kinds[0] == "job.created"
    code, out, _ = run("events")
    assert "job ev created" in out and "apply" in out
    code, out, _ = run("events", "-f", "--max-wait", "0", "--poll", "0.05")
    assert code == 0 and "job ev created" in out
    code, _, err = run("events", "nope")
    assert code == 1 and "no job named 'nope' (orch status lists the jobs)" in err


# -- a real process -------------------------------------------------------------------------------------

@pytest.mark.slow      # real processes, one of them started cold
@pytest.mark.real_schema_upgrade   # its first orch process migrates the new store, SQLite or PostgreSQL
def test_subprocess_apply_status_follow_down(tmp_path: Path, env: dict[str, str], clouds: FakeClouds,
                                            forkserver: ForkServer) -> None:
    def _orch(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
        # Each its own process, forked warm (tests/support/forkserver.py); the follower below is a cold one.
        return forkserver.run("orchestrator", args, env={**os.environ, **env}, cwd=ROOT, timeout=120)

    path = write(tmp_path, "proc", gpu="RTX4090", market="on-demand")
    # The process boundary is what this test is about: the clouds whose SDKs cost seconds to import in every
    # process (GCE, Azure) are left out of its config; the in-process tests above drive all five.
    clouds.write_config(Path(env["ORCH_CONFIG"]), only=("vastai", "lambda", "runpod"))
    # Create the schema first: two processes opening one brand-new SQLite file race to create it.
    assert _orch(env, "status").returncode == 0
    follower = subprocess.Popen([sys.executable, "-m", "orchestrator", "events", "-f", "--json", "--poll", "0.05",
                                 "--max-wait", "60"], cwd=ROOT, env={**os.environ, **env},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        done = _orch(env, "apply", str(path), "--launch", "--yes")
        assert done.returncode == 0, done.stderr
        unwrapped = re.sub(r"\n {10}(?=\S)", " ", done.stdout)      # a long result line goes on indented 10
        assert re.search(r"^launched\s+proc on \S+ \S+ .*\$\d+\.\d\d/h$", unwrapped, re.M), done.stdout
        seen: list[str] = []
        deadline = time.monotonic() + 60
        assert follower.stdout is not None
        while time.monotonic() < deadline:
            line = follower.stdout.readline()
            if not line:
                break
            seen.append(json.loads(line)["kind"])
            if "launched" in seen:
                break
        assert "job.created" in seen and "launched" in seen, seen
    finally:
        follower.terminate()
        follower.wait(timeout=10)
    st = _orch(env, "status", "proc", "--json")
    assert st.returncode == 0
    [job] = json.loads(st.stdout)["jobs"]
    assert job["burn_usd_per_hour"] > 0 and job["instance_id"]
    for secret in (clouds.env()["VAST_API_KEY"], clouds.env()["LAMBDA_API_KEY"]):
        assert secret not in done.stdout + done.stderr + st.stdout
    down = _orch(env, "down", "proc", "--yes", "--poll", "0.05", "--timeout", "30")     # stdin: /dev/null
    assert down.returncode == 0, down.stderr
    assert all(v == [] for v in clouds.live_instances().values())
    refuse = _orch(env, "down", "--all")
    assert refuse.returncode == 2 and "--yes" in refuse.stderr


def test_no_provider_configured_apply_records_but_does_not_launch(tmp_path: Path, env: dict[str, str]) -> None:
    Path(env["ORCH_CONFIG"]).write_text("owner: tester\n")
    code, out, _ = run("apply", str(write(tmp_path, "idle")))
    assert code == 1 and "no providers are configured" in out
    assert [j["name"] for j in status_json()["jobs"]] == ["idle"]


