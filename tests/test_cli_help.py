"""``orch --help`` lists each command with the first paragraph of its help: Rich keeps that paragraph's line
breaks, so a summary written over two source lines showed as a sentence cut in the middle of the table."""

from __future__ import annotations

import typer.main

from orchestrator.cli.main import app


def test_every_command_summary_is_one_line_in_the_command_list() -> None:
    group = typer.main.get_command(app)
    broken = {}
    for name, command in group.commands.items():   # type: ignore[attr-defined]
        summary = (command.help or "").strip().split("\n\n")[0]
        if "\n" in summary:
            broken[name] = summary
    assert broken == {}
