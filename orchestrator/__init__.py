"""orch: cloud GPU provisioning and cost optimisation. Knows jobs; reaches clouds only via providers."""

__version__ = "0.1.0"
