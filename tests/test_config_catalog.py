"""The ``catalog:`` section read into its pydantic model (orchestrator/config/catalog.py): defaults, and errors
that name the file and the key."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.config.catalog import read_catalog_section, refresh_settings
from orchestrator.config.errors import ConfigError
from orchestrator.config.file import load_config
from providers.catalog.refresh.model import RefreshSettings


def _config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalog: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"owner: tester\n{catalog}")
    monkeypatch.delenv("GPUHUNT_CATALOG_URL", raising=False)
    monkeypatch.delenv("LAMBDA_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.lambda_cloud key is read
    return path


def test_no_section_gives_the_refresh_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = refresh_settings(load_config(_config(tmp_path, monkeypatch, "")))
    base = RefreshSettings()
    assert settings.every == timedelta(hours=6) and settings.gpuhunt_url is None
    assert (settings.http_timeout_s, settings.provider_timeout_s) == (base.http_timeout_s, base.provider_timeout_s)
    assert settings.vast_url == base.vast_url


def test_written_values_reach_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _config(
        tmp_path,
        monkeypatch,
        "catalog: {refresh_every: 90m, timeout_s: '45', http_timeout_s: 7, vast_url: 'http://127.0.0.1:9/vast'}\n",
    )
    settings = refresh_settings(load_config(path))
    assert settings.every == timedelta(minutes=90)
    assert (settings.provider_timeout_s, settings.http_timeout_s) == (45.0, 7.0)
    assert settings.vast_url == "http://127.0.0.1:9/vast"


@pytest.mark.parametrize(
    ("catalog", "message"),
    [
        ("catalog: {refresh_evry: 6h}", "catalog.refresh_evry: unknown key (did you mean 'refresh_every'?)"),
        ("catalog: {colour: blue}", "catalog.colour: unknown key (known: azure_prices_url, "),
        ("catalog: {refresh_every: soon}", "catalog.refresh_every: not a duration: 'soon' ("),
        ("catalog: {refresh_every: null}", "catalog.refresh_every: not a duration: None ("),
        ("catalog: {refresh_every: 30s}", "catalog.refresh_every: '30s' is under a minute"),
        ("catalog: {timeout_s: lots}", "catalog.timeout_s: not a number: 'lots'"),
        ("catalog: {timeout_s: null}", "catalog.timeout_s: not a number: None"),
        ("catalog: {http_timeout_s: 0}", "catalog.http_timeout_s: must be > 0"),
        ("catalog: [6h]", "catalog: must be a mapping"),
    ],
)
def test_a_bad_value_names_the_file_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalog: str, message: str
) -> None:
    path = _config(tmp_path, monkeypatch, catalog + "\n")
    with pytest.raises(ConfigError) as caught:
        read_catalog_section(load_config(path))
    assert str(caught.value).startswith(f"{path}:2: {message}"), str(caught.value)  # line 1: owner
