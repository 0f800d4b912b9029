"""How the adapter reaches ARM: the resource group's compute and network clients, built lazily, and every call
to them: its errors translated (providers.azure.errors), transient ones retried under orch's one retry policy,
long-running operations waited for. Imports the Azure SDK: only this package's modules import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from azure.core.polling import LROPoller
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.network import NetworkManagementClient

from providers.errors import AuthError, InstanceNotFoundError, ProviderError, ResourceInUseError, ResourceNotFoundError
from providers.retry import RetryPolicy, call_with_retry

from . import credentials
from .errors import NAME, translate_error
from .settings import Settings

T = TypeVar("T")


class Arm:
    """ARM for one subscription and resource group (``settings``). ``credential`` and ``sleep`` are seams for
    tests; without a credential one is made on first use (providers.azure.credentials)."""

    def __init__(self, settings: Settings, *, retry: RetryPolicy, credential: Any = None,
                 sleep: Callable[[float], None] | None = None) -> None:
        self.settings = settings
        self.retry = retry
        self._sleep = sleep
        self._credential = credential
        self._compute: ComputeManagementClient | None = None
        self._network: NetworkManagementClient | None = None

    # -- clients ------------------------------------------------------------------------------------

    def credential(self) -> Any:
        if self._credential is None:
            self._credential = credentials.credential(self.settings)
        return self._credential

    def require_config(self) -> tuple[str, str]:
        s = self.settings
        if not s.subscription_id:
            raise AuthError("no Azure subscription configured", provider=NAME,
                            hint="set AZURE_SUBSCRIPTION_ID or providers.azure.subscription_id")
        if not s.resource_group:
            raise AuthError("no Azure resource group configured", provider=NAME,
                            hint="set providers.azure.resource_group (or ORCH_AZURE_RESOURCE_GROUP)")
        return s.subscription_id, s.resource_group

    @property
    def rg(self) -> str:
        return self.require_config()[1]

    def compute(self) -> ComputeManagementClient:
        if self._compute is None:
            sub, _ = self.require_config()
            self._compute = ComputeManagementClient(self.credential(), sub, **credentials.client_kwargs(self.settings))
        return self._compute

    def network(self) -> NetworkManagementClient:
        if self._network is None:
            sub, _ = self.require_config()
            self._network = NetworkManagementClient(self.credential(), sub, **credentials.client_kwargs(self.settings))
        return self._network

    def close(self) -> None:
        for client in (self._compute, self._network):
            if client is not None:
                client.close()
        self._compute = self._network = None

    # -- calling ------------------------------------------------------------------------------------

    def call(self, fn: Callable[[], T]) -> T:
        """Run one SDK call with translation and orch's retry policy."""

        def once() -> T:
            try:
                return fn()
            except ProviderError:
                raise
            except Exception as exc:  # every SDK failure goes through translate_error
                raise translate_error(exc) from exc

        if self._sleep is not None:
            return call_with_retry(once, self.retry, sleep=self._sleep)
        return call_with_retry(once, self.retry)

    def wait(self, poller: LROPoller[Any], timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for an LRO; True when done. A failed LRO raises (translated)."""
        try:
            poller.wait(timeout=timeout_s)
            if not poller.done():
                return False
            poller.result()
            return True
        except ProviderError:
            raise
        except Exception as exc:
            raise translate_error(exc) from exc

    def absent_ok(self, fn: Callable[[], T]) -> T | None:
        try:
            return self.call(fn)
        except InstanceNotFoundError:
            return None

    def wait_absent_ok(self, poller: LROPoller[Any], timeout_s: float) -> None:
        try:
            self.wait(poller, timeout_s)
        except InstanceNotFoundError:
            pass

    def delete_quietly(self, begin: Callable[[], LROPoller[Any]]) -> None:
        """Best effort: missing is done, in use (a NIC not yet gone) is left to garbage collection."""
        try:
            poller = self.call(begin)
            self.wait(poller, self.settings.delete_wait_s)
        except (ResourceNotFoundError, ResourceInUseError):
            pass
