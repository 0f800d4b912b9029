"""Google Compute Engine through google-cloud-compute (REST). The SDK is imported by adapter.py only."""
