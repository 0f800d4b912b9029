"""The daemon's side of a node's short-lived credential and secrets, through the job's store.

Before the go (``start.json``), the StoreBootstrapper puts the job's secrets (``secrets.json``) and a fresh
credential (``credentials.json``) in the launch's report prefix; the StoreMonitor renews the credential there once
half its lifetime has passed (``renew``), and the agent switches to what it finds (the agent's rounds.py,
``refresh_credentials``). Both objects lie under the job's own prefix: the node's scoped credential and the
daemon's keys can read them, another job's node cannot (orchestrator/runtime/node_credentials.py).

Renewal state is in memory: after a daemon restart the first tick of each launch renews at once (one extra mint).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping

from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.runtime.node_credentials import CREDENTIALS_OBJECT, SECRETS_OBJECT, NodeCredentials, Scope, scope_for
from orchestrator.runtime.node_state import job_state_uri
from orchestrator.runtime.objectstore import StoreAccessError, StoreClient
from orchestrator.runtime.store_credentials import MissingStoreCredentials

__all__ = ["CredentialRenewer", "put_secrets"]

log = logging.getLogger("orch.runtime.credentials")

_RETRY_S = 60.0     # after a failed mint or put: try again a minute later (well inside the credential's life)


def job_scope(job: JobRecord, state_store: str) -> Scope:
    """What a node of ``job`` may reach in its stores (node_credentials.scope_for)."""
    m = job.manifest
    return scope_for(m.checkpoint.store if m.checkpoint else None, job_state_uri(m, state_store),
                     [d.source for d in m.data])


class CredentialRenewer:
    """``minter(provider)``: the NodeCredentials for a provider's nodes; ``state_store``: the daemon's state store
    (a job's scope depends on it); ``environ``: where secret values are read; ``clock``: epoch seconds."""

    def __init__(self, minter: Callable[[str], NodeCredentials], *, state_store: str = "",
                 environ: Mapping[str, str] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.minter = minter
        self.state_store = state_store
        self.environ = environ
        self.clock = clock
        self._due: dict[str, float] = {}

    def renew(self, job: JobRecord, attempt: AttemptRecord, client: StoreClient, *, force: bool = False) -> bool:
        """Put a fresh credential in the launch's prefix when due (or ``force``). True when the node has a current
        one there (or needs none)."""
        now = self.clock()
        if not force and now < self._due.get(attempt.launch_id, 0.0):
            return True
        try:
            cred = self.minter(attempt.offer.provider).mint(job_scope(job, self.state_store),
                                                            attempt.offer.provider, attempt.launch_id)
        except MissingStoreCredentials as exc:
            log.warning("launch %s: no store credential to renew: %s", attempt.launch_id, exc)
            self._due[attempt.launch_id] = now + _RETRY_S
            return False
        except Exception as exc:
            log.warning("launch %s: credential not renewed: %s", attempt.launch_id, type(exc).__name__)
            self._due[attempt.launch_id] = now + _RETRY_S
            return False
        if cred.expires_at is None:
            self._due[attempt.launch_id] = float("inf")     # identity or unscoped: nothing expires
            return True
        try:
            client.put(CREDENTIALS_OBJECT, cred.to_json())
        except StoreAccessError as exc:
            log.info("launch %s: renewed credential not written: %s", attempt.launch_id, exc)
            self._due[attempt.launch_id] = now + _RETRY_S
            return False
        self._due[attempt.launch_id] = now + max(_RETRY_S, (cred.expires_at - now) / 2)
        return True


def put_secrets(job: JobRecord, attempt: AttemptRecord, client: StoreClient, environ: Mapping[str, str]) -> bool:
    """Put the job's secret values (from ``environ``, by name) in the launch's prefix. False when one is not
    set or the store refuses (the go waits)."""
    names = sorted(job.manifest.secrets)
    if not names:
        return True
    missing = [n for n in names if n not in environ]
    if missing:
        log.warning("launch %s: secrets not set in the daemon's environment: %s", attempt.launch_id,
                    ", ".join(missing))
        return False
    try:
        client.put(SECRETS_OBJECT, json.dumps({n: environ[n] for n in names}, sort_keys=True).encode() + b"\n")
    except StoreAccessError as exc:
        log.info("launch %s: secrets not written: %s", attempt.launch_id, exc)
        return False
    return True
