"""Where ``orch quote``'s offers come from: the catalog, your own machines from orch's config, and (``--live``)
the providers that price live, as the planner asks them (``orchestrator.offers.sources``), with the quote's
notes on stderr."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from orchestrator.cli.errors import EXIT_BAD_INPUT, fail

TYPE_CHECKING = False  # not typing's: `orch quote` imports this module, and typing costs it ~3 ms

if TYPE_CHECKING:
    from orchestrator.offers.sources import OfferSources
    from providers.base import GpuRequest, Offer, Provider


def offers_for(req: GpuRequest, catalog: Sequence[Offer], live: bool, noted: set[str] | None = None) -> list[Offer]:
    """The catalog, your own machines from orch's config, and (``--live``) live offers: the planner's sources.

    Without --live no SDK is imported: own machines come from their settings alone (pydantic, and only when
    the config names such a provider). A config that cannot be read is noted and left out (noted once per
    ``noted``, the notes already written, which the GPU list shares across its counts); with --live it is an
    error, as for every command that builds providers.
    """
    from orchestrator.config.paths import config_path
    from orchestrator.offers.sources import offer_sources

    if not live and not config_path().exists():
        return offer_sources(catalog).offers(req)
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import load_config

    if not live:
        try:
            return offer_sources(catalog, config=load_config()).offers(req)
        except ConfigError as exc:
            note = f"note: {exc}; your own machines are not listed\n"
            noted = set() if noted is None else noted
            if note not in noted:
                sys.stderr.write(note)
                noted.add(note)
            return offer_sources(catalog).offers(req)
    live_offers = LiveOffers()
    try:
        return live_offers.offers(req, catalog)
    finally:
        live_offers.close()


class LiveOffers:
    """Catalog, own machines and live offers (marked source=live) from every configured provider that prices
    live, for every request of one quote: the providers are built once (the GPU list asks once per GPU count, and
    was building them, asking each and noting each failure once per count). Only here are SDKs imported, and only
    those of providers that price live (``build_live_providers``). A provider that cannot be reached is noted on
    stderr once and not asked again; its catalog rows stay. ``close()`` closes the providers.
    """

    def __init__(self) -> None:
        from orchestrator.config.errors import ConfigError
        from orchestrator.config.file import load_config
        from orchestrator.config.providers import build_live_providers
        from orchestrator.offers.sources import offer_sources

        try:
            config = load_config()
            self.providers = build_live_providers(config)
            self.sources = offer_sources((), providers=self.providers, config=config, live=True)
        except ConfigError as exc:
            fail(str(exc), EXIT_BAD_INPUT)
        if not self.sources.live:
            sys.stderr.write("note: --live: no configured provider prices live (see `orch providers`)\n")
        self.failed: set[int] = set()    # id() of each live source that failed

    def offers(self, req: GpuRequest, catalog: Sequence[Offer]) -> list[Offer]:
        from dataclasses import replace

        live = tuple(Noting(p, self.failed) for p in self.sources.live if id(p) not in self.failed)
        return replace(self.sources, catalog=catalog, live=live).offers(req)  # type: ignore[arg-type]

    def close(self) -> None:
        for p in self.providers.values():
            p.close()


class Noting:
    """One live source, saying on stderr that it could not be asked (the sources then skip it) and marking it
    failed so that later requests (the quote's other counts, the plan's other jobs) do not ask it again."""

    def __init__(self, provider: Provider, failed: set[int], label: str = "--live") -> None:
        self.provider = provider
        self.failed = failed
        self.label = label

    def offers(self, r: GpuRequest) -> list[Offer]:
        from providers.errors import ProviderError

        if id(self.provider) in self.failed:
            return []
        try:
            return self.provider.offers(r)
        except ProviderError as exc:
            sys.stderr.write(f"note: {self.label}: {exc}\n")
            self.failed.add(id(self.provider))
            raise


def noting_live(sources: OfferSources, label: str = "--live") -> OfferSources:
    """``sources`` whose live providers each say once on stderr why they could not be asked (no key found, the
    API down) and are then skipped: ``orch plan --live`` and apply's preview, which would otherwise plan
    without them in silence ("no eligible offer", and not why)."""
    from dataclasses import replace

    failed: set[int] = set()
    return replace(sources, live=tuple(Noting(p, failed, label) for p in sources.live))  # type: ignore[arg-type]
