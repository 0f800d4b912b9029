"""Manifests written by an attacker or a careless user: credentials are refused and never echoed, names
are matched whole, control characters and YAML 1.1 readings are refused with a hint, numbers are finite,
date-times in range, and only regular files are read. Every error names the file, line and field.

The credentials here are made up for these tests; they only have the published shapes.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from orchestrator.manifest import ManifestError, load_manifests, parse_text
from orchestrator.manifest.field_types import _secret_name

BASE = """\
apiVersion: orch/v1
kind: Job
name: hostile
resources:
  gpu: H100
  count: 2
run:
  launcher: torchrun
  script: train.py
"""
AWS_SECRET = "Zq8/mT3kLw9+Rb2xYc7Vn4Hd1Gf6Js0PaE5uIoK3"
SESSION_ID = "ASIAZ3TESTKEYQ6H7J2K"
GITHUB = "gho_9f8E7d6C5b4A3z2Y1x0W9v8U7t6S5r4Q3p2O"
SLACK = "xoxp-55512345678-55587654321-TestSlackTok"
HF = "hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa9876543210"


def _errors(text: str, tmp_path: Path) -> list[ManifestError]:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError) as info:
        load_manifests([path])
    return info.value.errors


def _one(text: str, tmp_path: Path) -> ManifestError:
    errors = _errors(text, tmp_path)
    assert len(errors) == 1, [str(e) for e in errors]
    return errors[0]


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# -- credentials ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "needle", "field", "kind"), [
    (f"  args: [--wandb-key, '{AWS_SECRET}']\n", "args:", "run.args[1]", "an AWS secret access key"),
    ("image: https://bot:Pa55w0rdXyz@registry.example.com/img\n", "image:", "image", "a password in a URL"),
    (f"data:\n  - source: s3://b/x?X-Amz-Credential={SESSION_ID}\n    path: /d\n", "source:",
     "data[0].source", "an AWS access key id"),
    (f"policies:\n  budget_usd: {GITHUB}\n", "budget_usd", "policies.budget_usd", "a GitHub token"),
    (f"regions:\n  deny: ['{SLACK}']\n", "deny:", "regions.deny[0]", "a Slack token"),
])
def test_a_credential_in_any_field_is_named_never_shown(extra: str, needle: str, field: str, kind: str,
                                                         tmp_path: Path) -> None:
    text = BASE + extra
    e = _one(text, tmp_path)
    assert (e.field, e.line) == (field, _line_of(text, needle))
    assert kind in e.message and "not shown" in e.message
    secret = next(s for s in (AWS_SECRET, "Pa55w0rdXyz", SESSION_ID, GITHUB, SLACK) if s in extra)
    assert secret not in str(e)
    assert "secrets:" in (e.hint or "")


def test_a_credential_as_an_env_value_is_refused_with_the_fix(tmp_path: Path) -> None:
    text = BASE + f"env:\n  NOTIFY_HOOK: {SLACK}\n  PLAIN: ok\n"
    e = _one(text, tmp_path)
    assert (e.field, e.line, e.col) == ("env.NOTIFY_HOOK", 11, 16)
    assert "looks like a Slack token" in e.message
    assert e.hint and "secrets: [NOTIFY_HOOK]" in e.hint and "export NOTIFY_HOOK" in e.hint
    assert SLACK not in str(e)


def test_a_credential_as_a_key_is_not_echoed_even_in_the_field_path(tmp_path: Path) -> None:
    text = BASE + f"{HF}: 1\nenv:\n  {GITHUB}: x\n"
    errors = _errors(text, tmp_path)
    assert len(errors) == 2
    assert [e.line for e in errors] == [10, 12]
    for e in errors:
        assert HF not in str(e) and GITHUB not in str(e)
        assert "looks like" in e.message


def test_a_credential_as_an_env_key_is_told_names_are_variable_names(tmp_path: Path) -> None:
    """The key is the value here: the hint for an env value (secrets: [KEY], export KEY) would name the token as a
    variable; the fix is a name such as HF_TOKEN, and the token stays unshown (not even as a redaction marker)."""
    e = _one(BASE + f"env:\n  {HF}: '1'\n", tmp_path)
    assert e.line == 11 and "Hugging Face token" in e.message
    assert e.hint and "variable names such as HF_TOKEN" in e.hint and "under secrets" in e.hint
    assert "export" not in e.hint and "redacted" not in e.hint and HF not in str(e)


def test_pydantic_never_gets_to_repeat_a_screened_value(tmp_path: Path) -> None:
    # One value, wrong in two ways (a credential, and not a price): one error, about the credential.
    e = _one(BASE + f"max_price_hr: '{AWS_SECRET}'\n", tmp_path)
    assert e.field == "max_price_hr" and "AWS secret access key" in e.message


# -- names are matched whole ---------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "field"), [
    ('secrets: ["HF_TOKEN\\n"]\n', "secrets[0]"),
    ('env:\n  "DEBUG\\n": "1"\n', "env"),
    ('regions:\n  allow: ["eu-*\\n"]\n', "regions.allow[0]"),
    ('checkpoint:\n  path: /c\n  store: gs://b/c\n  resume: {env: "RESUME_AT\\n"}\n', "checkpoint.resume.env"),
])
def test_a_name_with_a_trailing_newline_is_refused(extra: str, field: str, tmp_path: Path) -> None:
    errors = _errors(BASE + extra, tmp_path)
    assert any(e.field.startswith(field) for e in errors), [str(e) for e in errors]


def test_name_patterns_are_full_matches_below_the_loader() -> None:
    from orchestrator.inputs.durations import HintedValueError
    from orchestrator.offers.quote import QuoteInputError, check_region_glob

    with pytest.raises(HintedValueError):
        _secret_name("WANDB_API_KEY\n")
    with pytest.raises(QuoteInputError):
        check_region_glob("us-west-*\n")
    assert _secret_name("WANDB_API_KEY") == "WANDB_API_KEY"


# -- control characters --------------------------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "field", "what"), [
    ("script: train.py", 'script: "train.py\\u202e.yp"', "run.script", "U+202E"),
    ("script: train.py", 'script: "train.py\\nrm -rf ~"', "run.script", "a newline"),
    ("gpu: H100", 'gpu: "H100\\x1b[0m"', "resources.gpu", "an escape character"),
])
def test_control_characters_are_refused_at_their_line(old: str, new: str, field: str, what: str,
                                                      tmp_path: Path) -> None:
    text = BASE.replace(old, new)
    e = _one(text, tmp_path)
    assert (e.field, e.line) == (field, _line_of(text, new.split(":")[0] + ":"))
    assert what in e.message


def test_a_multi_line_command_is_refused_but_env_and_setup_may_hold_lines(tmp_path: Path) -> None:
    text = BASE.replace("launcher: torchrun\n  script: train.py", 'launcher: command\n  command: "a.sh\\nb.sh"')
    e = _one(text, tmp_path)
    assert e.field == "run.command" and "&&" in (e.hint or "")
    ok = BASE + 'setup: |\n  pip install -e .\n  make data\nenv:\n  NOTE: "two\\tcolumns\\nand lines"\n'
    [(m, _)] = parse_text(ok)
    assert m.setup == ["pip install -e .", "make data"] and m.env["NOTE"] == "two\tcolumns\nand lines"


# -- YAML 1.2, not 1.1 ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "reading"), [
    ("count: 2", "count: 007", "an octal number"),
    ("count: 2", "count: 099", "text, YAML 1.2 as a decimal number (its leading zero lost)"),
    ("count: 2", "count: 0o7", "text"),
    ("count: 2", "count: 2\n  nodes: 2:00", "a base-60 number"),
    ("count: 2", "count: 1_6", "a number"),
    ("count: 2", "count: 0b10", "a binary number"),
])
def test_yaml_1_1_numbers_are_refused_with_a_hint(old: str, new: str, reading: str, tmp_path: Path) -> None:
    text = BASE.replace(old, new)
    e = _one(text, tmp_path)
    assert f"YAML 1.1 reads it as {reading}" in e.message and e.hint
    assert e.line == _line_of(text, new.split("\n")[-1].strip())


def test_a_base_60_window_is_refused_with_the_duration_spelling(tmp_path: Path) -> None:
    e = _one(BASE + "policies:\n  idle:\n    window: 45:30\n", tmp_path)
    assert (e.line, e.col) == (12, 13) and e.hint and "1m30s" in e.hint


@pytest.mark.parametrize("word", ["No", "on", "OFF", "yes"])
def test_yaml_1_1_booleans_are_refused_with_a_hint(word: str, tmp_path: Path) -> None:
    e = _one(BASE + f"policies:\n  max_relaunches: {word}\n", tmp_path)
    assert e.line == 11 and "boolean" in e.message and f"'{word}'" in (e.hint or "")


def test_yaml_1_2_values_and_numbers_keep_their_spelling_in_env() -> None:
    text = BASE.replace("count: 2", "count: 0x4") + (
        "env:\n  LR: 1e-4\n  VERSION: 1.10\n  MASK: 0x1F\n  ON_TEXT: 'on'\n  FLAG: true\n"
        "policies:\n  deadline: 2031-02-03 04:05:06\n")
    [(m, _)] = parse_text(text)
    assert m.resources.count == 4
    assert m.env == {"LR": "1e-4", "VERSION": "1.10", "MASK": "0x1F", "ON_TEXT": "on", "FLAG": "true"}
    assert m.policies.deadline is not None and m.policies.deadline.isoformat() == "2031-02-03T04:05:06+00:00"


@pytest.mark.parametrize("tagged", ["!!binary aGk=", "!!set {a, b}", "!!timestamp 2030-01-01", "!custom x"])
def test_tags_beyond_the_core_schema_are_refused(tagged: str, tmp_path: Path) -> None:
    e = _one(BASE + f"image: {tagged}\n", tmp_path)
    assert e.line == 10 and "YAML tag" in e.message


# -- numbers are finite, date-times in range -----------------------------------------------------------

@pytest.mark.parametrize(("extra", "field"), [
    ("  disk_gb: .NaN\n", "resources.disk_gb"),
    ("policies:\n  estimated_hours: -.Inf\n", "policies.estimated_hours"),
    ("max_price_hr: .inf\n", "max_price_hr"),
    ("policies:\n  idle: {window: .inf}\n", "policies.idle.window"),
    ("policies:\n  idle: {min_gpu_util_pct: .nan}\n", "policies.idle.min_gpu_util_pct"),
])
def test_infinities_and_nans_are_refused(extra: str, field: str, tmp_path: Path) -> None:
    text = BASE.replace("  count: 2\n", "  count: 2\n" + extra) if extra.startswith("  ") else BASE + extra
    e = _one(text, tmp_path)
    assert e.field == field and "finite" in e.message


@pytest.mark.parametrize("hours", ["1e308", "87601"])
def test_an_estimate_over_ten_years_is_refused_at_its_line(hours: str, tmp_path: Path) -> None:
    """Else `orch plan` prints its total as a number hundreds of digits long, far past 80 columns."""
    e = _one(BASE + f"policies:\n  estimated_hours: {hours}\n", tmp_path)
    assert (e.field, e.line) == ("policies.estimated_hours", 11) and "more than ten years" in e.message
    assert e.hint is not None and "87,600" in e.hint
    [(m, _)] = parse_text(BASE + "policies:\n  estimated_hours: 87600\n")
    assert m.policies.estimated_hours == 87600


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-12:00", "1999-12-31T00:00:00Z",
                                  "0001-01-01 00:00:00"])
def test_out_of_range_deadlines_are_refused_at_their_line(when: str, tmp_path: Path) -> None:
    e = _one(BASE + f"policies:\n  deadline: '{when}'\n", tmp_path)
    assert (e.field, e.line) == ("policies.deadline", 11) and "out of range" in e.message


# -- what is read: regular files, within the cap -------------------------------------------------------

def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "jobs.yaml"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            load_manifests([fifo])
        except ManifestError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=60)
    if reader.is_alive():   # it blocked on open(): let it go before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO blocked")
    assert "not a regular file (a FIFO)" in str(outcome[0])


def test_a_device_is_refused_and_the_size_cap_is_counted_while_reading(tmp_path: Path) -> None:
    from orchestrator.inputs.files import InputFileError, read_text_file

    with pytest.raises(ManifestError, match="not a regular file \\(a device\\)"):
        load_manifests(["/dev/zero"])
    # /proc files say st_size 0 whatever they hold: the cap still holds.
    assert os.stat("/proc/self/status").st_size == 0
    with pytest.raises(InputFileError, match="too large"):
        read_text_file(Path("/proc/self/status"), 64)
    big = tmp_path / "big.yaml"
    big.write_text(BASE + "#" * (1024 * 1024))
    with pytest.raises(ManifestError, match="too large for a manifest \\(more than 1 MiB\\)"):
        load_manifests([big])


def test_a_name_too_long_and_a_huge_tree_are_one_line_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    import orchestrator.manifest.loader as loader

    with pytest.raises(ManifestError, match="file name too long"):
        load_manifests([tmp_path / ("x" * 300 + ".yaml")])
    for i in range(12):
        (tmp_path / "tree" / f"d{i}").mkdir(parents=True)
    monkeypatch.setattr(loader, "MAX_WALK", 10)
    with pytest.raises(ManifestError, match="more than 10 entries under this directory"):
        load_manifests([tmp_path / "tree"])


def test_the_pure_python_parser_reads_what_libyaml_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from orchestrator.inputs.yaml12 import YamlInputError
    from orchestrator.inputs.yamlread import parse_yaml

    examples = Path(__file__).resolve().parents[1] / "examples"
    texts = [p.read_text() for p in sorted(examples.glob("*.yaml"))]
    texts += [BASE + "env:\n  A: &v 1e-4\n  B: *v\nx: &m {a: 1}\ny: {<<: *m, b: 2}\n", BASE + "count: 010\n",
              "---\n" * 3, "a: [" * 70 + "]" * 70, "a: &a [*a]\n", "k: 1\nk: 2\n", "x: !!binary aGk=\n"]

    def outcome(text: str) -> object:
        try:
            return [(d.data, d.start, d.values, d.keys) for d in parse_yaml(text)]
        except YamlInputError as exc:
            return (exc.message, exc.line, exc.col)

    with_libyaml = [outcome(t) for t in texts]
    monkeypatch.setattr(yaml, "__with_libyaml__", False)
    assert [outcome(t) for t in texts] == with_libyaml
