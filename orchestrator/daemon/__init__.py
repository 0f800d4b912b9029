"""The daemon: the one place the engine is assembled (assembly.py), its loop, the fenced providers on a shared store,
logs and metrics, alerts from the store's events, the catalog refresh schedule."""
