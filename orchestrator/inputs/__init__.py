"""Reading what users hand orch (manifests, the config file, traces, env and flags): a file within bounds (files.py),
YAML by the 1.2 core schema with every value's position (yamlread.py, yamldoc.py, yaml12.py), durations and prices
(durations.py, the one parser)."""
