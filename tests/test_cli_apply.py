"""``orch apply`` shows the plan before money is spent and asks; ``--yes``, ``--dry-run``, ``--json``; and
the other ``--json`` outputs (down, validate, db current), ``status --watch``, progress on stderr and
``orch --version``. Against the Vast.ai wire fake with its real adapter, on a SQLite store."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import apply_flow, watch
from orchestrator.cli.main import app
from tests._jobs_clouds import FakeClouds, start_clouds

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = """\
apiVersion: orch/v1
kind: Job
name: {name}
project: nlp
resources: {{gpu: RTX4090}}
market: on-demand
run: {{launcher: command, command: nvidia-smi}}
policies: {{estimated_hours: 2}}
"""


@pytest.fixture(scope="module")
def clouds() -> Iterator[FakeClouds]:
    c = start_clouds()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture()
def env(clouds: FakeClouds, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    clouds.reset()
    config = clouds.write_config(tmp_path / "config.yaml", only=("vastai",))
    values = {"ORCH_CONFIG": str(config), "ORCH_DATABASE_URL": f"sqlite:///{tmp_path / 'orch.db'}", **clouds.env()}
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return values


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), input=stdin, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def job(tmp_path: Path, name: str = "train") -> Path:
    path = tmp_path / "jobs" / f"{name}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(MANIFEST.format(name=name))
    return path


def jobs_in_store() -> list[str]:
    code, out, err = run("status", "--json")
    assert code == 0, err
    return [j["name"] for j in json.loads(out)["jobs"]]


def machines(clouds: FakeClouds) -> int:
    return clouds.raw_counts()["vastai"]


def down_all() -> None:
    assert run("down", "--all", "--yes", "--poll", "0.05", "--timeout", "30")[0] == 0


# -- the plan, the question, the answer -------------------------------------------------------------------

def test_dry_run_shows_where_and_what_it_costs_and_changes_nothing(tmp_path: Path, env: dict[str, str],
                                                                   clouds: FakeClouds) -> None:
    code, out, err = run("apply", str(job(tmp_path)), "--dry-run")
    assert code == 0, err
    assert "plan: 1 job to launch by orch apply, $" in out and "estimated $" in out
    assert "train" in out and "vastai" in out and "on-demand" in out and "for 2 h" in out
    assert "would be created   train" in out and "dry run: nothing recorded, nothing launched" in out
    assert jobs_in_store() == [] and machines(clouds) == 0

    code, out, _ = run("apply", str(job(tmp_path)), "--dry-run", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["dry_run"] is True and doc["recorded"] is False
    [launch] = doc["launches"]
    offer = launch["offer"]
    assert (launch["job"], offer["provider"], offer["market"]) == ("train", "vastai", "on-demand")
    assert doc["total_price_hr"] == pytest.approx(offer["total_price_hr"])
    assert doc["estimated_total_usd"] == pytest.approx(offer["total_price_hr"] * 2, abs=0.01)
    assert doc["changes"]["created"] == ["train"] and jobs_in_store() == []


def test_a_live_provider_that_cannot_be_asked_is_said_once_not_planned_around_in_silence(
        tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """No Vast.ai key found: the plan and apply's preview go on without its live offers, and say why on stderr
    (once, however many jobs), instead of a bare "no eligible offer"."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("VAST_API_KEY")
    paths = [str(job(tmp_path, "a")), str(job(tmp_path, "b"))]
    _, _, err = run("plan", *paths, "--live")
    assert err.count("note: --live: vastai: no API key found (set VAST_API_KEY") == 1, err
    code, out, err = run("apply", *paths, "--dry-run")
    assert code == 0 and err.count("note: live offers: vastai: no API key found (set VAST_API_KEY") == 1, out + err


