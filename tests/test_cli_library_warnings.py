"""A library's warning during a command (a provider's ``log.warning``, e.g. AWS's live prices unavailable) is the
command's own ``warning:`` line, redacted; before, logging's last resort printed the bare message unredacted (a
cloud's error text may echo a key)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_" + "abcdefghijklmnopqrstuvwxyzABCDEFGH"
# The orch command line's entry, with the command replaced by one that logs what a provider logs.
PROGRAM = """
import logging, sys
from orchestrator.cli import main
main.app = lambda: logging.getLogger("providers.aws.offers").warning(
    "aws us-east-1: live offer data unavailable, using the catalog: %s", sys.argv[1])
main.run()
"""


def test_a_providers_warning_is_a_redacted_warning_line() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM, f"AuthFailure: token {TOKEN}"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, check=True)
    assert done.stdout == ""
    assert done.stderr == ("warning: aws us-east-1: live offer data unavailable, using the catalog: AuthFailure: "
                           "token <redacted: a Hugging Face token>\n")
