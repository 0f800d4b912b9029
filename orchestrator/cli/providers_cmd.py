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
    from orchestrator.app.providers_status import ProviderReadiness, provider_status
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import config_path, load_config
    from providers.registry import PROVIDER_NAMES

    try:
        config = load_config()
    except ConfigError as exc:
        fail(str(exc))
    from dataclasses import replace

    from orchestrator.redaction import safe_line

    # A detail may be a cloud's own error text (an unreachable API, a refused key): redacted like any error line.
    statuses = [replace(s, detail=safe_line(s.detail)) for s in
                (provider_status(config, name) for name in PROVIDER_NAMES)]
    if as_json:
        sys.stdout.write(dumps([s.to_json() for s in statuses], indent=2) + "\n")
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from orchestrator.cli.render_quote import output_width

    # 80 columns unless told otherwise ($COLUMNS, a terminal): DETAIL wraps at spaces, a fix is never cut.
    console = Console(width=output_width() or 80)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("PROVIDER", "STATUS", "DETAIL"):
        table.add_column(col, overflow="fold")
    colour = {ProviderReadiness.READY: "green", ProviderReadiness.NOT_CONFIGURED: "dim"}
    for s in statuses:
        c = colour.get(s.readiness, "yellow")
        table.add_row(s.name, f"[{c}]{s.readiness.value}[/]", escape(s.detail))
    console.print(table)
    where = (f"read {config.path}" if config.path else
             f"no file at {config_path()} (defaults; ORCH_CONFIG names another; see docs/configuration.md)")
    import textwrap

    # Plain text, wrapped at spaces only: a path is never broken inside.
    sys.stdout.write(textwrap.fill(f"config: {where}; owner: {config.owner}", console.width, subsequent_indent="  ",
                                   break_long_words=False, break_on_hyphens=False) + "\n")