def test_a_plan_the_catalog_leaves_without_offer_points_at_live_prices(tmp_path: Path, env: dict[str, str]) -> None:
    """Vast.ai's catalog rows have no L4 spot, its live search has one: `orch plan` finds none, apply would launch.
    The plan says where the difference is."""
    path = job(tmp_path)
    path.write_text(path.read_text().replace("gpu: RTX4090", "gpu: L4").replace("market: on-demand", "market: spot"))
    code, out, _ = run("plan", str(path), str(job(tmp_path, "other")))
    assert code == 1 and "no eligible offer" in out
    # Said once, after the plans, however many jobs it concerns.
    assert out.count("hint: planned from the catalog alone; `orch plan --live` also asks") == 1
    code, out, _ = run("plan", str(path), "--live")
    assert code == 0 and "chosen vastai" in out and "--live` also asks" not in out


def test_a_bad_daemon_section_is_one_line_from_plan_as_from_apply(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan reads the daemon: section for its boot check; a mistake there was "internal error: ConfigError
    ... (a bug in orch)" from `orch plan` while `orch apply` said it as bad input."""
    config = tmp_path / "config.yaml"
    config.write_text("providers:\n  vastai: {}\ndaemon:\n  interval_s: 5\n")
    monkeypatch.setenv("ORCH_CONFIG", str(config))
    monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'orch.db'}")
    for command in (["plan"], ["plan", "--json"], ["apply", "--dry-run"]):
        code, out, err = run(*command, str(job(tmp_path)))
        assert code == 2, (command, out, err)
        assert f"{config}:4: daemon.interval_s: unknown key" in err and "internal error" not in err, err


def test_a_plan_of_a_file_holding_no_job_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty manifest file: `orch plan` printed nothing at all and exited 0."""
    monkeypatch.setenv("ORCH_CONFIG", str(tmp_path / "no-config.yaml"))
    empty = tmp_path / "jobs.yaml"
    empty.write_text("# jobs go here\n")
    said = f"no jobs in {empty}: nothing to plan (a job starts apiVersion: orch/v1, kind: Job)"
    for extra in ([], ["--json"]):
        code, out, err = run("plan", str(empty), *extra)
        assert code == 2 and out == ("" if not extra else json.dumps({"error": said}) + "\n"), (out, err)
        assert err == f"error: {said}\n"


def test_a_bad_provider_section_is_refused_by_plan_as_by_apply(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --live the plan built no provider, so a broken section went unsaid: the plan chose among that
    provider's offers (or said "no eligible offer") while apply refused the config."""
    config = tmp_path / "config.yaml"
    config.write_text("providers:\n  vastai:\n    colour: blue\n")
    monkeypatch.setenv("ORCH_CONFIG", str(config))
    monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'orch.db'}")
    for command in (["plan"], ["apply", "--dry-run"]):
        code, out, err = run(*command, str(job(tmp_path)))
        assert code == 2 and "chosen" not in out, (command, out, err)
        assert f"{config}:3: providers.vastai.colour: unknown key" in err, err


