from orchestrator.cli.main import run

run()
