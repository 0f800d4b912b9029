"""The small ones of issue 28: each gets a clear error or the documented behaviour.

apply --prune asks; a path in ORCH_SSH_PUBLIC_KEY is read (and the key's form checked); a webhook's redirect
is a failure; control characters from elsewhere never reach the terminal raw; a long regions.allow value is
not echoed; a 5,000-digit number is an input error; a bad ORCH_CATALOG_DIR is an error, not a fallback;
``--poll 0`` is refused; ORCH_*_S takes ASCII digits only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.config.errors import ConfigError
from orchestrator.config.file import OrchConfig, load_config
from orchestrator.config.public_key import PublicKeyError
from orchestrator.daemon.assembly import load_service_settings
from orchestrator.engine.events import EventKind
from tests._webhook_receiver import Receiver, start_receiver
from tests.test_alerts import TOKEN, alert, hook, settings, stop, worker

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests me@host"
BIG = "9" * 5000
MANIFEST = """\
apiVersion: orch/v1
kind: Job
name: {name}
resources: {{gpu: {gpu}, count: {count}}}
market: on-demand
run: {{launcher: command, command: nvidia-smi}}
"""


@pytest.fixture()
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite store and a config with no providers: nothing here launches."""
    config = tmp_path / "config.yaml"
    config.write_text("owner: tester\n")
    monkeypatch.setenv("ORCH_CONFIG", str(config))
    monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'orch.db'}")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _manifest(directory: Path, name: str, *, gpu: str = "RTX4090", count: str = "1") -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(MANIFEST.format(name=name, gpu=gpu, count=count))
    return path


# -- apply --prune ----------------------------------------------------------------------------------------

def test_prune_with_an_empty_file_is_refused_without_yes_and_done_with_it(cli_env: Path) -> None:
    jobs = cli_env / "jobs"
    for name in ("a", "b"):
        assert run("apply", str(_manifest(jobs, name)), "--no-launch")[0] == 0
    empty = cli_env / "empty.yaml"
    empty.write_text("")
    code, out, err = run("apply", str(empty), "--no-launch", "--prune")
    assert code == 2 and "refusing to prune 2 jobs (a, b) without confirmation" in err and "--yes" in err
    code, out, _ = run("status", "--json")
    assert '"desired_state": "pruned"' not in out                    # nothing was recorded
    code, out, err = run("apply", str(empty), "--no-launch", "--prune", "--yes")
    assert code == 0, err
    assert "0 created, 0 updated, 0 unchanged, 2 pruned" in out


def test_prune_asks_on_a_terminal(cli_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("orchestrator.cli.apply_flow.stdin_is_terminal", lambda: True)
    assert run("apply", str(_manifest(cli_env / "jobs", "a")), "--no-launch")[0] == 0
    empty = cli_env / "empty.yaml"
    empty.write_text("")
    result = CliRunner().invoke(app, ["apply", str(empty), "--no-launch", "--prune"], input="n\n")
    assert result.exit_code == 1 and "Prune 1 job (a)?" in result.stdout
    assert "nothing recorded, nothing pruned" in result.stderr


# -- ORCH_SSH_PUBLIC_KEY ---------------------------------------------------------------------------------

def test_a_public_key_path_is_read_and_its_form_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.app.launching import ssh_public_key

    pub = tmp_path / "id_ed25519.pub"
    pub.write_text(KEY + "\n")
    assert ssh_public_key({"ORCH_SSH_PUBLIC_KEY": str(pub)}) == KEY
    assert ssh_public_key({"ORCH_SSH_PUBLIC_KEY": KEY}) == KEY
    monkeypatch.setenv("ORCH_SSH_PUBLIC_KEY", str(pub))
    assert load_service_settings(OrchConfig(owner="x")).ssh_public_key == KEY     # the key, not the path
    private = tmp_path / "id_ed25519"
    private.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n"
                       "-----END OPENSSH PRIVATE KEY-----\n")
    for bad, why in ((str(private), "does not hold an OpenSSH public key"),
                     (str(tmp_path / "missing.pub"), "neither a public key nor a readable file"),
                     ("ssh-ed25519 !!not-base64", "not a valid OpenSSH public key")):
        with pytest.raises(PublicKeyError, match=why):
            ssh_public_key({"ORCH_SSH_PUBLIC_KEY": bad})
        monkeypatch.setenv("ORCH_SSH_PUBLIC_KEY", bad)
        with pytest.raises(ConfigError, match=why):
            load_service_settings(OrchConfig(owner="x"))
    assert "PRIVATE" not in str(_raised(lambda: ssh_public_key({"ORCH_SSH_PUBLIC_KEY": str(private)})))


