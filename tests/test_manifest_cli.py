"""``orch validate`` and ``orch schema`` through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli.main import app

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
GOOD = (EXAMPLES / "command.yaml").read_text()


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:   # click 8.2+: stderr is always separate
        return CliRunner()


def test_validate_examples_via_subprocess() -> None:
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "validate", "examples"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok examples (4 jobs)\n"


def test_validate_errors_via_subprocess_have_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("gpu: [L4, A10G, T4]", "gpu: [L4, A1OG]\n  count: -2"))
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(bad)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines == [
        f"{bad}:7:13: resources.gpu[1]: unknown GPU 'A1OG' (did you mean A10G-24G or A10-24G?)",
        f"{bad}:8:10: resources.count: Input should be greater than or equal to 1",
    ]


def test_validate_counts_jobs_per_argument(tmp_path: Path) -> None:
    good = GOOD.replace("code: {path: examples}", "code: {enabled: false}")   # tmp_path is in no repository
    one = tmp_path / "one.yaml"
    one.write_text(good)
    many = tmp_path / "dir"
    many.mkdir()
    (many / "a.yml").write_text(good.replace("eval-sweep", "a") + "---\n" + good.replace("eval-sweep", "b"))
    result = _runner().invoke(app, ["validate", str(one), str(many)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [f"ok {one} (1 job)", f"ok {many} (2 jobs)"]


def test_validate_reports_every_file_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD.replace("max_price_hr: 0.8", "max_price_hr: cheap"))
    (tmp_path / "b.yaml").write_text("name: [unclosed\n")
    (tmp_path / "c.yaml").write_text(GOOD.replace("eval-sweep", "other").replace("secrets", "x")
                                     + "secrets: [sk-live-abcdef0123456789]\n")
    result = _runner().invoke(app, ["validate", str(tmp_path), str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2
    err = result.stderr.splitlines()
    assert len(err) == 4, err
    assert err[0].startswith(f"{tmp_path / 'missing.yaml'}: no such file")
    assert err[1].startswith(f"{tmp_path / 'a.yaml'}:9:15: max_price_hr: 'cheap' is not a price")
    assert err[2].startswith(f"{tmp_path / 'b.yaml'}:2:1: YAML syntax error")
    secrets_line = len(GOOD.splitlines()) + 1
    assert err[3].startswith(f"{tmp_path / 'c.yaml'}:{secrets_line}:11: secrets[0]: give the NAME")
    assert "sk-live" not in result.stderr


def _git_repo(root: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True, capture_output=True)
    return root


def test_validate_refuses_a_code_path_that_is_no_directory_of_the_repository(tmp_path: Path) -> None:
    repo = _git_repo(tmp_path / "repo")
    (repo / "jobs").mkdir()
    (repo / "train").mkdir()
    (repo / "NOTES").write_text("a file, not a folder\n")
    job = repo / "jobs" / "job.yaml"
    # code.path is relative to the repository's top, as the code pack reads it: train/ is there, not in jobs/.
    job.write_text(GOOD.replace("{path: examples}", "{path: train}"))
    result = _runner().invoke(app, ["validate", str(job)])
    assert result.exit_code == 0, result.stderr
    line = GOOD.splitlines().index("code: {path: examples}") + 1
    job.write_text(GOOD.replace("{path: examples}", "{path: trian}"))
    result = _runner().invoke(app, ["validate", str(job)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{job}:{line}:14: code.path: 'trian': no such directory in the repository (did you mean 'train'? "
        f"the path is relative to the repository's top, {repo.resolve()})"]
    job.write_text(GOOD.replace("{path: examples}", "{path: NOTES}"))
    result = _runner().invoke(app, ["validate", str(job), "--json"])
    assert result.exit_code == 2
    [error] = json.loads(result.stdout)["errors"]
    assert (error["line"], error["column"], error["field"]) == (line, 14, "code.path")
    assert error["message"] == "'NOTES': is not a directory in the repository"
    # Shipping nothing needs no directory.
    job.write_text(GOOD.replace("{path: examples}", "{enabled: false, path: gone}"))
    assert _runner().invoke(app, ["validate", str(job)]).exit_code == 0


def test_validate_refuses_code_outside_any_repository_as_apply_does(tmp_path: Path) -> None:
    """"ok" from validate, then plan and apply refused the file: a code: section has nothing to ship there."""
    job = tmp_path / "job.yaml"
    job.write_text(GOOD)
    line = GOOD.splitlines().index("code: {path: examples}") + 1
    result = _runner().invoke(app, ["validate", str(job)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{job}:{line}:7: code: the manifest is in no git repository, so code: has nothing to ship (git init and "
        "commit, or code: {enabled: false})"]
    assert _runner().invoke(app, ["plan", str(job)]).exit_code == 2
    # Without code:, nothing is shipped and nothing is needed; so with code: {enabled: false}.
    job.write_text(GOOD.replace("code: {path: examples}\n", ""))
    assert _runner().invoke(app, ["validate", str(job)]).exit_code == 0
    job.write_text(GOOD.replace("code: {path: examples}", "code: {enabled: false}"))
    assert _runner().invoke(app, ["validate", str(job)]).exit_code == 0


def test_validate_needs_a_path() -> None:
    result = _runner().invoke(app, ["validate"])
    assert result.exit_code == 2


def test_schema_is_valid_json_schema_and_accepts_the_examples() -> None:
    result = _runner().invoke(app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in sorted(EXAMPLES.glob("*.yaml")):
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert errors == [], (path, [e.message for e in errors])
    assert schema["additionalProperties"] is False
    bad = yaml.safe_load(GOOD)
    bad["resources"]["count"] = 0
    assert not validator.is_valid(bad)
    bad = yaml.safe_load(GOOD)
    bad["policies"]["idle"]["window"] = "10 minutes"
    assert not validator.is_valid(bad)


def test_shipped_schema_file_is_current() -> None:
    result = _runner().invoke(app, ["schema"])
    shipped = (REPO / "docs" / "orch-manifest.schema.json").read_text()
    assert json.loads(shipped) == json.loads(result.stdout), \
        "regenerate: python -m orchestrator schema > docs/orch-manifest.schema.json"


@pytest.mark.parametrize("module", ["orchestrator.cli.manifests", "orchestrator.cli.db"])
def test_cli_modules_import_light(module: str) -> None:
    code = (f"import sys, {module}; heavy = [m for m in ('pydantic', 'sqlmodel', 'sqlalchemy', 'alembic') "
            "if m in sys.modules]; print(heavy)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
