"""Runs the agent. orch ships this file as the zipapp's own ``__main__.py`` (``python3 orch_agent.pyz --config
agent.json``), so it imports the package by its absolute name; ``python3 -m orch_agent`` runs it too."""

import sys

from orch_agent.cli import main

if __name__ == "__main__":
    sys.exit(main())
