"""The ``orch`` command line. Each command group lives in its own module and registers on ``app``.

Start-up must stay light: command modules import their heavy dependencies (SDKs, the store, rich
tables) inside the command functions, never at module level.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from typer.core import TyperGroup


class OrchGroup(TyperGroup):
    """The root command: click's usage errors and any escaped exception become one redacted line.

    click prints a bad option value back ("Invalid value for '--count': 'AKIA...'"): here every such
    message goes through ``orchestrator.redaction`` first. An exception no command handled is a bug in
    orch: it is reported as one line on stderr (exit 1) instead of a traceback; ``ORCH_DEBUG=1`` shows
    the traceback. A reader of stdout that went away (``orch status | head``) is not one: exit 141, silently
    (``errors.stdout_closed``), whether it shows while parsing (help), running, or flushing at the end.
    """

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        # Before click sees it: click would exit 1 for a closed stdout, where a Unix tool exits 141.
        try:
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            from orchestrator.cli.errors import stdout_closed

            stdout_closed()

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            from orchestrator.cli.errors import stdout_closed

            stdout_closed()

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            try:
                rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            finally:
                sys.stdout.flush()   # here, not at exit: a reader that went away is seen while it can be handled
        except BrokenPipeError:
            from orchestrator.cli.errors import stdout_closed

            stdout_closed()
        except click.ClickException as exc:
            _show_click_error(exc, self)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            sys.stderr.write("Aborted!\n")
            sys.exit(1)
        except SystemExit as exc:
            if _rich_met_a_closed_stdout(exc):
                from orchestrator.cli.errors import stdout_closed

                stdout_closed()
            raise
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            if os.environ.get("ORCH_DEBUG"):
                raise
            from orchestrator.cli.errors import internal_error
            from providers.catalog.loader import CatalogError

            if isinstance(exc, CatalogError):   # no usable catalog (a bad $ORCH_CATALOG_DIR): the user's to fix
                from orchestrator.redaction import safe_line

                sys.stderr.write(safe_line(f"error: {exc}", 600) + "\n")
                sys.exit(2)
            internal_error(exc)
        sys.exit(rv if isinstance(rv, int) else 0)


def _rich_met_a_closed_stdout(exc: SystemExit) -> bool:
    """Whether ``exc`` is rich's own exit for a closed stdout (help is printed by rich through Typer).

    rich catches the BrokenPipeError itself, points stdout at /dev/null and raises ``SystemExit(1)`` from
    ``Console.on_broken_pipe``; orch's answer to a reader that went away is 141, as for every other output."""
    if exc.code != 1:
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    code = tb.tb_frame.f_code
    return code.co_name == "on_broken_pipe" and "rich" in Path(code.co_filename).parts


def _show_click_error(exc: click.ClickException, group: TyperGroup) -> None:
    from orchestrator.redaction import safe_line

    exc.message = safe_line(exc.message, 400)
    if getattr(exc, "possibilities", None) and "Did you mean" in exc.message:
        # A misspelt command: Typer writes "Did you mean 'quote'?" into the message, and click (8.2 on) appends
        # its own to it when shown, so the line said it twice. Typer's, once.
        exc.possibilities = None   # type: ignore[misc]
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        exc.show()
        return
    from typer.core import HAS_RICH

    if HAS_RICH and group.rich_markup_mode is not None:
        from typer import rich_utils

        rich_utils.rich_format_error(exc)
    else:
        exc.show()


app = typer.Typer(
    name="orch",
    cls=OrchGroup,
    help="Cloud GPU provisioning and cost optimisation: quote, plan, launch, watch, recover.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def installed_version() -> str:
    """The installed distribution's version (its metadata), else the source tree's ``__version__``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("orch")
    except PackageNotFoundError:
        from orchestrator import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"orch {installed_version()}\n")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                           help="Print orch's version and exit.")] = False,
) -> None:
    """Cloud GPU provisioning and cost optimisation: quote, plan, launch, watch, recover."""


# Modules under orchestrator.cli that define commands on ``app``; imported in this order.
COMMAND_MODULES = (
    "quote",
    "catalog",
    "fit",
    "providers_cmd",
    "manifests",
    "db",
    "render",
    "daemon",
    "console",
    "jobs",
    "down",
    "events",
    "logs",
    "budgets",
    "simulate",
    "rehearse",
    "smoke",
)


def _register() -> None:
    for name in COMMAND_MODULES:
        module = f"orchestrator.cli.{name}"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            # Tolerated only for a command module not written yet, never for a missing dependency.
            if exc.name != module:
                raise


_register()


def run() -> None:
    from orchestrator.cli.errors import warn_library_logs

    warn_library_logs()
    app()
