"""orch's config file: reading it (file.py), its error, typed values, one module per section, the providers it
configures."""
