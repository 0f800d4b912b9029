"""One copy of botocore's service models per test process, shared by every boto3 session the tests open.

botocore caches what its ``Loader`` reads (the EC2 model is a 570 kB gzipped JSON file, about 0.25 s of CPU
to read and parse) on the loader, and each ``boto3.Session`` gets a new loader: a test that opens a session per
provider, per client helper and per fake pays it every time. Here every loader made with botocore's default
search paths (all that orch and the tests make) shares one cache, as all the clients of one session already
share their loader's. Nothing else changes: the same files are found and parsed once, extras merged once.
"""

from __future__ import annotations

from typing import Any

from botocore import loaders

_SHARED: dict[Any, Any] = {}


def share_loaded_models() -> None:
    """From now on, loaders built with botocore's default arguments share one cache (idempotent)."""
    if getattr(loaders.Loader.__init__, "_shares_models", False):
        return
    original = loaders.Loader.__init__

    def __init__(self: loaders.Loader, extra_search_paths: Any = None, file_loader: Any = None,
                 cache: Any = None, include_default_search_paths: bool = True,
                 include_default_extras: bool = True) -> None:
        original(self, extra_search_paths, file_loader, cache, include_default_search_paths,
                 include_default_extras)
        if (extra_search_paths, file_loader, cache, include_default_search_paths, include_default_extras) \
                == (None, None, None, True, True) and type(self) is loaders.Loader:
            self._cache = _SHARED

    __init__._shares_models = True  # type: ignore[attr-defined]
    loaders.Loader.__init__ = __init__  # type: ignore[method-assign]
