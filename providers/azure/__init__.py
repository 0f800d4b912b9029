"""Azure Virtual Machines (ARM via azure-mgmt-compute / azure-mgmt-network). SDK-free to import."""
