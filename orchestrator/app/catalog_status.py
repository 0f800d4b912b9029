"""How fresh the catalog is, per provider: where its rows come from, how old they are, how the last refresh went."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from orchestrator.offers.quote import format_age, offer_age
from providers.catalog.loader import load_catalog, user_catalog_dir
from providers.catalog.refresh.model import Outcome

STALE_AFTER = timedelta(days=1)


class RowsFrom(StrEnum):
    """Where a provider's catalog rows come from."""

    REFRESHED = "refreshed"   # the user's refreshed catalog (over the shipped one)
    SHIPPED = "shipped"       # the catalog orch ships


@dataclass(frozen=True, slots=True)
class ProviderFreshness:
    provider: str
    origin: RowsFrom
    rows: int
    oldest: timedelta | None
    oldest_approximate: bool
    last_attempt: str | None
    outcome: Outcome | None  # the last refresh's (None: never refreshed, or a state file this orch cannot read)
    error: str | None

    @property
    def oldest_age(self) -> str:
        return "-" if self.oldest is None else format_age(self.oldest, self.oldest_approximate)

    @property
    def stale(self) -> bool:
        return self.oldest is not None and self.oldest > STALE_AFTER

    def to_json(self) -> dict[str, object]:
        return {"provider": self.provider, "origin": self.origin.value, "rows": self.rows,
                "oldest_age_s": None if self.oldest is None else int(self.oldest.total_seconds()),
                "oldest_approximate": self.oldest_approximate, "stale": self.stale,
                "last_attempt": self.last_attempt, "outcome": self.outcome.value if self.outcome else None,
                "error": self.error}


def catalog_status(now: datetime) -> list[ProviderFreshness]:
    from providers.catalog.refresh.model import REFRESH_PROVIDERS
    from providers.catalog.refresh.runner import STATE_FILE

    load_catalog.cache_clear()
    snap = load_catalog()
    try:
        state = json.loads((user_catalog_dir() / STATE_FILE).read_text())
    except (OSError, ValueError):
        state = {}
    out: list[ProviderFreshness] = []
    for provider in REFRESH_PROVIDERS:
        rows = [o for o in snap.offers if o.provider == provider]
        ages = [(offer_age(o, now), o.captured_at is None) for o in rows]
        oldest = max(ages) if ages else None
        entry = state.get(provider) if isinstance(state, dict) else None
        entry = entry if isinstance(entry, dict) else {}
        out.append(ProviderFreshness(
            provider, RowsFrom.REFRESHED if provider in snap.refreshed else RowsFrom.SHIPPED, len(rows),
            oldest[0] if oldest else None, bool(oldest and oldest[1]),
            str(entry["last_attempt"])[:16].replace("T", " ") if entry.get("last_attempt") else None,
            _outcome(entry.get("outcome")), entry.get("error")))
    return out


def _outcome(raw: object) -> Outcome | None:
    """The state file's ``outcome`` (providers/catalog/refresh/runner.py writes an ``Outcome`` value) as its
    member; None for anything else: the file is only read here, never trusted to hold orch's words."""
    try:
        return Outcome(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
