"""The ``orch`` command line. Each command group lives in its own module and registers on ``app``.

Start-up must stay light: command modules import their heavy dependencies (SDKs, the store, rich
tables) inside the command functions, never at module level.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="orch",
    help="Cloud GPU provisioning and cost optimisation: quote, plan, launch, watch, recover.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

@app.callback()
def _root() -> None:
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
    "simulate",
    "rehearse",
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
    app()
