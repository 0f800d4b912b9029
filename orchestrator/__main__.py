from orchestrator.cli.entry import run

run()
