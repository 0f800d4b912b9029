"""Which providers exist, and how to build one without importing any SDK until it is used.

Each provider lives in ``providers/<package>/`` with two modules:

* ``settings.py``: a pydantic model ``Settings`` (SDK-free) of what the adapter needs: endpoints,
  regions, project, resource group, key names. Defaults come from the cloud's usual places.
* ``adapter.py``: the Provider subclass. Importing it imports the SDK; only ``create_provider`` does.

A provider whose offers are known from its settings alone (your own machines: SSH) also names a
``config_offers`` function, ``settings -> list[Offer]``, in an SDK-free module: ``orch quote`` and ``orch
plan`` list those offers without building the adapter. Its adapter has ``Capability.CONFIG_OFFERS``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pydantic costs ~30 ms to import; `orch quote` only needs canonical_provider
    from pydantic import BaseModel

    from providers.base import Offer, Provider


@dataclass(frozen=True, slots=True)
class ProviderEntry:
    name: str
    package: str        # module path under providers/
    adapter_class: str
    display: str
    extra: str | None   # the pip extra that brings its SDK, if any
    setup_hint: str     # how a user configures it, shown by `orch providers`
    #: "module:function" (SDK-free) listing its offers from validated settings alone, without a cloud call;
    #: None: its offers need a cloud call (or come from the catalog).
    config_offers: str | None = None
    #: True where a machine's local disk is what it is (Vast asks, Lambda types, your machines), rather than
    #: created at the launch's disk_gb (AWS, GCP, Azure, RunPod): the planner can only check known sizes.
    fixed_disk: bool = False
    #: True where orch launches a job of several machines there (the adapter's ``Capability.MULTI_NODE``, which
    #: tests/test_planner.py holds this to): the planner excludes the others' offers for a multi-node job.
    multi_node: bool = False
    #: True where the adapter prices without launching (its ``Capability.LIVE_OFFERS``, which
    #: tests/test_planner.py holds this to): ``orch quote --live`` builds only these, not every SDK configured.
    live_offers: bool = False


PROVIDERS: tuple[ProviderEntry, ...] = (
    ProviderEntry("aws", "providers.aws", "AwsProvider", "AWS EC2", "aws",
                  "add `aws: {regions: [us-east-1]}` under providers in orch's config; credentials from "
                  "`aws configure`, AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY", multi_node=True,
                  live_offers=True),
    ProviderEntry("gcp", "providers.gcp", "GcpProvider", "Google Compute Engine", "gcp",
                  "add `gcp: {project: P, zones: [us-central1-a]}` under providers; credentials from "
                  "`gcloud auth application-default login` or GOOGLE_APPLICATION_CREDENTIALS", multi_node=True),
    ProviderEntry("azure", "providers.azure", "AzureProvider", "Azure Virtual Machines", "azure",
                  "add `azure: {subscription_id: S, resource_group: RG, subnet_id: ...}` under providers; "
                  "credentials from `az login` or AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET",
                  multi_node=True),
    ProviderEntry("runpod", "providers.runpod", "RunPodProvider", "RunPod", None,
                  "add `runpod: {}` under providers and export RUNPOD_API_KEY", live_offers=True),
    ProviderEntry("vastai", "providers.vastai", "VastProvider", "Vast.ai", None,
                  "add `vastai: {}` under providers and export VAST_API_KEY (or `vastai set api-key`)",
                  fixed_disk=True, live_offers=True),
    ProviderEntry("lambda", "providers.lambdalabs", "LambdaProvider", "Lambda Cloud", None,
                  "add `lambda: {}` under providers and export LAMBDA_API_KEY", fixed_disk=True,
                  live_offers=True),
    ProviderEntry("ssh", "providers.ssh", "SshProvider", "Your own machines (SSH)", None,
                  "declare hosts under providers.ssh.hosts (address, user, key_path, gpu, gpu_count, host_key)",
                  config_offers="providers.ssh.offers:host_offers", fixed_disk=True, multi_node=True),
)

PROVIDER_NAMES: tuple[str, ...] = tuple(e.name for e in PROVIDERS)
_BY_NAME = {e.name: e for e in PROVIDERS}

# The catalog calls Vast "vast"; orch's provider name is "vastai". Both spellings are accepted.
PROVIDER_ALIASES = {"vast": "vastai", "lambdalabs": "lambda", "lambda-cloud": "lambda", "gce": "gcp"}


class UnknownProviderError(ValueError):
    """A provider name orch does not know. ``known``/``label``: the names the message lists, and what it calls
    them (a command that takes only some providers lists those: ``refreshable: ...``)."""

    def __init__(self, name: str, suggestions: list[str], known: Sequence[str] = PROVIDER_NAMES,
                 label: str = "known"):
        self.name = name
        self.suggestions = suggestions
        from providers.gpus import short_name

        hint = f" (did you mean {' or '.join(suggestions)}?)" if suggestions else ""
        super().__init__(f"unknown provider {short_name(name)}{hint}; {label}: {', '.join(known)}")


def canonical_provider(name: str) -> str:
    """Map a provider name or alias to orch's name; raise UnknownProviderError with suggestions."""
    import difflib

    key = name.strip().lower()
    key = PROVIDER_ALIASES.get(key, key)
    if key in _BY_NAME:
        return key
    close = difflib.get_close_matches(key, PROVIDER_NAMES, n=2, cutoff=0.5) if len(key) <= 64 else []
    raise UnknownProviderError(name, close)


