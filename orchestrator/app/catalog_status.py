"""How fresh the catalog is, per provider: where its rows come from, how old they are, how the last refresh went."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.offers.quote import format_age, offer_age
from providers.catalog.loader import load_catalog, user_catalog_dir

STALE_AFTER = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class ProviderFreshness:
    provider: str
    origin: str              # "refreshed" or "shipped"
    rows: int
    oldest: timedelta | None
    oldest_approximate: bool
    last_attempt: str | None
    outcome: str | None
    error: str | None

    @property
    def oldest_age(self) -> str:
        return "-" if self.oldest is None else format_age(self.oldest, self.oldest_approximate)

    @property
    def stale(self) -> bool:
        return self.oldest is not None and self.oldest > STALE_AFTER

    def to_json(self) -> dict[str, object]:
        return {"provider": self.provider, "origin": self.origin, "rows": self.rows,
                "oldest_age_s": None if self.oldest is None else int(self.oldest.total_seconds()),
                "oldest_approximate": self.oldest_approximate, "stale": self.stale,
                "last_attempt": self.last_attempt, "outcome": self.outcome, "error": self.error}


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
            provider, "refreshed" if provider in snap.refreshed else "shipped", len(rows),
            oldest[0] if oldest else None, bool(oldest and oldest[1]),
            str(entry["last_attempt"])[:16].replace("T", " ") if entry.get("last_attempt") else None,
            entry.get("outcome"), entry.get("error")))
    return out
