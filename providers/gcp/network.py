"""orch's firewall rules on a GCE network: names, bodies, and the ensure/list/delete steps.

Every instance orch launches carries the network tag ``orch-<owner>``. One rule per network,
``orch-<owner>-intra-<network>``, admits every protocol from that tag to that tag, so the nodes of a
multi-node gang reach each other (torchrun's rendezvous, NCCL's sockets on ports chosen at run time)
whatever the network's other rules are (a custom VPC has no ``default-allow-internal``). Nothing outside
the tag is admitted by it. Where ``ssh_ingress_cidrs`` is set (it is empty by default),
one ingress rule per network and address family (GCE does not mix IPv4 and IPv6 sources in one rule) admits
TCP 22 from those ranges to that tag: ``orch-<owner>-ssh-<network>`` (``-ssh6-`` for IPv6). Firewall rules
have no labels, so a rule is orch's for ``owner`` when its name has that prefix AND it targets that tag.
A rule is in use while an instance of the owner sits on its network; garbage collection deletes it after.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from google.cloud import compute_v1

from providers.base import CloudResource, ResourceKind
from providers.errors import InvalidRequestError, ResourceNotFoundError

T = TypeVar("T")
SSH_PORT = "22"
#: uuid5 namespace for firewall insert requestIds (GCE dedupes a retried insert with the same id).
RULE_REQUEST_NAMESPACE = uuid.UUID("0f5b6f5e-6c1a-4d0e-9d55-2a0c8c1f7e31")


def network_tag(owner: str) -> str:
    """The network tag on every instance of ``owner`` (what the firewall rules target)."""
    return f"orch-{owner}"


def network_name(network: str) -> str:
    """``global/networks/default`` or a full URL -> ``default``."""
    return network.rstrip("/").rsplit("/", 1)[-1]


def rule_name(owner: str, network: str, *, ipv6: bool = False) -> str:
    """``orch-<owner>-ssh-<network>``: a valid GCE name (at most 63 chars, no trailing '-')."""
    name = f"orch-{owner}-ssh{'6' if ipv6 else ''}-{network_name(network)}"
    return name[:63].rstrip("-")


def wanted_rules(owner: str, network: str, cidrs: list[str]) -> list[compute_v1.Firewall]:
    """The rule bodies for ``cidrs`` on ``network``: one per address family present."""
    families = {False: [c for c in cidrs if ":" not in c], True: [c for c in cidrs if ":" in c]}
    return [compute_v1.Firewall(
        name=rule_name(owner, network, ipv6=v6), network=network, direction="INGRESS", priority=1000,
        source_ranges=ranges, target_tags=[network_tag(owner)],
        allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=[SSH_PORT])],
        description=f"orch ({owner}): SSH to the machines orch launches on this network")
        for v6, ranges in families.items() if ranges]


def intra_rule_name(owner: str, network: str) -> str:
    return f"orch-{owner}-intra-{network_name(network)}"[:63].rstrip("-")


def intra_rule(owner: str, network: str) -> compute_v1.Firewall:
    """All traffic among ``owner``'s instances on ``network`` (source tag == target tag: no outside source)."""
    tag = network_tag(owner)
    return compute_v1.Firewall(
        name=intra_rule_name(owner, network), network=network, direction="INGRESS", priority=1000,
        source_tags=[tag], target_tags=[tag], allowed=[compute_v1.Allowed(I_p_protocol="all")],
        description=f"orch ({owner}): the machines orch launches on this network reach each other")


def is_owned(rule: compute_v1.Firewall, owner: str) -> bool:
    return (rule.name.startswith((f"orch-{owner}-ssh", f"orch-{owner}-intra"))
            and network_tag(owner) in rule.target_tags)


class FirewallRules:
    """The firewall calls, each through the adapter's ``call`` (translate + retry) and ``wait`` (global ops)."""

    def __init__(self, client: compute_v1.FirewallsClient, project: str, *, call: Callable[[Callable[[], T]], T],
                 wait: Callable[[compute_v1.Operation], compute_v1.Operation], timeout_s: float) -> None:
        self._client = client
        self._project = project
        self._call: Callable[[Callable[[], Any]], Any] = call
        self._wait = wait
        self._timeout_s = timeout_s

    def ensure(self, owner: str, network: str, cidrs: list[str]) -> None:
        """Create the intra-tag rule and each wanted SSH rule if missing, or patch an SSH rule's source
        ranges to ``cidrs``. Idempotent. An SSH rule of an address family no longer configured is deleted
        (an earlier default admitted 0.0.0.0/0: a stale rule would keep that door open)."""
        wanted = [intra_rule(owner, network), *wanted_rules(owner, network, cidrs)]
        for stale in {rule_name(owner, network, ipv6=v6) for v6 in (False, True)} - {b.name for b in wanted}:
            if self._get(stale) is not None:
                self.delete(stale)
        for body in wanted:
            current = self._get(body.name)
            if current is None:
                self._insert(body)
            elif sorted(current.source_ranges) != sorted(body.source_ranges):
                patch = compute_v1.Firewall(source_ranges=list(body.source_ranges))
                self._wait(self._call(lambda name=body.name, patch=patch: self._client.patch_unary(
                    project=self._project, firewall=name, firewall_resource=patch, retry=None,
                    timeout=self._timeout_s)))

    def _get(self, name: str) -> compute_v1.Firewall | None:
        try:
            rule: compute_v1.Firewall = self._call(lambda: self._client.get(
                project=self._project, firewall=name, retry=None, timeout=self._timeout_s))
            return rule
        except ResourceNotFoundError:
            return None

    def _insert(self, body: compute_v1.Firewall) -> None:
        request = compute_v1.InsertFirewallRequest(
            project=self._project, firewall_resource=body,
            request_id=str(uuid.uuid5(RULE_REQUEST_NAMESPACE, f"{self._project}/{body.name}")))
        try:
            self._wait(self._call(lambda: self._client.insert_unary(request=request, retry=None,
                                                                    timeout=self._timeout_s)))
        except InvalidRequestError as exc:
            if exc.code != "alreadyExists":   # a concurrent launch made it first: ours all the same
                raise

    def owned(self, owner: str, instances: list[compute_v1.Instance]) -> list[CloudResource]:
        """This owner's rules, in use while one of ``instances`` (the owner's) is on the rule's network."""
        rules = self._call(lambda: [r for r in self._client.list(project=self._project, retry=None,
                                                                 timeout=self._timeout_s) if is_owned(r, owner)])
        networks = {network_name(nic.network) for inst in instances for nic in inst.network_interfaces}
        return [CloudResource(
            provider="gcp", kind=ResourceKind.FIREWALL_RULE, resource_id=r.name, name=r.name, owner=owner,
            in_use=network_name(r.network) in networks,
            created_at=datetime.fromisoformat(r.creation_timestamp) if r.creation_timestamp else None)
            for r in rules]

    def delete(self, name: str) -> None:
        """Delete a rule; missing == success (GCE has no dependency on a rule: the caller decides when)."""
        try:
            self._wait(self._call(lambda: self._client.delete_unary(project=self._project, firewall=name, retry=None,
                                                                    timeout=self._timeout_s)))
        except ResourceNotFoundError:
            return
