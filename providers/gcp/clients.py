"""The google-cloud-compute clients of one GcpProvider: credentials and project resolved once and lazily (never
at import or settings time), and one client pair per kind of resource (instances, firewalls, resource
policies), each with the operations client that waits on its changes, built on first use over REST with the
configured endpoint and closed together. Only this package's modules import it."""

from __future__ import annotations

import os
import threading
from typing import Any, TypeVar

import google.auth
import google.auth.exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import compute_v1

from providers.errors import AuthError

from .errors import translate_error
from .settings import Settings

_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
Client = TypeVar("Client")
Operations = TypeVar("Operations")


class GceClients:
    """The lazily built clients; thread-safe (one lock guards credentials, project and every client)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._project: str | None = settings.project
        self._credentials: Credentials | None = None
        # The client pairs built so far, by the resource client's class: (resource client, operations client).
        self._pairs: dict[type, tuple[Any, Any]] = {}

    def resolve(self) -> tuple[Credentials, str]:
        """Credentials and project, looked up once and lazily (never at import or settings time)."""
        with self._lock:
            if self._credentials is None:
                project: str | None = None
                if self.settings.anonymous_credentials:
                    self._credentials = AnonymousCredentials()
                else:
                    try:
                        creds, project = google.auth.default(scopes=list(_SCOPES))
                    except google.auth.exceptions.DefaultCredentialsError as exc:
                        raise translate_error(exc) from exc
                    self._credentials = creds
                self._project = self._project or project or os.environ.get("GOOGLE_CLOUD_PROJECT")
            if not self._project:
                raise AuthError("no GCP project configured", provider="gcp",
                                hint="set providers.gcp.project in orch's config, or GOOGLE_CLOUD_PROJECT, "
                                     "or `gcloud config set project P` before the ADC login")
            return self._credentials, self._project

    def _options(self) -> ClientOptions | None:
        return ClientOptions(api_endpoint=self.settings.api_endpoint) if self.settings.api_endpoint else None

    def _pair(self, client: type[Client], operations: type[Operations]) -> tuple[Client, Operations, str]:
        """``client``'s instance, the ``operations`` client that waits on its changes, and the project; the pair
        is built on first use over REST with the configured endpoint."""
        creds, project = self.resolve()
        with self._lock:
            pair = self._pairs.get(client)
            if pair is None:
                options = self._options()
                pair = self._pairs[client] = (client(credentials=creds, client_options=options, transport="rest"),
                                              operations(credentials=creds, client_options=options, transport="rest"))
            return pair[0], pair[1], project

    def instances(self) -> tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient, str]:
        """The instances client, the zone operations client and the project."""
        return self._pair(compute_v1.InstancesClient, compute_v1.ZoneOperationsClient)

    def firewalls(self) -> tuple[compute_v1.FirewallsClient, compute_v1.GlobalOperationsClient, str]:
        """The firewalls client, the global operations client and the project."""
        return self._pair(compute_v1.FirewallsClient, compute_v1.GlobalOperationsClient)

    def policies(self) -> tuple[compute_v1.ResourcePoliciesClient, compute_v1.RegionOperationsClient, str]:
        """The resource policies client, the region operations client and the project."""
        return self._pair(compute_v1.ResourcePoliciesClient, compute_v1.RegionOperationsClient)

    def images(self) -> tuple[compute_v1.ImagesClient, str]:
        """The images client (reads only: its operations client is never used) and the project."""
        client, _, project = self._pair(compute_v1.ImagesClient, compute_v1.GlobalOperationsClient)
        return client, project

    def close(self) -> None:
        """Close every client built so far; the next call builds them again."""
        with self._lock:
            for pair in self._pairs.values():
                for client in pair:
                    client.transport.close()
            self._pairs.clear()
