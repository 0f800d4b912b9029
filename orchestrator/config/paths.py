"""Where orch's config file and data directory are: environment variables and the XDG defaults, nothing else.

Apart from ``file.py`` (which re-exports both) so that ``orch quote``, which only asks whether a config file
exists, does not import the config reader, its dataclasses and its patterns (tests/bench/bench_quote.py).
"""

from __future__ import annotations

import os
from pathlib import Path


def config_path() -> Path:
    """``$ORCH_CONFIG``, else ``$XDG_CONFIG_HOME/orch/config.yaml`` (``~/.config`` when unset)."""
    explicit = os.environ.get("ORCH_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "orch" / "config.yaml"


def data_dir() -> Path:
    """``$XDG_DATA_HOME/orch`` (``~/.local/share`` when unset): the store's default home, the user catalog."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "orch"
