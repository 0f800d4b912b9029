"""The offline GPU catalog: shipped list prices, and the filter every quote and plan goes through."""

from providers.catalog.loader import CatalogSnapshot, load_catalog
from providers.catalog.query import match_offers

__all__ = ["CatalogSnapshot", "load_catalog", "match_offers"]