def test_apply_launch_with_a_bad_key_path_stops_with_the_fix(cli_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (cli_env / "config.yaml").write_text("owner: tester\nproviders:\n  lambda: {api_key: k, base_url: "
                                         "'http://127.0.0.1:9/api/v1'}\n")
    monkeypatch.setenv("ORCH_SSH_PUBLIC_KEY", str(cli_env / "missing.pub"))
    code, _, err = run("apply", str(_manifest(cli_env / "jobs", "a")), "--launch", "--yes")
    assert code == 2 and "(ORCH_SSH_PUBLIC_KEY): neither a public key nor a readable file" in err
    assert "internal error" not in err


def _raised(call: object) -> BaseException:
    try:
        call()  # type: ignore[operator]
    except BaseException as exc:
        return exc
    raise AssertionError("nothing raised")


# -- webhooks answering with a redirect ------------------------------------------------------------------

@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = start_receiver()
    try:
        yield r
    finally:
        r.close()


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_webhook_answering_a_redirect_is_a_logged_failure(status: int, receiver: Receiver,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="orch.alerts")
    receiver.status = status
    w = worker(hook(f"{receiver.base}/services/{TOKEN}"), settings(attempts=3))
    try:
        w.offer(alert())
        assert w.wait_until(lambda s: s.failed == 1, 30)
    finally:
        stop(w)
    assert w.stats().sent == 0 and receiver.requests == 1
    assert f"HTTP {status} (a redirect: not followed" in caplog.text and TOKEN not in caplog.text


# -- control characters from elsewhere -------------------------------------------------------------------

def test_escape_sequences_in_event_text_are_escaped_on_the_terminal(cli_env: Path) -> None:
    from orchestrator.redaction import safe_line
    from orchestrator.store import open_store, repo

    hostile = "launch failed: \x1b]0;owned\x07\x1b[2J\x9b31m capacity"
    store = open_store()
    try:
        with store.transaction() as tx:
            repo.record_event(tx, EventKind.LAUNCH_FAILED, hostile)
    finally:
        store.close()
    code, out, _ = run("events")
    assert code == 0 and "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "\\x1b]0;owned\\x07\\x1b[2J\\x9b31m capacity" in out
    assert safe_line(hostile) == "launch failed: \\x1b]0;owned\\x07\\x1b[2J\\x9b31m capacity"
    assert safe_line("a\tb\nc") == "a\tb\nc"


# -- regions.allow --------------------------------------------------------------------------------------

def test_a_long_regions_allow_value_is_not_echoed(cli_env: Path) -> None:
    secret = "hunter2-correct-horse-battery-staple"
    path = cli_env / "job.yaml"
    path.write_text(MANIFEST.format(name="x", gpu="A100-80G", count=1) + f"regions: {{allow: ['{secret}']}}\n")
    code, out, err = run("plan", str(path))
    assert secret not in out + err and "correct-horse" not in out + err
    from orchestrator.offers.planner import _globs

    assert _globs((secret, "us-east-1")) == "hun...(36 characters, not shown), us-east-1"   # a real region shows
    code, out, err = run("quote", "--gpu", "A100-80G", "--region", f"{secret}:{secret}")
    assert code == 2 and "malformed region glob" in err and secret not in err


# -- huge numbers ---------------------------------------------------------------------------------------

def test_a_5000_digit_count_is_an_input_error(cli_env: Path) -> None:
    code, _, err = run("quote", "--gpu", f"A100-80G:{BIG}")
    assert code == 2 and "the count after ':' is too large" in err and "internal error" not in err
    assert len(err) < 300
    path = _manifest(cli_env / "jobs", "big", count=BIG)
    code, _, err = run("plan", str(path))
    assert code == 2 and "a number of 5000 digits: too large" in err and "internal error" not in err
    config = cli_env / "big.yaml"
    config.write_text(f"owner: tester\nbudgets:\n  - {{name: x, monthly_usd: {BIG}}}\n")
    with pytest.raises(ConfigError, match=r"big.yaml:3:\d+: .*a number of 5000 digits: too large"):
        load_config(config)     # the manifests' YAML 1.2 reader: the same cap and message, with the line


# -- ORCH_CATALOG_DIR -----------------------------------------------------------------------------------

def test_a_bad_catalog_dir_is_an_error_not_a_fallback(cli_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from providers.catalog.loader import CatalogError, load_catalog

    monkeypatch.setenv("ORCH_CATALOG_DIR", str(cli_env / "no-such-catalog"))
    load_catalog.cache_clear()
    try:
        with pytest.raises(CatalogError, match=r"\$ORCH_CATALOG_DIR .*no-such-catalog is unusable"):
            load_catalog()
        code, out, err = run("quote", "--gpu", "A100-80G")
        assert code == 2 and "error: catalog at $ORCH_CATALOG_DIR" in err and "internal error" not in err
        assert out == ""                                               # no prices from another catalog
    finally:
        load_catalog.cache_clear()


# -- --poll 0 -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["events", "-f"], ["logs", "x", "-f"], ["down", "x", "--yes"]])
def test_a_zero_poll_interval_is_refused(command: list[str], cli_env: Path) -> None:
    code, _, err = run(*command, "--poll", "0", "--max-wait", "0") if command[0] != "down" else \
        run(*command, "--poll", "0")
    assert code == 2 and "--poll must be at least 0.05, got 0" in err


# -- ORCH_*_S -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["١٢٠٠", "۱۲۰۰", "１２００", "1_200", "nan", "inf", "-5", "12 parsecs"])
def test_only_ascii_numbers_of_seconds_pass(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_BOOT_TIMEOUT_S", value)
    with pytest.raises(ConfigError, match=r"daemon.boot_timeout_s \(ORCH_BOOT_TIMEOUT_S\): not a number of seconds"):
        load_service_settings(OrchConfig(owner="x"))


@pytest.mark.parametrize(("value", "seconds"), [("1200", 1200.0), (" 90 ", 90.0), ("2.5", 2.5), ("1e3", 1000.0),
                                               ("12s", 12.0), ("20m", 1200.0), ("1h30m", 5400.0)])
def test_ascii_numbers_of_seconds_still_pass(value: str, seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_BOOT_TIMEOUT_S", value)
    assert load_service_settings(OrchConfig(owner="x")).boot_timeout.total_seconds() == seconds
