"""The manifest schema and loader: valid manifests normalise; every bad input is a ManifestError at its line."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.inputs.durations import format_duration, parse_duration, parse_price
from orchestrator.manifest import Manifest, ManifestError, load_manifests, parse_text

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

MINIMAL = """\
apiVersion: orch/v1
kind: Job
name: tiny
resources:
  gpu: a100
run:
  launcher: torchrun
  script: train.py
"""


def _errors(text: str, tmp_path: Path, name: str = "job.yaml") -> list[ManifestError]:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ManifestError) as info:
        load_manifests([path])
    return info.value.errors


def _one(text: str, tmp_path: Path) -> ManifestError:
    errors = _errors(text, tmp_path)
    assert len(errors) == 1, [str(e) for e in errors]
    return errors[0]


def test_minimal_manifest_and_defaults() -> None:
    [(m, _)] = parse_text(MINIMAL)
    assert m.resources.gpu == ["A100-40G"]
    assert (m.resources.count, m.resources.nodes, m.market.value) == (1, 1, "auto")
    assert m.policies.idle.min_gpu_util_pct == 5
    assert m.policies.idle.window == timedelta(minutes=15)
    assert m.policies.idle.action.value == "terminate"
    assert m.policies.max_relaunches == 10
    assert m.policies.preempted_zone_cooldown == timedelta(minutes=30)
    assert m.secrets == [] and m.env == {}


def test_examples_are_valid_one_per_launcher() -> None:
    loaded = load_manifests([EXAMPLES])
    launchers = sorted(item.manifest.run.launcher.value for item in loaded)
    assert launchers == ["accelerate", "command", "deepspeed", "torchrun"]
    for item in loaded:
        assert Manifest.model_validate(item.manifest.to_json()) == item.manifest
        assert item.content_hash.startswith("sha256:")


def test_normalisation_of_names_prices_durations_and_lists() -> None:
    text = MINIMAL.replace("gpu: a100", "gpu: [H100, 'A100 80GB', h100-80g]\n  count: 8\n  nodes: 2") + """\
max_price_hr: "$12.50/h"
providers: {allow: [Vast, lambdalabs, aws], deny: [gce]}
regions: {allow: ["us-*", "europe-west4-?"]}
setup: |
  pip install -r requirements.txt
  echo ready
policies:
  budget_usd: "$99"
  deadline: 1h30m
  idle: {window: 2h, action: stop}
