"""What several CLI commands share: reading orch's config and providers or failing with the CLI's exit code,
one safe line to stdout, money as the CLI prints it, and the notes on jobs orch cannot watch closely.

Public so that the command modules (jobs.py, apply_flow.py, ...) import it from here, never each other's
private helpers (that made an import cycle between cli/jobs.py and cli/apply_flow.py).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, WIDTH, fail

if TYPE_CHECKING:
    from orchestrator.config.file import OrchConfig
    from orchestrator.store import Store, StoreError
    from providers.base import Provider

#: ``--json`` as every job command spells it.
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output (fields: docs/cli.md).")]


def load_config_or_fail(as_json: bool = False) -> OrchConfig:
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import load_config

    try:
        return load_config()
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)


def build_providers_or_fail(config: OrchConfig, as_json: bool = False, *, live_only: bool = False
                            ) -> dict[str, Provider]:
    """Every enabled provider built, or (``live_only``: what ``--live`` asks) those that price live."""
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.providers import build_live_providers, build_providers

    try:
        return build_live_providers(config) if live_only else build_providers(config)
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)


def fail_internal(what: str, exc: BaseException, as_json: bool = False) -> NoReturn:
    """``what`` failed for a reason no command foresaw: said in the exception's words, not its class name."""
    from orchestrator.words import reason

    fail(f"{what} failed: {reason(exc)}", EXIT_NO_MATCH, as_json=as_json)


def out(line: str = "") -> None:
    """One line to stdout, its control characters escaped: job names are checked, but event messages and
    cloud answers (errors, states) are text from elsewhere and must not drive the terminal."""
    from orchestrator.redaction import terminal_safe

    sys.stdout.write(terminal_safe(line) + "\n")


def money(usd: float) -> str:
    return f"${usd:,.2f}" if usd >= 0.01 or usd == 0 else f"${usd:.4f}"


def optional_config() -> OrchConfig | None:
    """orch's config where it can be read; else None, noted on stderr (planning from the catalog still works)."""
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import load_config

    try:
        return load_config()
    except ConfigError as exc:
        sys.stderr.write(f"note: {exc}; your own machines are not planned\n")
        return None


def close_provider(provider: Provider) -> None:
    close = getattr(provider, "close", None)
    if callable(close):
        close()


#: ``orch plan``'s text fits a terminal of this many columns: lines wrap at spaces, never inside a number.
PLAN_WIDTH = WIDTH


def open_store_or_fail(as_json: bool = False) -> Store:
    from orchestrator.store import StoreError, open_store

    try:
        return open_store()
    except StoreError as exc:
        fail_store(exc, as_json)


def fail_store(exc: StoreError, as_json: bool = False) -> NoReturn:
    """A store that cannot be used, with the one exit code every command gives its cause: 2 for a database URL
    that is wrong as written (ORCH_DATABASE_URL, --url: bad input), 1 for one that is right but could not be used
    (the server does not answer, the schema needs `orch db upgrade`, the file cannot be created)."""
    from orchestrator.store.db import StoreFault

    fail(str(exc), EXIT_BAD_INPUT if exc.fault is StoreFault.BAD_URL else EXIT_NO_MATCH, as_json=as_json)
