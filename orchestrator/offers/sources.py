"""Where the planner's offers come from: ONE entry point for ``orch quote``, ``orch plan``, ``orch apply
--launch`` and the engine, so that all four see the same offers.

Three kinds of source, merged by ``gather_offers`` (a live price replaces the catalog row of the same
machine, place and market):

* the catalog: shipped or refreshed list prices, offline;
* your own machines: every configured provider that lists offers from its settings alone, without a cloud
  call (``Capability.CONFIG_OFFERS``; the SSH provider's hosts at their configured price, default 0).
  Always included: they cost nothing to ask, and the cheapest eligible offer wins, so a free box you own
  is used first;
* live prices from providers whose APIs price without launching (``Capability.LIVE_OFFERS``), only when
  asked for (``--live``, ``daemon.use_live_offers``): each is an API call.

Built providers (the engine, ``--live``) are asked through their ``offers``. A provider that is only
named in the config (``orch quote``, ``orch plan``: no SDK may be imported) lists its machines through
the registry's ``config_offers`` hook, which needs pydantic and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from providers.catalog.query import match_offers
from providers.offer import GpuRequest, Offer

TYPE_CHECKING = False  # not typing's: `orch quote` imports this module, and typing costs it ~3 ms

if TYPE_CHECKING:
    from typing import Protocol

    from pydantic import BaseModel

    from orchestrator.config.file import OrchConfig
    from providers.base import Provider

    class OfferSource(Protocol):
        """Anything that lists offers for a request: a built provider, your configured machines."""

        def offers(self, req: GpuRequest) -> list[Offer]: ...


__all__ = ["ConfiguredMachines", "OfferSources", "gather_offers", "offer_sources"]


def gather_offers(req: GpuRequest, catalog: Iterable[Offer], sources: Sequence[OfferSource] = ()) -> list[Offer]:
    """Catalog offers plus those of ``sources``; a source's offer replaces the catalog row with the same key.

    A source that fails with a ProviderError is skipped: planning must not break because one API is down.
    """
    merged: dict[tuple[object, ...], Offer] = {o.key: o for o in match_offers(catalog, req)}
    if not sources:   # most quotes: the catalog alone
        return list(merged.values())
    from providers.errors import ProviderError

    for source in sources:
        try:
            found = source.offers(req)
        except ProviderError:
            continue
        # A source may answer more broadly than asked (interconnect, region): hold it to the request.
        for o in match_offers(found, req):
            key = o.key if o.key in merged else (*o.key, o.offer_id)
            merged[key] = o
    return list(merged.values())


@dataclass(frozen=True, slots=True)
class OfferSources:
    """The offers one plan may choose from. ``own`` and ``live`` are asked per request."""

    catalog: Sequence[Offer]
    own: tuple[OfferSource, ...] = ()
    live: tuple[OfferSource, ...] = ()

    def offers(self, req: GpuRequest) -> list[Offer]:
        """Every offer matching ``req``; a source that fails with a ProviderError is skipped."""
        return gather_offers(req, self.catalog, (*self.own, *self.live))


class ConfiguredMachines:
    """A configured provider's machines, listed from its validated settings (no adapter, no SDK)."""

    def __init__(self, name: str, settings: BaseModel) -> None:
        from providers.registry import config_offers_function

        fn = config_offers_function(name)
        if fn is None:
            raise ValueError(f"provider {name} cannot list offers without a cloud call")
        self.name = name
        self._settings = settings
        self._list = fn

    def offers(self, req: GpuRequest) -> list[Offer]:
        return match_offers(self._list(self._settings), req)


def offer_sources(catalog: Sequence[Offer], *, providers: Mapping[str, Provider] | None = None,
                  config: OrchConfig | None = None, live: bool = False) -> OfferSources:
    """The catalog, every configured machine, and (``live``) the live-pricing providers.

    ``providers``: built adapters; those with CONFIG_OFFERS are asked for their machines, those with
    LIVE_OFFERS for live prices when ``live``. ``config``: providers enabled there but not built list their
    machines through the registry hook (a bad section raises ConfigError, as building it would).
    """
    built = dict(providers or {})
    own: list[OfferSource] = []
    live_sources: tuple[OfferSource, ...] = ()
    if built:   # `orch quote` builds none: the provider protocol's module is not imported for it
        from providers.base import Capability

        own += [p for p in built.values() if Capability.CONFIG_OFFERS in p.capabilities]
        live_sources = tuple(p for p in built.values() if live and Capability.LIVE_OFFERS in p.capabilities)
    if config is not None:
        own += _configured_machines(config, skip=set(built))
    return OfferSources(catalog, tuple(own), live_sources)


def _configured_machines(config: OrchConfig, skip: set[str]) -> list[OfferSource]:
    from providers.registry import entry

    names = [n for n in config.enabled_providers() if n not in skip and entry(n).config_offers is not None]
    if not names:
        return []   # no pydantic import: `orch quote` without own machines stays as fast as before
    from orchestrator.config.providers import provider_settings

    found: list[OfferSource] = []
    for name in names:
        found.append(ConfiguredMachines(name, provider_settings(config, name)))   # ConfigError for a bad section
    return found