def test_with_no_provider_configured_the_plan_says_why_every_job_waits(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each job reads "no eligible offer: it waits (see `orch plan`)", and `orch plan` shows offers: the
    missing configuration is what the preview must name."""
    monkeypatch.setenv("ORCH_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'orch.db'}")
    code, out, err = run("apply", str(job(tmp_path)), "--dry-run")
    assert code == 0, err
    assert "train                no eligible offer: it waits" in out
    assert "note: no provider is configured, so nothing launches and the jobs wait" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    # Recorded, nothing launched: said within 80 columns, on stdout, or on stderr beside --json.
    code, out, err = run("apply", str(job(tmp_path)), "--yes")
    assert code == 1 and "no providers are configured (see `orch providers`): nothing launched" in " ".join(
        out.split())
    assert max(len(line) for line in out.splitlines() + err.splitlines()) <= 80, out + err
    code, out, err = run("apply", str(job(tmp_path, "other")), "--yes", "--json")
    assert code == 1 and json.loads(out)["changes"]["created"] == ["other"]
    assert "no providers are configured" in err
    assert max(len(line) for line in err.splitlines()) <= 80, err


def test_without_a_terminal_and_without_yes_it_refuses_and_records_nothing(tmp_path: Path, env: dict[str, str],
                                                                          clouds: FakeClouds) -> None:
    code, out, err = run("apply", str(job(tmp_path)))
    assert code == 2
    assert "refusing to launch 1 job at $" in err and "no terminal to ask on" in err and "--yes" in err
    assert "plan: 1 job to launch" in out           # the plan is still shown
    assert jobs_in_store() == [] and machines(clouds) == 0
    code, out, err = run("apply", str(job(tmp_path)), "--json")
    assert code == 2 and "--json never asks" in json.loads(out)["error"]


def test_on_a_terminal_it_asks_and_no_launches_nothing(tmp_path: Path, env: dict[str, str], clouds: FakeClouds,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apply_flow, "stdin_is_terminal", lambda: True)
    code, out, err = run("apply", str(job(tmp_path)), stdin="n\n")
    assert code == 1 and "Launch 1 job at $" in out + err and "[y/N]" in out + err
    assert "nothing recorded, nothing launched" in err
    assert jobs_in_store() == [] and machines(clouds) == 0

    code, out, err = run("apply", str(job(tmp_path)), stdin="y\n")
    try:
        assert code == 0, out + err
        assert "created   train" in out and "launched  train on vastai" in out
        assert machines(clouds) == 1
        # progress on stderr, stdout keeps the result
        assert "launching pending jobs…" in err and "round 1: 1 launched" in err
        assert "round 2" not in err       # the round that found nothing more to do is not said
    finally:
        down_all()


def test_yes_launches_and_json_reports_it(tmp_path: Path, env: dict[str, str], clouds: FakeClouds) -> None:
    code, out, err = run("apply", str(job(tmp_path)), "--yes", "--json")
    try:
        assert code == 0, err
        doc = json.loads(out)
        assert doc["recorded"] is True and doc["launcher"] == "orch apply" and doc["changes"]["created"] == ["train"]
        [launched] = doc["launched"]
        assert launched["job"] == "train" and launched["provider"] == "vastai" and doc["waiting"] == {}
        assert machines(clouds) == 1
        # nothing waits for a machine now: a second apply neither asks nor launches
        code, out, err = run("apply", str(job(tmp_path)))
        assert code == 0, err
        assert "plan: no job waits for a machine" in out and "unchanged train" in out
    finally:
        down_all()
    assert machines(clouds) == 0


def test_an_update_to_a_running_job_says_it_takes_effect_at_the_next_launch(tmp_path: Path, env: dict[str, str],
                                                                            clouds: FakeClouds) -> None:
    path = job(tmp_path)
    assert run("apply", str(path), "--yes")[0] == 0
    try:
        path.write_text(path.read_text().replace("estimated_hours: 2", "estimated_hours: 3"))
        code, out, err = run("apply", str(path), "--dry-run")
        assert code == 0 and "would be updated   train" in out, err
        assert "note: train keeps running as launched: the change takes effect at its next launch" in " ".join(
            out.split())
        code, out, _ = run("apply", str(path), "--yes", "--json")
        doc = json.loads(out)
        assert code == 0 and doc["changes"]["updated"] == ["train"] and doc["updated_running"] == ["train"]
        assert machines(clouds) == 1     # not relaunched: the machine runs as launched
        path.write_text(path.read_text().replace("estimated_hours: 3", "estimated_hours: 4"))
        assert run("apply", str(path), "--no-launch", "--json")[0] == 0
        assert run("down", "train", "--yes", "--poll", "0.05", "--timeout", "30")[0] == 0
        path.write_text(path.read_text().replace("estimated_hours: 4", "estimated_hours: 5"))
        code, out, _ = run("apply", str(path), "--dry-run")
        assert code == 0 and "keeps running" not in out     # down: nothing runs on the old manifest
    finally:
        down_all()


def test_prune_says_each_pruned_machine_is_being_ended_and_where_to_watch(tmp_path: Path, env: dict[str, str],
                                                                           clouds: FakeClouds) -> None:
    """A pruned job's machine bills until its cloud confirms it gone: apply says it is being ended, by whom, and
    where to watch; with nobody to end it now (--no-launch, no daemon), it says how to end it."""
    keep = job(tmp_path, "keep")
    keep.write_text(keep.read_text().replace("gpu: RTX4090", "gpu: A100-80G"))   # its own machine, not a's
    try:
        assert run("apply", str(job(tmp_path, "a")), "--yes")[0] == 0
        [machine] = json.loads(run("status", "--json")[1])["instances"]
        code, out, err = run("apply", str(keep), "--prune", "--yes")
        assert code == 0 and "pruned    a" in out, out + err
        said = " ".join(out.split())
        assert (f"ending a: its machine vastai {machine['instance_id']} is being terminated by orch apply; it bills "
                "until its cloud confirms it gone: watch `orch status`") in said, out
        assert max(map(len, out.splitlines())) <= 80
        # (the fake cloud has one RTX 4090 to rent: "a" is applied again on it, and pruned again)
        assert run("apply", str(job(tmp_path, "a")), "--yes")[0] == 0
        code, out, err = run("apply", str(keep), "--prune", "--yes", "--json")
        [ending] = json.loads(out)["ending"]
        assert (ending["job"], ending["provider"], ending["ended_by"]) == ("a", "vastai", "orch apply"), out
        assert run("apply", str(job(tmp_path, "a")), "--yes")[0] == 0
        code, out, err = run("apply", str(keep), "--prune", "--yes", "--no-launch")
        assert code == 0 and "note: a: its machine vastai" in out, out + err
        said = " ".join(out.split())
        assert "nothing ends it now" in said and "run `orch down a --yes` to end it" in said
        assert "ending " not in out
    finally:
        down_all()


def test_no_launch_without_a_daemon_records_without_asking(tmp_path: Path, env: dict[str, str],
                                                          clouds: FakeClouds) -> None:
    code, out, err = run("apply", str(job(tmp_path)), "--no-launch")
    assert code == 0, err
    assert "created   train" in out and "plan:" not in out
    assert jobs_in_store() == ["train"] and machines(clouds) == 0
    # the recorded job is pending: the next apply (here, or a daemon) launches it, so that one asks
    code, out, err = run("apply", str(job(tmp_path)))
    assert code == 2 and "plan: 1 job to launch" in out


def test_the_plan_shows_a_launch_a_budget_would_refuse(tmp_path: Path, env: dict[str, str]) -> None:
    config = Path(env["ORCH_CONFIG"])
    doc = yaml.safe_load(config.read_text())
    doc["budgets"] = [{"name": "nlp", "match": {"project": "nlp"}, "max_usd_per_hour": 0.01}]
    config.write_text(yaml.safe_dump(doc))
    code, out, err = run("apply", str(job(tmp_path)), "--dry-run")
    assert code == 0, err
    assert "plan: 0 jobs to launch" in out and max(len(line) for line in out.splitlines()) <= 80
    said = " ".join(out.split())        # wrapped within 80 columns
    assert "refused, it waits: budget nlp: $0.00/h running + $" in said and "ceiling of $0.01/h" in said
    # Applied for real, the job waits: its "waiting" line and the summary say the budget's reason within 80
    # columns too (they ran to 200).
    code, out, err = run("apply", str(job(tmp_path)), "--yes")
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80, out
    said = " ".join(out.split())
    assert "waiting train: launch refused" in said and "1 waits: train: launch refused" in said
    assert said.count("ceiling of $0.01/h") == 3     # the plan, the waiting line, the summary


def test_bad_manifests_with_json_are_a_json_error(tmp_path: Path, env: dict[str, str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: orch/v1\nkind: Job\nname: Bad_Name\nresources: {gpu: NOPE}\nrun: {}\n")
    for cmd in (("apply", str(bad), "--json"), ("validate", str(bad), "--json")):
        code, out, err = run(*cmd)
        doc = json.loads(out)
        assert code == 2 and len(doc["errors"]) >= 2
        assert doc["error"] == f"{len(doc['errors'])} problems in the manifests"
        assert all(e["path"] == str(bad) and e["line"] for e in doc["errors"])
        assert err.startswith(f"{bad}:")


# -- a real terminal --------------------------------------------------------------------------------------

def test_a_real_terminal_is_asked_before_anything_is_recorded(tmp_path: Path, env: dict[str, str],
                                                             clouds: FakeClouds) -> None:
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "apply", str(job(tmp_path))], cwd=ROOT,
                            env={**os.environ, **env}, stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    seen = b""
    try:
        while b"[y/N]" not in seen:
            ready, _, _ = select.select([leader], [], [], 60)
            assert ready, f"no question within 60 s: {seen!r}"
            seen += os.read(leader, 4096)
        os.write(leader, b"n\n")
        assert proc.wait(timeout=60) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    assert b"plan: 1 job to launch" in seen
    assert jobs_in_store() == [] and machines(clouds) == 0


# -- --json elsewhere ---------------------------------------------------------------------------------------

def test_validate_json(tmp_path: Path) -> None:
    code, out, _ = run("validate", str(job(tmp_path)), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["ok"] is True and doc["jobs"] == [{"name": "train", "source": str(job(tmp_path))}]


def test_db_current_json_and_its_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert run("db", "upgrade", "--url", url)[0] == 0
    code, out, _ = run("db", "current", "--url", url, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["up_to_date"] is True and doc["current"] == doc["head"]
    code, out, err = run("db", "current", "--url", "mysql://u:secret@h/d", "--json")
    assert code == 2 and "SQLite or PostgreSQL" in json.loads(out)["error"] and "secret" not in out + err


def test_db_current_of_a_missing_sqlite_file_creates_nothing(tmp_path: Path) -> None:
    where = tmp_path / "no" / "such" / "x.db"
    code, out, _ = run("db", "current", "--url", f"sqlite:///{where}")
    assert code == 0 and "no database yet" in out and "orch db upgrade" in out
    code, out, _ = run("db", "current", "--url", f"sqlite:///{where}", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["exists"] is False and doc["current"] is None and doc["up_to_date"] is False
    assert not (tmp_path / "no").exists()


def test_down_json_refusal_and_result_with_progress_per_provider(tmp_path: Path, env: dict[str, str],
                                                                 clouds: FakeClouds) -> None:
    assert run("apply", str(job(tmp_path)), "--yes")[0] == 0
    code, out, _ = run("down", "train", "--json")
    assert code == 2 and "--json never asks" in json.loads(out)["error"]
    code, out, err = run("down", "train", "--yes", "--json", "--poll", "0.05", "--timeout", "30")
    doc = json.loads(out)
    assert code == 0 and doc == {"jobs": ["train"], "machines": 1, "confirmed": True, "remaining": [], "errors": []}
    assert "terminating 1 machine…" in err and "none left" in err
    assert machines(clouds) == 0
    code, out, _ = run("down", "ghost", "--yes", "--json")
    assert code == 1 and "ghost" in json.loads(out)["error"]


@pytest.mark.parametrize(("names", "machines_said"), [(["train"], "1 machine"), (["train", "eval"], "2 machines")])
def test_down_says_one_machine_and_two_machines(tmp_path: Path, env: dict[str, str], clouds: FakeClouds,
                                                names: list[str], machines_said: str) -> None:
    for name in names:   # the fake has one RTX 4090 that passes the careful filters: eval asks for an A100
        path = job(tmp_path, name)
        if name == "eval":
            path.write_text(path.read_text().replace("gpu: RTX4090", "gpu: A100-80G"))
        code, out, err = run("apply", str(path), "--yes")
        assert code == 0, out + err
    assert machines(clouds) == len(names)
    code, out, err = run("down", *names, "--yes", "--poll", "0.05", "--timeout", "30")
    assert code == 0, out + err
    targets = ", ".join(names)
    assert f"marked for teardown: {targets} ({machines_said})\n" in out
    assert f"down: {targets}; {machines_said} terminated, confirmed by the providers\n" in out
    assert f"terminating {machines_said}…" in err
    assert "(s)" not in out + err and machines(clouds) == 0


def test_a_failed_down_leaves_its_job_in_status_and_down_all_takes_it(tmp_path: Path, env: dict[str, str],
                                                                       clouds: FakeClouds,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A down that fails (here: the cloud refuses the key) leaves a machine billing: status must not say
    "no jobs" then, and `down --all` must take it."""
    assert run("apply", str(job(tmp_path)), "--yes")[0] == 0
    monkeypatch.setenv("VAST_API_KEY", "not-the-key")
    code, _, err = run("down", "train", "--yes", "--poll", "0.05", "--timeout", "0.2")
    assert code == 1 and "1 machine not confirmed gone" in err and machines(clouds) == 1
    # Each poll meets the refused key again: it is said once, before the verdict, with what to do next.
    assert err.count("warning: vastai: list failed: vastai: API key refused") == 1
    assert err.index("API key refused") < err.index("not confirmed gone")
    assert "hint: they may still bill: fix what the warnings above say, then run `orch down train --yes` again" in err
    code, out, _ = run("status")
    # Its machine still bills: the job's line says so (never "stopped"), and a legend says what the mark means.
    [line] = [ln for ln in out.splitlines() if ln.startswith("train ")]
    assert line.split()[1] == "stopping!" and "stopped*" not in out, out
    assert "!: its machine is not confirmed gone and still bills (see the machines below)\n" in out
    assert "total: 1 live instance" in out and max(map(len, out.splitlines())) <= 80
    [doc] = json.loads(run("status", "--json")[1])["jobs"]
    assert (doc["desired_state"], doc["still_billing"], doc["live_instances"]) == ("deleted", True, 1)
    monkeypatch.setenv("VAST_API_KEY", env["VAST_API_KEY"])
    # --all takes it too (not "no jobs to tear down", leaving it billing), and a job down already ended is left be.
    assert run("apply", str(job(tmp_path, "done")), "--no-launch")[0] == 0
    assert run("down", "done", "--yes", "--poll", "0.05", "--timeout", "30")[0] == 0
    code, out, err = run("down", "--all", "--yes", "--poll", "0.05", "--timeout", "30")
    assert code == 0 and "marked for teardown: train (1 machine)" in out, out + err
    assert machines(clouds) == 0
    code, out, _ = run("status")
    assert code == 0 and "no jobs" in out


def test_logs_of_a_job_with_no_report_channel_say_how_to_get_one(tmp_path: Path, env: dict[str, str]) -> None:
    assert run("apply", str(job(tmp_path)), "--yes")[0] == 0
    try:
        code, out, err = run("logs", "train")
        assert code == 1 and out == ""
        assert "its machine is not reachable over SSH" in err and "hint: set daemon.state_store" in err, err
    finally:
        down_all()


def test_down_of_many_jobs_fits_80_columns(tmp_path: Path, env: dict[str, str]) -> None:
    names = ["pretrain-llama-stage-one", "pretrain-llama-stage-two", "pretrain-llama-stage-three"]
    for name in names:
        assert run("apply", str(job(tmp_path, name)), "--no-launch")[0] == 0
    code, out, err = run("down", *names, "--yes", "--poll", "0.05", "--timeout", "30")
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80, out
    said = " ".join(out.split())
    assert f"marked for teardown: {', '.join(names)} (0 machines)" in said
    assert f"down: {', '.join(names)}; 0 machines terminated, confirmed by the providers" in said


def test_machines_left_counts_per_provider() -> None:
    from orchestrator.app.status import InstanceView
    from orchestrator.cli.down import machines_left
    from providers.base import InstanceState, Market

    def view(provider: str) -> InstanceView:
        return InstanceView("j", provider, "i", "l", "t", "r", Market.SPOT, InstanceState.RUNNING, 1.0)

    assert machines_left([view("gcp"), view("aws"), view("gcp")]) == "3 machines left: aws 1, gcp 2"
    assert machines_left([view("aws")]) == "1 machine left: aws 1"
    assert machines_left([]) == "none left"


# -- status --watch ------------------------------------------------------------------------------------------

class Frames:
    """Stands in for the wait between frames: the n-th wait ends the watch (as Ctrl-C would)."""

    def __init__(self, frames: int) -> None:
        self.left = frames
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.left -= 1
        if self.left <= 0:
            raise KeyboardInterrupt


def test_status_watch_redraws_until_interrupted(tmp_path: Path, env: dict[str, str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    frames = Frames(3)
    monkeypatch.setattr(watch, "sleep", frames)
    assert run("apply", str(job(tmp_path)), "--no-launch")[0] == 0
    code, out, _ = run("status", "--watch", "--interval", "0.5")
    assert code == 0 and frames.waits == [0.5, 0.5, 0.5]
    assert out.count("total: 0 live instances") == 3 and out.count("\n\nJOB ") == 2
    frames = Frames(2)
    monkeypatch.setattr(watch, "sleep", frames)
    code, out, _ = run("status", "--watch", "--json")
    # JSON Lines: every line one document, no blank line between two refreshes (a line-by-line reader failed)
    assert code == 0 and [json.loads(line)["totals"]["jobs"] for line in out.splitlines()] == [1, 1]


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "inf"])
def test_status_watch_refuses_an_interval_that_is_not_positive_and_finite(interval: str) -> None:
    code, _, err = run("status", "--watch", "--interval", interval)
    assert code == 2 and "--interval must be a finite number of seconds > 0" in err


def test_watch_on_a_terminal_redraws_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    frames = Frames(2)
    monkeypatch.setattr(watch, "sleep", frames)
    n = iter(range(10))
    out = io.StringIO()
    watch.watch(lambda: f"frame {next(n)}", 1.0, stream=out, terminal=True)
    text = out.getvalue()
    assert "frame 0" in text and "frame 1" in text and "\x1b[" in text   # cursor movement, not a new block


# -- --version ----------------------------------------------------------------------------------------------

def test_version_from_the_installed_metadata_else_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    from orchestrator import __version__

    code, out, _ = run("--version")
    assert code == 0 and out == f"orch {importlib.metadata.version('orch')}\n"

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert run("--version")[1] == f"orch {__version__}\n"


# -- orch budgets -------------------------------------------------------------------------------------------

def test_budgets_show_spend_and_burn_against_each_budget(tmp_path: Path, env: dict[str, str]) -> None:
    code, out, _ = run("budgets")
    assert code == 0 and "no budgets configured" in out
    config = Path(env["ORCH_CONFIG"])
    doc = yaml.safe_load(config.read_text())
    doc["budgets"] = [{"name": "everything", "monthly_usd": 1000, "max_usd_per_hour": 50},
                      {"name": "vision", "match": {"project": "vision"}, "max_usd_per_hour": 1}]
    config.write_text(yaml.safe_dump(doc))
    assert run("apply", str(job(tmp_path)), "--yes")[0] == 0
    try:
        code, out, _ = run("budgets", "--json")
        everything, vision = json.loads(out)
        assert code == 0 and everything["burn_usd_per_hour"] > 0 and everything["at_cap"] is False
        assert vision["burn_usd_per_hour"] == 0 and vision["match"] == ["vision"]
        code, out, _ = run("budgets")
        assert code == 0 and all(len(line) <= 80 for line in out.splitlines()), out
        assert "everything" in out and "of $1,000.00" in out and "project vision" in out
    finally:
        down_all()
    config.write_text(yaml.safe_dump({**doc, "budgets": [{"name": "x"}]}))
    code, out, _ = run("budgets", "--json")
    assert code == 2 and "budgets.x: give monthly_usd" in json.loads(out)["error"]


# -- nothing is launched that cannot start ----------------------------------------------------------------

def test_a_job_whose_machine_could_not_start_is_said_up_front_and_not_launched(
        tmp_path: Path, env: dict[str, str], clouds: FakeClouds, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    path = tmp_path / "jobs" / "needs-token.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(MANIFEST.format(name="needs-token") + "secrets: [HF_TOKEN]\n")
    code, out, err = run("plan", str(path), "--configured", "--json")
    [plan] = json.loads(out)
    assert any(w.startswith("boot: ") and "HF_TOKEN" in w for w in plan["warnings"]), plan["warnings"]
    code, out, err = run("apply", str(path), "--dry-run")
    assert code == 0, err
    assert "plan: 0 jobs to launch" in out and "not launched, it waits:" in out and "HF_TOKEN" in out
    code, out, err = run("apply", str(path), "--yes")
    assert machines(clouds) == 0                       # recorded, but no machine that could not start
    monkeypatch.setenv("HF_TOKEN", "hf-value")
    code, out, err = run("apply", str(path), "--dry-run", "--json")
    assert [launch["boot_problem"] for launch in json.loads(out)["launches"]] == [None]


#: A long but valid job name (at most 63): the result lines that name it must still fit 80 columns.
LONG_NAME = "llama-3-70b-instruct-finetune-on-long-context-data"


def test_apply_result_lines_with_a_long_job_name_fit_80_columns(tmp_path: Path, env: dict[str, str],
                                                                clouds: FakeClouds) -> None:
    waits = tmp_path / "jobs" / f"{LONG_NAME}-x.yaml"
    waits.parent.mkdir(exist_ok=True)
    waits.write_text(MANIFEST.format(name=f"{LONG_NAME}-x").replace("{gpu: RTX4090}", "{gpu: RTX4090}\n"
                                                                     "regions: {allow: [nowhere-*]}"))
    code, out, err = run("apply", str(job(tmp_path, LONG_NAME)), str(waits), "--no-launch", "--dry-run")
    assert code == 0 and max(map(len, out.splitlines())) <= 80, out + err
    assert "plan: 1 job to launch (by `orch apply` or a daemon, later), $" in " ".join(out.split())
    code, out, err = run("apply", str(job(tmp_path, LONG_NAME)), str(waits), "--yes")
    try:
        assert code == 0, out + err
        assert max(map(len, out.splitlines())) <= 80, out
        said = " ".join(out.split())                    # wrapped, never cut: every word is there
        assert f"launched {LONG_NAME} on vastai " in said
        assert f"{LONG_NAME}-x no eligible offer: it waits (see `orch plan`)" in said
        assert f"waiting {LONG_NAME}-x: " in said and f"1 launched, 1 waits: {LONG_NAME}-x: " in said
    finally:
        down_all()


@pytest.mark.parametrize("recorded", [False, True], ids=["would-be-created", "would-be-unchanged"])
def test_dry_run_lines_fit_80_columns_with_the_longest_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            recorded: bool) -> None:
    """A 63-character name (the most a name may have) after "would be unchanged" was an 82-column line: it goes
    on the next line, whole. No provider: nothing launches, so the second apply finds it unchanged."""
    config = tmp_path / "config.yaml"
    config.write_text("owner: tester\n")
    monkeypatch.setenv("ORCH_CONFIG", str(config))
    monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'orch.db'}")
    name = "a" * 62 + "b"
    path = job(tmp_path, name)
    if recorded:
        out = run("apply", str(path))[1]   # exit 1: nothing launched, but the job is recorded
        assert "1 created, 0 updated" in out, out
    code, out, err = run("apply", str(path), "--dry-run")
    assert code == 0, err
    lines = out.splitlines()
    assert max(map(len, lines)) <= 80, "\n".join(lines)
    change = "unchanged" if recorded else "created"
    at = lines.index(f"would be {change}")
    assert lines[at + 1] == " " * 10 + name
