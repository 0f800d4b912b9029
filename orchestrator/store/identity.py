"""This store's identity: a short random id drawn once (migration 0008) and kept in ``store_identity``.

Every launch id this store's engines make carries it (``providers.base.new_launch_id``), so the machine's
tags (or its name, on clouds without tags) say which store launched it; the sweep ends only its own
store's orphans. Two stores on one cloud account under one owner name therefore never end each other's
machines.
"""

from __future__ import annotations

import re
import secrets

from sqlalchemy.exc import IntegrityError
from sqlmodel import select

from orchestrator.clock import utcnow
from orchestrator.store.db import Store
from orchestrator.store.models import StoreIdentityRow

STORE_ID_RE = re.compile(r"^[0-9a-f]{8}$")


def store_id(store: Store) -> str:
    """The store's id (8 lowercase hex digits). The migration draws it; a row lost since (a hand-made
    schema) is drawn again here, once: concurrent callers all read the row that won the insert."""
    with store.transaction() as tx:
        row = tx.get(StoreIdentityRow, 1)
        if row is not None:
            return _checked(row.store_id)
    try:
        with store.transaction() as tx:
            tx.add(StoreIdentityRow(id=1, store_id=secrets.token_hex(4), created_at=utcnow()))
    except IntegrityError:
        pass                          # another process drew it first: theirs is the store's
    with store.transaction() as tx:
        return _checked(tx.exec(select(StoreIdentityRow.store_id).where(StoreIdentityRow.id == 1)).one())


def _checked(value: str) -> str:
    if not STORE_ID_RE.fullmatch(value):
        raise ValueError(f"store_identity holds {value!r}, not 8 lowercase hex digits: the store is damaged")
    return value
