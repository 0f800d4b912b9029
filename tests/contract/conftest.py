"""Discovers every tests/contract/harness_<name>.py and parametrizes the suite over them."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.harness import ProviderHarness

HERE = Path(__file__).parent
HARNESS_MODULES = sorted(m.name for m in pkgutil.iter_modules([str(HERE)]) if m.name.startswith("harness_"))


@pytest.fixture(scope="session", params=HARNESS_MODULES)
def _session_harness(request: pytest.FixtureRequest) -> Iterator[ProviderHarness]:
    module = importlib.import_module(f"tests.contract.{request.param}")
    try:
        harness: ProviderHarness = module.make_harness()
    except ImportError as exc:  # the provider's SDK extra is not installed
        pytest.skip(f"{request.param}: {exc}")
    yield harness
    harness.close()


@pytest.fixture
def harness(_session_harness: ProviderHarness) -> Iterator[ProviderHarness]:
    _session_harness.reset()
    yield _session_harness
    _session_harness.reset()
