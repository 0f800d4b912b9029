"""Google Compute Engine: the adapter (``providers.gcp.adapter``) and its SDK-free settings."""
