"""How a person reaches a node orch launched, said the same way by ``orch plan`` and the console's job page.

By default no port of a cloud node is open from outside its network (docs/configuration.md): a node pulls its
work from the store, so nothing needs to log in. When someone wants to, there are three ways: name the
address they log in from in the provider's ``ssh_ingress_cidrs`` (then ``ssh`` with orch's key), use the SSH
provider's own hosts, or the cloud's console (which reaches the VM without an open port). The texts below
say which applies; they never claim a port is open that the settings keep closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["CONSOLE", "reach_hint", "reach_line"]

#: Each cloud's own way in that needs no open port (what the cloud documents; orch sets none of it up).
CONSOLE: dict[str, str] = {
    "aws": "the EC2 console's Connect (Session Manager: the node's instance profile must allow SSM)",
    "gcp": "the Compute Engine console's serial console, or `gcloud compute ssh NAME --zone ZONE "
           "--tunnel-through-iap` (with a firewall rule admitting 35.235.240.0/20 on port 22)",
    "azure": "Azure Bastion or the serial console in the Azure portal",
    "runpod": "the RunPod console's Connect",
    "vastai": "the Vast.ai console's instance page",
    "lambda": "the Lambda Cloud console's instance page",
}
_CLOUDS = ("aws", "gcp", "azure")


def reach_hint(provider: str, settings: BaseModel | None) -> str:
    """What ``orch plan`` says about logging in to a node of ``provider``, given its validated settings (None:
    its defaults). A cloud's settings where orch opens TCP 22 itself (``SshIngressSettings``) say who logs in
    and from where."""
    if provider == "ssh":
        return "reach a node: ssh to the host as providers.ssh names it (your own machine, orch's key)"
    if provider not in _CLOUDS:
        return f"reach a node: {CONSOLE.get(provider, 'the provider console')}, or ssh with orch's key to the " \
               "address it lists"
    from providers.registry import load_settings
    from providers.settings_base import SshIngressSettings

    ingress = settings if settings is not None else load_settings(provider)
    if not isinstance(ingress, SshIngressSettings):
        raise TypeError(f"{provider}'s settings open no SSH port: {type(ingress).__name__}")
    user, cidrs = ingress.login_user, ingress.ssh_ingress_cidrs
    if cidrs:
        return (f"reach a node: ssh {user}@<its public address> from {', '.join(cidrs)} "
                f"(providers.{provider}.ssh_ingress_cidrs), or {CONSOLE[provider]}")
    return (f"reach a node: no port is open from outside its network; set providers.{provider}.ssh_ingress_cidrs "
            f"to the address you log in from (then ssh {user}@<its public address>), or use {CONSOLE[provider]}")


def reach_line(provider: str, *, public_ip: str | None, ssh_user: str | None, ssh_port: int | None,
               private_ip: str | None = None) -> str:
    """What the console's job page says for one live machine: the ssh command where it has an address, with
    the condition under which it works, else the provider's console."""
    port = f"-p {ssh_port} " if ssh_port and ssh_port != 22 else ""
    user = f"{ssh_user}@" if ssh_user else ""
    address = public_ip or (private_ip if provider == "ssh" else None)
    if address:
        cmd = f"ssh {port}{user}{address}"
        if provider in _CLOUDS:
            return f"{cmd} (from an address in providers.{provider}.ssh_ingress_cidrs), or {CONSOLE[provider]}"
        return cmd
    where = CONSOLE.get(provider)
    return f"no public address: {where}" if where else "no address known yet"
