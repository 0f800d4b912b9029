"""Job manifests: the schema (pydantic), durations and prices, and a loader that reports errors by line."""

from orchestrator.manifest.errors import ManifestError, ManifestErrors
from orchestrator.manifest.loader import LoadedManifest, content_hash, load_manifests, parse_text
from orchestrator.manifest.schema import API_VERSION, Manifest, json_schema

__all__ = [
    "API_VERSION",
    "LoadedManifest",
    "Manifest",
    "ManifestError",
    "ManifestErrors",
    "content_hash",
    "json_schema",
    "load_manifests",
    "parse_text",
]
