"""The state store: SQLModel tables, Alembic migrations, typed operations and row leases.

``open_store()`` then ``with store.transaction() as tx:`` and the functions in ``repo``/``leases``.
Importing this package imports SQLAlchemy: the CLI imports it inside commands only.
"""

from orchestrator.store.db import Store, StoreError, database_url, open_store
from orchestrator.store.models import Attempt, CheckpointRow, Event, InstanceRow, Job, Spend

__all__ = [
    "Attempt",
    "CheckpointRow",
    "Event",
    "InstanceRow",
    "Job",
    "Spend",
    "Store",
    "StoreError",
    "database_url",
    "open_store",
]
