"""Defects a new user met running the documented commands (each test fails without its fix).

- ``orch smoke``'s plan (shown before money is spent) cut the MACHINE column at 26 characters without a mark,
  so GCP's ``e2-standard-2 us-central1-a`` read ``e2-standard-2 us-central1-``; a provider it cannot plan for had
  its reason cut at 79 characters, and that reason (a cloud's error text) was printed unredacted, in text and
  in ``--json``.
- A misspelt command (``orch quot``) was answered "Did you mean 'quote'? Did you mean 'quote'?".
- ``orch plan --json`` that failed (a bad manifest, no job, a bad config) wrote nothing on stdout, where ``orch
  apply --json`` and ``orch validate --json`` write the error document.
- A manifest whose model cannot run as asked was told to "use --precision ...", a flag of ``orch fit`` that
  neither ``orch plan`` nor a manifest has (the field is model.precision).
- ``gpu: 4090`` (a YAML number) was refused with "Input should be a valid list", though one name is
  accepted; what it lacks is the GPU's name.
- The manifest error document of ``validate --json`` and ``apply --json`` (now ``plan --json`` too) carried
  a credential whole where the stderr line redacts it (an env key shaped like a token, named in the hint).
- ``down --json`` and ``apply --json`` carried the clouds' errors (and apply's waiting reasons) unredacted,
  where their stderr lines are redacted.
- ``orch providers`` printed a provider's detail (an unreachable API's own error text) unredacted, text and
  ``--json``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from orchestrator.app.smoke_targets import plan_targets
from providers.errors import ProviderError
from tests.fakes.memory_provider import MemoryProvider
from tests.test_smoke import OPTS, offer

_TOKEN = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"   # a GitHub token's shape (not a real one)


def test_smoke_plan_names_the_whole_zone_it_would_launch_in(capsys: Any) -> None:
    from orchestrator.cli.smoke import _print_plan

    gcp = replace(offer(provider="gcp"), region="us-central1", zone="us-central1-a")
    azure = replace(offer(provider="azure"), region="northcentralus", zone=None)
    _print_plan(plan_targets({"gcp": MemoryProvider("gcp", [gcp]), "azure": MemoryProvider("azure", [azure])},
                             OPTS), as_json=False)
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["gcp", "e2-standard-2", "us-central1-a"]
    assert out[2].split()[:2] == ["CPU", "on-demand"]          # the row goes on, in its columns, on the next line
    assert out[2].index("CPU") == out[0].index("KIND")
    assert out[3].split() == ["azure", "Standard_D2s_v5", "northcentralus"]
    assert all(len(line) <= 80 for line in out), [len(line) for line in out]


def _failing(name: str, message: str) -> MemoryProvider:
    provider = MemoryProvider(name, [offer(provider=name)])
    provider.fail("offers", ProviderError(message))
    return provider


def test_smoke_plan_says_why_a_provider_cannot_be_smoked_whole_and_redacted(capsys: Any) -> None:
    from orchestrator.cli.smoke import _print_plan

    why = (f"GET https://console.vast.ai/api/v0/bundles/?api_key={_TOKEN} failed: the server answered 503 "
           "Service Unavailable, try again later")
    targets = plan_targets({"vastai": _failing("vastai", why)}, OPTS)
    _print_plan(targets, as_json=False)
    text = capsys.readouterr().out
    said = " ".join(line.strip() for line in text.splitlines()[1:-2])   # the lines between header and footer
    assert _TOKEN not in text and "api_key=<redacted: a GitHub token> failed" in said, text
    assert said.split()[:4] == ["vastai", "cannot:", "listing", "offers:"] and said.endswith("try again later"), text
    assert all(len(line) <= 80 for line in text.splitlines())
    _print_plan(targets, as_json=True)
    shown = json.loads(capsys.readouterr().out)
    assert _TOKEN not in json.dumps(shown) and "<redacted: a GitHub token>" in shown["targets"][0]["problem"]


def test_smoke_results_json_redacts_the_error(capsys: Any) -> None:
    from orchestrator.app.smoke import SmokeResult
    from orchestrator.cli.smoke import _print_results

    _print_results([SmokeResult("vastai", None, error=f"launch refused: api_key={_TOKEN}")], as_json=True)
    text = capsys.readouterr().out
    assert _TOKEN not in text and "<redacted: a GitHub token>" in json.loads(text)["results"][0]["error"]


def test_a_misspelt_command_is_answered_with_one_suggestion() -> None:
    from typer.testing import CliRunner

    from orchestrator.cli.main import app

    for args, suggestion in ((["quot"], "'quote'"), (["catalog", "refrsh"], "'refresh'"), (["db", "curent"],
                                                                                           "'current'")):
        result = CliRunner().invoke(app, args)
        said = " ".join(result.stderr.split())
        assert result.exit_code == 2 and f"Did you mean {suggestion}?" in said, said
        assert said.count("Did you mean") == 1, said   # Typer's and click's both said it


def test_plan_json_that_fails_writes_json_on_stdout_as_apply_does(tmp_path: Any, monkeypatch: Any) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli.main import app

    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: orch/v1\nkind: Job\nname: a\nresources: {gpu: L4, count: -1}\n"
                   "run: {launcher: command, command: x}\n")
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    for cmd in (["plan", "--json"], ["apply", "--json", "--dry-run"]):
        result = CliRunner().invoke(app, [*cmd, str(bad)])
        doc = json.loads(result.stdout)
        assert result.exit_code == 2, (cmd, result.stdout)
        assert doc["errors"][0]["field"] == "resources.count" and doc["errors"][0]["line"] == 4, doc
        assert "resources.count" in result.stderr                # the plain line, still on stderr
    result = CliRunner().invoke(app, ["plan", "--json", str(tmp_path / "empty.yaml")])
    assert result.exit_code == 2 and json.loads(result.stdout)["error"].startswith("no jobs in"), result.stdout
    config = tmp_path / "config.yaml"
    config.write_text("providers:\n  aws: {regions: [us-east-1], bogus: 1}\n")
    monkeypatch.setenv("ORCH_CONFIG", str(config))
    good = tmp_path / "good.yaml"
    good.write_text(bad.read_text().replace("count: -1", "count: 1") + "code: {enabled: false}\n")
    result = CliRunner().invoke(app, ["plan", "--json", "--configured", str(good)])
    assert result.exit_code == 2 and "providers.aws.bogus" in json.loads(result.stdout)["error"], result.stdout


_JOB = "apiVersion: orch/v1\nkind: Job\nname: a\nrun: {launcher: command, command: x}\ncode: {enabled: false}\n"


def test_a_manifest_is_told_its_own_field_not_orch_fits_flag(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli.main import app

    qlora = tmp_path / "qlora.yaml"
    qlora.write_text(_JOB + "model: {params: 8B, method: qlora, precision: fp32}\n")
    result = CliRunner().invoke(app, ["validate", str(qlora)])
    assert result.exit_code == 2 and "model: QLoRA computes in 16-bit" in result.stderr, result.stderr
    assert "--precision" not in result.stderr and "precision: bf16 or fp16" in result.stderr, result.stderr
    t4 = tmp_path / "t4.yaml"
    t4.write_text(_JOB + "model: {params: 8B, method: lora}\nresources: {gpu: T4}\n")
    result = CliRunner().invoke(app, ["plan", "--json", str(t4)])
    [warning] = [w for w in json.loads(result.stdout)[0]["warnings"] if "bf16" in w]
    assert warning.endswith("set model.precision: fp16") and "--precision" not in warning, warning


def test_a_gpu_written_as_a_number_is_asked_for_its_name_not_for_a_list(tmp_path: Any) -> None:
    from orchestrator.manifest import ManifestError, load_manifests

    path = tmp_path / "job.yaml"
    path.write_text(_JOB + "resources: {gpu: 4090}\n")
    try:
        load_manifests([path])
    except ManifestError as exc:
        [error] = exc.errors
    else:
        raise AssertionError("gpu: 4090 was accepted")
    assert (error.line, error.field) == (6, "resources.gpu") and "valid list" not in error.message, error.format()
    assert "by its name" in error.message and "gpu: RTX4090-24G" in (error.hint or ""), error.format()


def test_the_manifest_error_document_redacts_as_the_line_does(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli.main import app

    token = "hf_" + "LeakProbeQwErTyUiOpAsDfGhJkLzXcVbNm01"
    path = tmp_path / "job.yaml"
    path.write_text(_JOB + f"resources: {{gpu: L4}}\nenv: {{{token}: '1'}}\n")
    for cmd in (["validate", "--json"], ["plan", "--json"], ["apply", "--json", "--dry-run"]):
        result = CliRunner().invoke(app, [*cmd, str(path)])
        [error] = json.loads(result.stdout)["errors"]
        assert result.exit_code == 2 and error["field"] == "env", (cmd, result.stdout)
        assert token not in result.stdout + result.stderr, (cmd, result.stdout)    # the hint named the key whole
        # The key is the token: the hint names no variable after it (not even redacted), it says what env names are
        assert "variable names such as HF_TOKEN" in error["hint"] and "redacted" not in error["hint"], error


def test_down_and_apply_json_redact_the_clouds_errors_as_their_text_does(capsys: Any) -> None:
    """A terminate or launch error is a cloud's text: the warning lines redact it; ``--json`` carried it whole."""
    from types import SimpleNamespace

    from orchestrator.app.down import DownOutcome
    from orchestrator.app.launching import LaunchOutcome
    from orchestrator.cli.apply_flow import _json
    from orchestrator.cli.down import _down_result

    said = f"terminate vastai 42: 401 for https://console.vast.ai/api/v0/instances/42/?api_key={_TOKEN}"
    _down_result(["job"], [], DownOutcome(["job"], [], errors=[said]), as_json=True)
    doc = json.loads(capsys.readouterr().out)
    assert _TOKEN not in json.dumps(doc) and doc["errors"][0].endswith("api_key=<redacted: a GitHub token>"), doc
    outcome = LaunchOutcome(waiting={"job": f"launch refused: token {_TOKEN}"}, errors=[f"launch x: {_TOKEN}"])
    doc = _json(SimpleNamespace(to_json=dict), "orch apply", None, outcome)   # type: ignore[arg-type]
    assert _TOKEN not in json.dumps(doc), doc
    assert doc["waiting"]["job"].endswith("<redacted: a GitHub token>") and "<redacted" in doc["errors"][0], doc


def test_providers_redacts_a_clouds_words_in_its_detail(monkeypatch: Any) -> None:
    from typer.testing import CliRunner

    import orchestrator.app.providers_status as providers_status
    from orchestrator.app.providers_status import ProviderReadiness, ProviderStatus
    from orchestrator.cli.main import app

    def unreachable(config: Any, name: str) -> ProviderStatus:   # as a ProviderError's text reads
        return ProviderStatus(name, name, ProviderReadiness.UNREACHABLE, f"{name}: 502 from https://x/?key={_TOKEN}")

    monkeypatch.setattr(providers_status, "provider_status", unreachable)
    for args in (["providers"], ["providers", "--json"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0 and _TOKEN not in result.stdout, result.stdout
        assert "redacted" in result.stdout, result.stdout
