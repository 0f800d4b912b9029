"""``orch catalog refresh`` (fetch current prices into the user catalog) and ``orch catalog status``."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, fail
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app

if TYPE_CHECKING:
    from providers.catalog.refresh import RefreshReport

catalog_app = typer.Typer(help="The GPU price catalog: refresh it from the providers, see how fresh it is.",
                          no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")


def _providers(names: list[str]) -> list[str]:
    from providers.catalog.refresh import REFRESH_PROVIDERS
    from providers.registry import UnknownProviderError, canonical_provider

    out: list[str] = []
    for name in names:
        try:
            canonical = canonical_provider(name)
        except UnknownProviderError as exc:
            # Every provider's name is "known", ssh's too, which has no price list: name those that have one.
            fail(str(UnknownProviderError(exc.name, exc.suggestions, REFRESH_PROVIDERS, "refreshable")),
                 EXIT_BAD_INPUT)
        if canonical not in REFRESH_PROVIDERS:
            fail(f"--provider {name}: {canonical} has no price list to refresh (choose from "
                 f"{', '.join(REFRESH_PROVIDERS)})", EXIT_BAD_INPUT)
        if canonical not in out:
            out.append(canonical)
    return out


def _when(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if moment else "-"


def _print_report(report: RefreshReport) -> None:
    out = sys.stdout
    out.write(f"{'PROVIDER':<9}{'RESULT':<11}{'ROWS':>6}{'CHANGED':>9}  CAPTURED\n")
    for r in report.providers:
        rows = str(r.rows) if r.rows else f"{r.previous_rows} kept" if r.previous_rows else "0"
        out.write(f"{r.provider:<9}{r.outcome.value:<11}{rows:>6}{r.changed:>9}  {_when(r.captured_at)}\n")
        for note in r.notes:
            out.write(f"  {note}\n")
        if r.error:
            out.write(f"  error: {r.error} (its previous rows are kept as they were)\n")
    out.write(f"catalog: {report.directory}\n")


@catalog_app.command("refresh")
def refresh_cmd(
    provider: Annotated[list[str], typer.Option("--provider", "-p", help="Only this provider (repeatable).")]
    = [],  # noqa: B006
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON (fields: docs/cli.md).")] = False,
) -> None:
    """Fetch current on-demand and spot prices into the user catalog (gpuhunt's published catalogs plus the
    providers' own APIs). A provider that fails keeps its previous rows; exit 1 if any failed."""
    from orchestrator.config.catalog import refresh_settings
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import load_config
    from providers.catalog.refresh import refresh

    names = _providers(provider)
    try:
        settings = refresh_settings(load_config())
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    sys.stderr.write(f"refreshing {', '.join(names) or 'all providers'} (this can take a minute)…\n")

    def progress(message: str) -> None:
        sys.stderr.write(f"  {message}\n")
        sys.stderr.flush()

    report = refresh(names, settings, progress=progress)
    if as_json:
        sys.stdout.write(dumps(report.to_json(), indent=2) + "\n")
    else:
        _print_report(report)
    if report.failed:
        sys.stderr.write(f"refresh failed for {', '.join(p.provider for p in report.failed)}: "
                         "their previous rows are kept\n")
        raise SystemExit(1)


@catalog_app.command("status")
def status_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list, one object per provider.")] = False,
) -> None:
    """Each provider's rows: refreshed or shipped, how many, how old, and the last refresh's outcome."""
    from orchestrator.app.catalog_status import catalog_status
    from orchestrator.redaction import safe_line

    rows = catalog_status(datetime.now(UTC))
    if as_json:
        sys.stdout.write(dumps([r.to_json() for r in rows], indent=2) + "\n")
        return
    import textwrap

    def say(text: str) -> None:   # within 80 columns, as the table is
        sys.stdout.write("".join(f"{line}\n" for line in textwrap.wrap(text, 80, subsequent_indent="    ",
                                                                       break_on_hyphens=False)))

    sys.stdout.write(f"{'PROVIDER':<9}{'FROM':<10}{'ROWS':>6}  {'OLDEST':<8}{'LAST REFRESH':<22}RESULT\n")
    for r in rows:
        sys.stdout.write(f"{r.provider:<9}{r.origin.value:<10}{r.rows:>6}  {r.oldest_age:<8}"
                         f"{r.last_attempt or '-':<22}{r.outcome.value if r.outcome else '-'}\n")
        if r.error:
            say(f"  last error: {safe_line(str(r.error))}")
    stale = [r.provider for r in rows if r.stale]
    if stale:
        say(f"older than a day (run `orch catalog refresh`): {', '.join(stale)}")
