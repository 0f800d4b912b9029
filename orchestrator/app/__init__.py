"""The use cases behind the CLI's commands (plan, apply, status, down, logs, smoke, providers, catalog): typed, no
printing; the CLI parses and prints."""
