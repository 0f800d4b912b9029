"""Azure VMs through azure-mgmt-compute and azure-mgmt-network. The SDKs are imported by adapter.py only."""
