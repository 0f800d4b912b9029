"""The kept job reads' spend update (orchestrator/store/sqlstore_reads.py ``_with_spent``) copies every field of
a JobRecord (it builds the record by hand, for speed): a field added later must not be dropped."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime

from orchestrator.engine.ports import JobRecord
from orchestrator.store.sqlstore_reads import KeptReads


class _Reads(KeptReads):
    def __init__(self, spent: dict[int, float]) -> None:
        self._spent = spent


def test_the_spend_update_keeps_every_other_field() -> None:
    values = {f.name: object() for f in fields(JobRecord)}
    values.update(id=7, spent_usd=1.5, created_at=datetime(2026, 12, 1, tzinfo=UTC))
    job = JobRecord(**values)  # type: ignore[arg-type]
    updated = _Reads({7: 2.25})._with_spent(job)
    assert updated.spent_usd == 2.25
    assert all(getattr(updated, f.name) is getattr(job, f.name) for f in fields(JobRecord) if f.name != "spent_usd")
    assert _Reads({7: 1.5})._with_spent(job) is job
