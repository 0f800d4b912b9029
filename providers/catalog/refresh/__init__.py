"""``orch catalog refresh``: current prices from gpuhunt's published catalogs and the providers' own APIs,
written to the user catalog one provider at a time. Imported only by the refresh (never by ``orch quote``)."""

from providers.catalog.refresh.model import (
    REFRESH_PROVIDERS,
    AwsSpotSettings,
    Outcome,
    ProviderReport,
    RefreshReport,
    RefreshSettings,
)
from providers.catalog.refresh.runner import refresh

__all__ = ["REFRESH_PROVIDERS", "AwsSpotSettings", "Outcome", "ProviderReport", "RefreshReport",
           "RefreshSettings", "refresh"]