def entry(name: str) -> ProviderEntry:
    return _BY_NAME[canonical_provider(name)]


def settings_class(name: str) -> type[BaseModel]:
    module = importlib.import_module(f"{entry(name).package}.settings")
    cls: type[BaseModel] = module.Settings
    return cls


def load_settings(name: str, raw: Mapping[str, Any] | None = None) -> BaseModel:
    """Validate a provider's section of orch's config (None: defaults and the cloud's usual places)."""
    return settings_class(name).model_validate(dict(raw or {}))


def config_offers_function(name: str) -> Callable[[BaseModel], list[Offer]] | None:
    """The provider's ``settings -> offers`` function when it lists offers without a cloud call, else None.

    Imports only the named SDK-free module (and so pydantic), never the adapter."""
    target = entry(name).config_offers
    if target is None:
        return None
    module_name, _, function = target.partition(":")
    fn: Callable[[BaseModel], list[Offer]] = getattr(importlib.import_module(module_name), function)
    return fn


def has_fixed_disk(provider: str) -> bool:
    """Whether ``provider``'s machines come with the disk they have (unknown names: no)."""
    e = _BY_NAME.get(PROVIDER_ALIASES.get(provider, provider))
    return e is not None and e.fixed_disk


def launches_multi_node(provider: str) -> bool:
    """Whether orch launches a job of several machines on ``provider`` (unknown names: no)."""
    e = _BY_NAME.get(PROVIDER_ALIASES.get(provider, provider))
    return e is not None and e.multi_node


def prices_live(provider: str) -> bool:
    """Whether ``provider``'s adapter prices without launching (unknown names: no)."""
    e = _BY_NAME.get(PROVIDER_ALIASES.get(provider, provider))
    return e is not None and e.live_offers


def create_provider(name: str, settings: BaseModel | None = None) -> Provider:
    """Import the adapter (and so its SDK) and build it from its validated settings (``load_settings``; None:
    the defaults). ImportError means the SDK extra is missing."""
    e = entry(name)
    if settings is None:
        settings = load_settings(e.name)
    elif not isinstance(settings, wanted := settings_class(e.name)):
        # A mapping (or another provider's settings) is refused: a section is validated once, by load_settings.
        got = type(settings)
        raise TypeError(f"{e.name}'s adapter takes {wanted.__module__}.{wanted.__qualname__}, not "
                        f"{got.__module__}.{got.__qualname__}")
    module = importlib.import_module(f"{e.package}.adapter")
    cls = getattr(module, e.adapter_class)
    provider: Provider = cls(settings)
    return provider