env: {EPOCHS: 3, DEBUG: true, NAME: x}
secrets: [HF_TOKEN, _X1]
"""
    [(m, _)] = parse_text(text)
    assert m.resources.gpu == ["H100-80G", "A100-80G"]
    assert m.total_gpus == 16
    assert m.max_price_hr == 12.5
    assert m.providers.allow == ["vastai", "lambda", "aws"] and m.providers.deny == ["gcp"]
    assert m.setup == ["pip install -r requirements.txt", "echo ready"]
    assert m.policies.budget_usd == 99
    assert m.policies.deadline == timedelta(hours=1, minutes=30)
    applied = datetime(2026, 1, 1, tzinfo=UTC)
    assert m.policies.deadline_at(applied) == applied + timedelta(minutes=90)
    assert m.env == {"EPOCHS": "3", "DEBUG": "true", "NAME": "x"}
    assert m.to_json()["policies"]["deadline"] == "1h30m"


def test_absolute_deadline_is_utc() -> None:
    [(m, _)] = parse_text(MINIMAL + "policies: {deadline: '2030-01-15T18:00:00+02:00'}\n")
    assert m.policies.deadline == datetime(2030, 1, 15, 16, 0, tzinfo=UTC)
    [(m, _)] = parse_text(MINIMAL + "policies: {deadline: 2030-01-15 18:00:00}\n")   # a YAML timestamp
    assert m.policies.deadline == datetime(2030, 1, 15, 18, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "expected"), [
    ("30s", timedelta(seconds=30)), ("15m", timedelta(minutes=15)), ("2h", timedelta(hours=2)),
    ("1d", timedelta(days=1)), ("1h30m", timedelta(minutes=90)), ("1.5h", timedelta(minutes=90)),
    (90, timedelta(seconds=90)), ("2W", timedelta(weeks=2)),
])
def test_durations_parse(text: object, expected: timedelta) -> None:
    assert parse_duration(text) == expected
    assert parse_duration(format_duration(expected)) == expected


@pytest.mark.parametrize("bad", ["-5m", "5", "15 minutes", "m", "", "1h-30m", True, None, [], -1, float("nan")])
def test_bad_durations_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


@pytest.mark.parametrize(("text", "expected"), [("$2.50", 2.5), ("2.5", 2.5), ("2.5/h", 2.5), (3, 3.0),
                                                (".5", 0.5), ("$ 4 / hr", 4.0), (0, 0.0)])
def test_prices_parse(text: object, expected: float) -> None:
    assert parse_price(text) == expected


@pytest.mark.parametrize("bad", ["-1", "$-2", -0.5, "2 dollars", "$", "inf", float("inf"), True, None])
def test_bad_prices_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_price(bad)


# -- each bad input: the message, the field and the position ---------------------------------------

def test_yaml_syntax_error_has_the_mark(tmp_path: Path) -> None:
    e = _one("apiVersion: orch/v1\nkind: Job\nname: x\n  resources: [\n", tmp_path)
    assert (e.line, e.col) == (4, 12)
    assert "YAML syntax error" in e.message
    assert str(e).startswith(f"{tmp_path / 'job.yaml'}:4:12: YAML syntax error")


def test_unclosed_flow_sequence(tmp_path: Path) -> None:
    e = _one(MINIMAL + "data: [\n", tmp_path)
    assert e.line is not None and e.line >= 9 and "YAML syntax error" in e.message


def test_wrong_types(tmp_path: Path) -> None:
    errors = _errors(MINIMAL.replace("gpu: a100", "gpu: a100\n  count: '4'\n  nodes: 1.5") + "setup: 3\n",
                     tmp_path)
    by_field = {e.field: e for e in errors}
    assert set(by_field) == {"resources.count", "resources.nodes", "setup"}
    assert by_field["resources.count"].line == 6 and "integer" in by_field["resources.count"].message
    assert by_field["resources.nodes"].line == 7
    assert by_field["setup"].line == 11


@pytest.mark.parametrize(("snippet", "field", "got", "fields"), [
    ("regions: us-east-1\n", "regions", "text", "allow, deny"),
    ("providers: [aws]\n", "providers", "a list", "allow, deny"),
    ("checkpoint: /ckpt\n", "checkpoint", "text", "path, store, "),
])
def test_a_section_given_as_a_value_names_its_fields_not_orchs_class(snippet: str, field: str, got: str,
                                                                     fields: str, tmp_path: Path) -> None:
    """``regions: us-east-1`` said "Input should be a valid dictionary or instance of RegionFilter"."""
    e = _one(MINIMAL + snippet, tmp_path)
    assert (e.field, e.message) == (field, f"must be a mapping (got {got})")
    assert e.hint is not None and e.hint.startswith(f"its fields: {fields}")


def test_document_that_is_not_a_mapping(tmp_path: Path) -> None:
    e = _one("- just\n- a list\n", tmp_path)
    assert (e.line, e.col) == (1, 1) and "mapping" in e.message


def test_unknown_field_did_you_mean(tmp_path: Path) -> None:
    errors = _errors(MINIMAL.replace("  count", "").replace("gpu: a100", "gpu: a100\n  gpus_per_node: 2\n  nodez: 2")
                     + "polices: {}\n", tmp_path)
    by_field = {e.field: e for e in errors}
    assert by_field["resources.nodez"].hint == "did you mean 'nodes'?"
    assert (by_field["resources.nodez"].line, by_field["resources.nodez"].col) == (7, 3)
    assert by_field["polices"].hint == "did you mean 'policies'?"
    assert by_field["polices"].line == 11
    assert "unknown field" in str(by_field["resources.gpus_per_node"])


def test_unknown_gpu_suggests(tmp_path: Path) -> None:
    e = _one(MINIMAL.replace("gpu: a100", "gpu: [A100-80G, H1OO]"), tmp_path)
    assert e.field == "resources.gpu[1]"
    assert (e.line, e.col) == (5, 19)
    assert e.message == "unknown GPU 'H1OO'" and e.hint == "did you mean H100-80G?"


def test_an_empty_gpu_list_is_reported_at_its_field(tmp_path: Path) -> None:
    """``gpu: []`` is a check of the whole job (a model: block may size the GPUs instead), but it is written at
    resources.gpu: it was reported at 1:1, (document)."""
    e = _one(MINIMAL.replace("gpu: a100", "gpu: []"), tmp_path)
    assert (e.field, e.line, e.col) == ("resources.gpu", 5, 8)
    assert "say which GPUs" in e.message


def test_resources_without_a_gpu_are_reported_at_resources(tmp_path: Path) -> None:
    """No gpu under resources (and no model: block): the nearest written field is resources, not the document."""
    e = _one(MINIMAL.replace("  gpu: a100\n", "  count: 2\n"), tmp_path)
    assert (e.field, e.line, e.col) == ("resources", 5, 3)
    assert "say which GPUs" in e.message


def test_unknown_provider_suggests(tmp_path: Path) -> None:
    e = _one(MINIMAL + "providers: {allow: [runpd]}\n", tmp_path)
    assert e.field == "providers.allow[0]" and e.hint and "runpod" in e.hint


@pytest.mark.parametrize(("snippet", "field"), [
    ("resources:\n  gpu: a100\n  count: -1\n", "resources.count"),
    ("resources:\n  gpu: a100\n  nodes: 0\n", "resources.nodes"),
    ("resources:\n  gpu: a100\n  disk_gb: -10\n", "resources.disk_gb"),
    ("resources:\n  gpu: a100\nmax_price_hr: -3\n", "max_price_hr"),
    ("resources:\n  gpu: a100\nmax_price_hr: '$-3'\n", "max_price_hr"),
    ("resources:\n  gpu: a100\npolicies: {budget_usd: -1}\n", "policies.budget_usd"),
    ("resources:\n  gpu: a100\npolicies: {max_relaunches: -1}\n", "policies.max_relaunches"),
])
def test_negative_counts_and_prices(snippet: str, field: str, tmp_path: Path) -> None:
    text = MINIMAL.replace("resources:\n  gpu: a100\n", snippet)
    e = _one(text, tmp_path)
    assert e.field == field
    line_of_field = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.strip().startswith(
        field.split(".")[-1] + ":") or f"{field.split('.')[-1]}:" in ln)
    assert e.line == line_of_field


@pytest.mark.parametrize("bad", ["15 minutes", "-5m", "soon", "5"])
def test_bad_durations_in_manifest(bad: str, tmp_path: Path) -> None:
    e = _one(MINIMAL + f"policies:\n  idle:\n    window: '{bad}'\n", tmp_path)
    assert e.field == "policies.idle.window" and e.line == 11
    assert e.hint and "15m" in e.hint


@pytest.mark.parametrize("value", ["hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "HF_TOKEN=hf_abc", "ghp_x1Y2z3",
                                   "sk-proj-0123456789abcdef", "lower_case"])
def test_secret_given_as_a_value(value: str, tmp_path: Path) -> None:
    e = _one(MINIMAL + f"secrets: [OK_NAME, '{value}']\n", tmp_path)
    assert e.field == "secrets[1]"
    assert e.message == "give the NAME of an environment variable, not its value"
    assert value not in str(e)    # the secret is never echoed


def test_credential_in_env_is_refused(tmp_path: Path) -> None:
    e = _one(MINIMAL + "env:\n  WANDB_API_KEY: abc\n", tmp_path)
    assert e.field == "env.WANDB_API_KEY" and (e.line, e.col) == (10, 3)
    assert "abc" not in str(e)


def test_launcher_fields(tmp_path: Path) -> None:
    e = _one(MINIMAL.replace("  script: train.py\n", ""), tmp_path)
    assert e.field == "run" and "needs run.script" in e.message
    e = _one(MINIMAL.replace("launcher: torchrun", "launcher: command"), tmp_path)
    assert "needs run.command" in e.message
    e = _one(MINIMAL.replace("launcher: torchrun", "launcher: mpirun"), tmp_path)
    assert e.field == "run.launcher"


def test_uris_and_checkpoint_options(tmp_path: Path) -> None:
    e = _one(MINIMAL + "data: [{source: ftp://x/y, path: /d}]\n", tmp_path)
    assert e.field == "data[0].source"
    e = _one(MINIMAL + "checkpoint: {path: /c, store: https://x/y}\n", tmp_path)
    assert e.field == "checkpoint.store" and "s3://" in e.message
    e = _one(MINIMAL + "checkpoint: {path: /c, store: s3://b/p, resume: {arg: --r, env: R}}\n", tmp_path)
    assert e.field == "checkpoint.resume"
    e = _one(MINIMAL + "checkpoint: {path: /c, store: s3://b/p, notify: {signal: SIGKILL}}\n", tmp_path)
    assert e.field == "checkpoint.notify.signal"


def test_missing_required_fields(tmp_path: Path) -> None:
    errors = _errors("apiVersion: orch/v2\nkind: Job\nname: Bad_Name\n", tmp_path)
    by_field = {e.field: e for e in errors}
    # resources may be left out when a model: block sizes the GPUs (orchestrator.fit): the "neither" error
    # comes once the rest of the document is valid (tests/test_fit_plan.py)
    assert {"apiVersion", "name", "run"} <= set(by_field)
    assert by_field["run"].message == "required field is missing"
    assert by_field["apiVersion"].hint == "write apiVersion: orch/v1"
    assert by_field["name"].line == 3


@pytest.mark.parametrize(("field", "line"), [("name", "name: Eval_Sweep"), ("project", "project: My_Team")])
def test_a_bad_job_or_project_name_says_the_rule_in_words(field: str, line: str, tmp_path: Path) -> None:
    """Not pydantic's regular expression (what ``project:`` said), nor a rule cut short ("at most 63")."""
    e = _one(MINIMAL.replace("name: tiny", "name: tiny\nproject: team").replace(f"{field}: " + (
        "tiny" if field == "name" else "team"), line), tmp_path)
    assert e.field == field and "pattern" not in e.message
    assert e.message.endswith("starting with a letter and ending in a letter or digit, at most 63 characters")
    assert e.hint is not None and e.hint.startswith(f"e.g. {field}: ")


