"""orch's config file is read once per command, as YAML 1.2 by the manifests' reader (orchestrator/config/file.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.config.catalog import refresh_settings
from orchestrator.config.errors import ConfigError
from orchestrator.config.file import load_config
from orchestrator.daemon.assembly import load_service_settings

CONFIG = """\
owner: tester
daemon: {boot_timeout_s: 20m, heartbeat_timeout_s: 90}
catalog: {refresh_every: 2h}
budgets:
  - {name: team, monthly_usd: 100}
"""


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    monkeypatch.setenv("ORCH_CONFIG", str(path))
    monkeypatch.setenv("ORCH_CATALOG_DIR", str(tmp_path))  # no refresh closure is built for real
    seen: list[str] = []
    real = os.open

    def counting(file: str | os.PathLike[str], *args: object, **kwargs: object) -> int:
        if Path(file) == path:
            seen.append(str(file))
        return real(file, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", counting)
    return path, seen


def test_the_daemon_command_reads_the_file_once(opens: tuple[Path, list[str]]) -> None:
    """What ``orch daemon`` reads: the service's settings, the budgets, the catalog refresh's period."""
    from orchestrator.cli.daemon import _budgets, _catalog_refresh

    _, seen = opens
    settings = load_service_settings(load_config())
    budgets = _budgets()
    period, _ = _catalog_refresh()
    assert settings.boot_timeout.total_seconds() == 1200 and settings.heartbeat_timeout.total_seconds() == 90
    assert [b.name for b in budgets] == ["team"] and period == 7200
    assert refresh_settings(load_config()).every.total_seconds() == 7200
    assert len(seen) == 1, seen


def test_a_changed_file_is_read_again(opens: tuple[Path, list[str]]) -> None:
    path, seen = opens
    assert load_config().owner == "tester"
    path.write_text(CONFIG.replace("tester", "someone-else"))
    assert load_config().owner == "someone-else"
    assert len(seen) == 2


@pytest.mark.parametrize(
    ("line", "value"),
    [("daemon: {use_live_offers: yes}", "yes"), ("owner: on", "on"), ("catalog: {timeout_s: 010}", "010")],
)
def test_a_yaml_1_1_value_is_not_read_as_yaml_1_1(line: str, value: str, tmp_path: Path) -> None:
    """YAML 1.1 reads ``yes``/``on`` as true and ``010`` as 8; the 1.2 reader refuses them with a hint and the
    line, as it does in manifests, instead of guessing."""
    path = tmp_path / "config.yaml"
    path.write_text(f"# orch\n{line}\n")
    with pytest.raises(ConfigError, match=rf"config.yaml:2:\d+: cannot read config: .*{value}") as caught:
        load_config(path)
    assert "(" in str(caught.value)  # the hint


def test_yaml_1_2_booleans_and_text_still_read(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("owner: 'yes'\ndaemon: {use_live_offers: true}\n")
    config = load_config(path)
    assert config.owner == "yes" and load_service_settings(config).use_live_offers is True


def test_the_size_cap_holds(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("owner: x\n" + "# padding\n" * 120_000)
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(path)


def test_an_orch_variable_wins_over_the_file_and_an_empty_one_is_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("daemon: {boot_timeout_s: 20m, use_live_offers: false, lease_ttl_s: 120}\n")
    monkeypatch.setenv("ORCH_BOOT_TIMEOUT_S", "90s")
    monkeypatch.setenv("ORCH_USE_LIVE_OFFERS", "yes")  # an env var is text: yes/no/1/0 all read
    monkeypatch.setenv("ORCH_LEASE_TTL_S", "")
    got = load_service_settings(load_config(path))
    assert (got.boot_timeout.total_seconds(), got.use_live_offers, got.lease_ttl.total_seconds()) == (90, True, 120)


def test_a_bad_daemon_value_names_its_key_and_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("daemon: {heartbeat_timeout_s: 10 parsecs}\n")
    with pytest.raises(
        ConfigError,
        match=r"daemon.heartbeat_timeout_s \(ORCH_HEARTBEAT_TIMEOUT_S\): not a number "
        r"of seconds or a duration .*'10 parsecs'",
    ):
        load_service_settings(load_config(path))
    monkeypatch.setenv("ORCH_USE_LIVE_OFFERS", "maybe")
    with pytest.raises(ConfigError, match=r"daemon.use_live_offers \(ORCH_USE_LIVE_OFFERS\)"):
        load_service_settings(load_config(path.with_name("none.yaml")))
    path.write_text("daemon: {boot_timeout: 90}\n")
    with pytest.raises(ConfigError, match=r"config.yaml:1: daemon.boot_timeout: unknown key"):
        load_service_settings(load_config(path))
