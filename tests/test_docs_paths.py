"""Docs name no path that exists only on a developer's machine (issue 31: `/work/venv/bin/python` in four places):
commands a reader copies run from a fresh clone (`.venv/` is what scripts/test.sh makes)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Absolute paths of someone's machine: a workspace, a home directory.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home/\w+|Users/\w+|root)/[\w./-]+")


def test_docs_name_no_machine_specific_path() -> None:
    found = [f"{p.relative_to(ROOT)}:{n}: {m.group(0)}"
             for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
             for n, line in enumerate(p.read_text().splitlines(), 1) for m in MACHINE_PATH.finditer(line)]
    assert found == []