def test_duplicate_key_in_one_mapping(tmp_path: Path) -> None:
    e = _one(MINIMAL + "market: spot\nmarket: on-demand\n", tmp_path)
    assert e.line == 10 and "twice" in e.message


def test_duplicate_job_names_across_files_name_both_locations(tmp_path: Path) -> None:
    (tmp_path / "jobs" / "sub").mkdir(parents=True)
    first = tmp_path / "jobs" / "a.yaml"
    second = tmp_path / "jobs" / "sub" / "b.yml"
    first.write_text(MINIMAL)
    second.write_text("# another\n" + MINIMAL)
    with pytest.raises(ManifestError) as info:
        load_manifests([tmp_path / "jobs"])
    [e] = info.value.errors
    assert e.path == second and (e.line, e.col) == (4, 7)
    assert f"{first}:3:7" in e.message


def test_several_documents_in_one_file(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(MINIMAL + "---\n" + MINIMAL.replace("name: tiny", "name: tiny-2") + "---\n")
    loaded = load_manifests([path])
    assert [item.manifest.name for item in loaded] == ["tiny", "tiny-2"]
    path.write_text(MINIMAL + "---\n" + MINIMAL.replace("name: tiny", "name: tiny-2")
                    + "  bogus: 1\n")
    with pytest.raises(ManifestError) as info:
        load_manifests([path])
    # Positions count from the top of the file, not of the document.
    assert (info.value.line, info.value.field) == (18, "run.bogus")


def test_unreadable_missing_and_empty_inputs(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    paths = [missing, binary, empty_dir]
    if os.geteuid() != 0:   # root reads everything
        locked = tmp_path / "locked.yaml"
        locked.write_text(MINIMAL)
        locked.chmod(0)
        paths.append(locked)
    with pytest.raises(ManifestError) as info:
        load_manifests(paths)
    messages = {e.path.name: e.message for e in info.value.errors}
    assert messages["nope.yaml"] == "no such file or directory"
    assert "UTF-8" in messages["bin.yaml"]
    assert messages["empty"] == "no manifests here"
    if "locked.yaml" in {p.name for p in paths}:
        assert "cannot read" in messages["locked.yaml"]


def test_yaml_alias_bomb_and_self_reference_are_refused(tmp_path: Path) -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefg", "bcdefgh", strict=True))
    assert "too large" in _one(bomb, tmp_path).message
    e = _one("&a [*a]\n", tmp_path)
    assert e.line == 1


def test_python_tags_are_not_constructed(tmp_path: Path) -> None:
    e = _one(MINIMAL + "env: !!python/object/apply:os.system ['true']\n", tmp_path)
    assert e.line == 9


def test_content_hash_ignores_comments_and_spelling_but_not_meaning() -> None:
    from orchestrator.manifest import content_hash

    [(a, _)] = parse_text(MINIMAL)
    [(b, _)] = parse_text("# comment\n" + MINIMAL.replace("gpu: a100", "gpu: [A100-40G]"))
    [(c, _)] = parse_text(MINIMAL.replace("gpu: a100", "gpu: a100\n  count: 2"))
    assert content_hash(a) == content_hash(b) != content_hash(c)


def test_error_format_without_position() -> None:
    assert str(ManifestError("x.yaml", "cannot read: denied")) == "x.yaml: cannot read: denied"
    e = ManifestError("x.yaml", "bad", line=3, col=5, field="a.b", hint="fix it")
    assert str(e) == "x.yaml:3:5: a.b: bad (fix it)"


def test_control_characters_are_reported_at_their_position(tmp_path: Path) -> None:
    e = _one(MINIMAL.replace("name: tiny", "name: ti\x0cny"), tmp_path)
    assert (e.line, e.col) == (3, 9) and "#x000c" in e.message
