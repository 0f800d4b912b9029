"""The values of a catalog refresh: its settings, the context a source runs in, and what came of it.

A provider's refresh is a short pipeline of steps (``Step``): the first fetches its rows (gpuhunt's published
archive, or Vast's live search), the others adjust them (per-zone AWS spot, Azure SKUs gpuhunt leaves out,
live RunPod and Lambda prices). A step raises ``SourceError`` when its answer is unusable (HTTP error,
timeout, garbage): the provider's refresh fails and its previous rows stay exactly as they were. A step that
cannot run here (no credentials for it) raises ``SourceSkipped``: the rows so far stand, and the skip is said.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import httpx

    from providers.base import Offer

AZURE_PRICES_URL = "https://prices.azure.com/api/retail/prices"
VAST_URL = "https://console.vast.ai/api/v0"
RUNPOD_URL = "https://api.runpod.io/graphql"
LAMBDA_URL = "https://cloud.lambda.ai/api/v1"

#: The providers a refresh knows, in orch's order.
REFRESH_PROVIDERS = ("aws", "gcp", "azure", "runpod", "vastai", "lambda")


class SourceError(Exception):
    """A source's answer is unusable: the provider's refresh fails and its previous rows stay."""


class SourceSkipped(Exception):
    """A step that cannot run here (no credentials for it): the rows so far stand."""


@dataclass(frozen=True, slots=True)
class AwsSpotSettings:
    """Where per-zone spot prices are asked for, with the user's AWS credentials (boto3's usual chain)."""

    regions: tuple[str, ...]
    endpoint_url: str | None = None
    profile: str | None = None


@dataclass(frozen=True, slots=True)
class RefreshSettings:
    """Sources' addresses (defaults: the real ones; tests and mirrors point them elsewhere) and limits.

    ``gpuhunt_url`` None means gpuhunt's own choice: ``$GPUHUNT_CATALOG_URL``, else its published bucket.
    ``lambda_api_key`` is a secret: it is sent to Lambda only, never printed or stored.
    """

    gpuhunt_url: str | None = None
    azure_prices_url: str = AZURE_PRICES_URL
    vast_url: str = VAST_URL
    runpod_url: str = RUNPOD_URL
    lambda_url: str = LAMBDA_URL
    lambda_api_key: str | None = field(default=None, repr=False)
    aws_spot: AwsSpotSettings | None = None
    http_timeout_s: float = 30.0
    provider_timeout_s: float = 300.0
    every: timedelta = timedelta(hours=6)


@dataclass(frozen=True, slots=True)
class RefreshContext:
    settings: RefreshSettings
    client: httpx.Client
    now: datetime


@dataclass(frozen=True, slots=True)
class StepResult:
    offers: list[Offer]
    note: str


class Step(Protocol):
    """One step of a provider's refresh: takes the rows so far, returns the rows after it."""

    name: str

    def run(self, rows: list[Offer], ctx: RefreshContext) -> StepResult: ...


class Outcome(StrEnum):
    REFRESHED = "refreshed"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ProviderReport:
    """What one provider's refresh did. ``changed``: rows whose price is new or moved (kept in the history)."""

    provider: str
    outcome: Outcome
    rows: int = 0
    previous_rows: int = 0
    changed: int = 0
    notes: tuple[str, ...] = ()
    error: str | None = None
    captured_at: datetime | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {"provider": self.provider, "outcome": self.outcome.value, "rows": self.rows,
                "previous_rows": self.previous_rows, "changed": self.changed, "notes": list(self.notes),
                "error": self.error,
                "captured_at": self.captured_at.isoformat() if self.captured_at else None,
                "seconds": round(self.seconds, 2)}


@dataclass(frozen=True, slots=True)
class RefreshReport:
    directory: str
    providers: tuple[ProviderReport, ...]

    @property
    def failed(self) -> tuple[ProviderReport, ...]:
        return tuple(p for p in self.providers if p.outcome is Outcome.FAILED)

    def to_json(self) -> dict[str, object]:
        return {"catalog_dir": self.directory, "ok": not self.failed,
                "providers": [p.to_json() for p in self.providers]}
