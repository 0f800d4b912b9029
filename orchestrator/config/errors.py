"""The one error of orch's config: a bad file, section or key, its message naming the key to fix.

Its own module so that the section readers (orchestrator/config/values.py, the ``alerts:`` and ``budgets:``
sections) raise it without importing the config file's reader, which imports them: no import cycle.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """``<config file>: <section>.<key>: <what is wrong>``, or a file orch cannot read."""
