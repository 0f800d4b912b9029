"""What every provider's settings share: how its transient failures are retried (SDK-free)."""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, Field, field_validator

from providers.retry import RetryPolicy


class RetrySettings(BaseModel):
    """Mixed into each provider's ``Settings``: attempts, backoff and the deadline for retryable errors."""

    retry_attempts: int = Field(default=6, ge=1)
    retry_initial_wait_s: float = Field(default=0.5, ge=0)
    retry_max_wait_s: float = Field(default=8.0, ge=0)
    retry_deadline_s: float = Field(default=60.0, gt=0)

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(attempts=self.retry_attempts, initial_wait_s=self.retry_initial_wait_s,
                           max_wait_s=self.retry_max_wait_s, deadline_s=self.retry_deadline_s)


#: Where SSH may come from when orch opens the network itself: nowhere unless configured. The boot path
#: needs no inbound port (a node pulls its work from the store and reports through it), so nothing is
#: opened to the internet by default; set ``ssh_ingress_cidrs`` to the addresses you log in from.
DEFAULT_SSH_INGRESS: tuple[str, ...] = ()


class SshIngressSettings(BaseModel):
    """Mixed into the settings of clouds where orch opens TCP 22 itself (AWS, GCP, Azure).

    ``ssh_ingress_cidrs``: the source ranges the security group / firewall rule / NSG admits on port 22.
    Empty (the default) means orch opens no port to anyone outside the network (bring your own rules, or
    run the daemon inside the network). Each entry is an IPv4 or IPv6 CIDR; host bits are cleared
    (``10.1.2.3/8`` -> ``10.0.0.0/8``).
    """

    ssh_ingress_cidrs: list[str] = Field(default_factory=lambda: list(DEFAULT_SSH_INGRESS))

    @field_validator("ssh_ingress_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        out: list[str] = []
        for cidr in value:
            try:
                net = ipaddress.ip_network(cidr.strip(), strict=False)
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not a CIDR such as 203.0.113.7/32 or 2001:db8::/32") from exc
            if str(net) not in out:
                out.append(str(net))
        return out

    @property
    def login_user(self) -> str:
        """The user orch's key logs in as on a node (each cloud's settings name it: ``ssh_user``,
        ``admin_username``)."""
        raise NotImplementedError(f"{type(self).__name__} names no login user")
