"""Suite-wide guards: no test touches the user's real config, data or cache directories."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("ORCH_CONFIG", raising=False)
    monkeypatch.delenv("ORCH_DATABASE_URL", raising=False)
    monkeypatch.delenv("ORCH_CATALOG_DIR", raising=False)
    yield
