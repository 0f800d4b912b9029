"""``orch providers``: which clouds orch can use from here, and how to fix the others."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from orchestrator.cli.errors import fail
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app


@app.command("providers")
def providers_command(
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list of {provider, status, detail}.")] = False,
) -> None:
    """List every provider: ready, or not configured / missing SDK / credentials, with the fix."""
    from orchestrator.config import ConfigError, load_config
    from orchestrator.providers_status import ProviderReadiness, provider_status
    from providers.registry import PROVIDER_NAMES

    try:
        config = load_config()
    except ConfigError as exc:
        fail(str(exc))
    statuses = [provider_status(config, name) for name in PROVIDER_NAMES]
    if as_json:
        sys.stdout.write(dumps([s.to_json() for s in statuses], indent=2) + "\n")
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=250)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("PROVIDER", "STATUS", "DETAIL"):
        table.add_column(col, overflow="fold")
    colour = {ProviderReadiness.READY: "green", ProviderReadiness.NOT_CONFIGURED: "dim"}
    for s in statuses:
        c = colour.get(s.readiness, "yellow")
        table.add_row(s.name, f"[{c}]{s.readiness.value}[/]", escape(s.detail))
    console.print(table)
    where = config.path or "no config file (see docs/configuration.md)"
    console.print(f"[dim]config: {where}; owner: {config.owner}[/]", highlight=False)
