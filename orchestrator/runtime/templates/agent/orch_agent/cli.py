"""The agent's command line: ``--config agent.json [--once] [--no-job] [--await-go FILE]``."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from .agent import Agent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="orch on-node agent")
    parser.add_argument("--config", required=True, help="agent JSON config (rendered by orch)")
    parser.add_argument("--once", action="store_true", help="one tick, then exit (tests, debugging)")
    parser.add_argument("--no-job", action="store_true", help="do not start the job")
    parser.add_argument("--await-go", metavar="FILE", help="start the job only once FILE exists (then removed)")
    args = parser.parse_args(argv)
    with open(args.config, encoding="utf-8") as fh:
        agent = Agent(json.load(fh))
    if args.once:
        if not args.no_job:
            agent.start_job()
        agent.tick()
        if agent.reporter is not None:
            agent.reporter.flush()      # the upload thread is a daemon: let this round's report land first
        return 0
    if args.no_job:
        while True:
            agent.tick()
            agent.sleep(min(agent.sample_interval, agent.notice_interval))

    def _on_term(signum: int, _frame: Any) -> None:
        # The instance is going away: pass it on to the job (it may checkpoint), then record and leave.
        agent.stop_job(signum)
        agent.tick()
        agent.final_report()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, _on_term)
    return agent.run(args.await_go)
