"""The policy tests' shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _optimum_cache_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`orch simulate` keeps the optimum under $ORCH_CACHE_DIR by default: never the user's own cache in a test
    (the subprocesses inherit the variable)."""
    where = tmp_path_factory.mktemp("orch-cache")
    monkeypatch.setenv("ORCH_CACHE_DIR", str(where))
    return where
