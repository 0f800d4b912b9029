"""The job manifest (``apiVersion: orch/v1``, ``kind: Job``): what to run, on what, under which limits.

Values are validated and normalised here: GPU names become canonical (``A100-80G``), provider names
become orch's names, durations become timedeltas, prices floats. docs/manifests.md documents every field.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from orchestrator.fit.shapes import MAX_NODES
from orchestrator.inputs.durations import MAX_ESTIMATED_HOURS, HintedValueError
from orchestrator.inputs.durations import estimated_hours as check_estimated_hours
from orchestrator.manifest.code_spec import Code
from orchestrator.manifest.field_types import (
    NAME_PATTERN,
    Arg,
    Deadline,
    Duration,
    EnvKey,
    EnvValue,
    GpuName,
    Price,
    ProviderName,
    RegionGlob,
    SecretName,
    gpu_list,
)
from orchestrator.manifest.model_spec import ModelSpec
from orchestrator.manifest.storage_spec import Checkpoint, DataItem

API_VERSION = "orch/v1"


class _Model(BaseModel):
    # Strict: a YAML string is not silently a number. Enum fields opt out (they take their values).
    # No .inf/.nan: every number is a finite amount of something.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True,
                              use_enum_values=False, allow_inf_nan=False)


class MarketChoice(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"
    AUTO = "auto"


class Launcher(StrEnum):
    TORCHRUN = "torchrun"
    ACCELERATE = "accelerate"
    DEEPSPEED = "deepspeed"
    COMMAND = "command"


class IdleAction(StrEnum):
    STOP = "stop"
    TERMINATE = "terminate"


class Resources(_Model):
    """The machines: ``count`` GPUs in each of ``nodes`` machines."""

    gpu: Annotated[list[GpuName], BeforeValidator(gpu_list),
                   WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"},
                                                                  "minItems": 1}]})] = Field(
        default_factory=list, max_length=32,
        description="A GPU name or a list of acceptable ones (any alias; stored canonical). "
        "Optional with a model: block (orch then picks the GPUs that fit).")
    count: int = Field(1, ge=1, le=64, description="GPUs per node.")
    nodes: int = Field(1, ge=1, le=MAX_NODES, description="Machines.")
    min_vram_gb: float | None = Field(None, ge=0, description="Least memory per GPU, GB.")
    interconnect: Literal["nvlink", "pcie"] | None = Field(None, description="GPU-to-GPU link within a node.")
    infiniband: bool | None = Field(None, description="Multi-node: whether NCCL may use an InfiniBand/RoCE fabric "
                                    "between the nodes (false: NCCL_IB_DISABLE=1); unset: orch decides from the "
                                    "machines (docs/runtime.md).")
    fabric: Literal["any", "fast", "infiniband"] = Field(
        "any", description="Multi-node: the link between the nodes. any: whatever the machines have (plain TCP "
        "included); fast: a fabric orch attaches (EFA, InfiniBand, RoCE, GPUDirect-TCPX), not plain TCP; "
        "infiniband: one NCCL reaches through IB verbs (InfiniBand or RoCE). Ignored for one node.")
    vcpus_per_gpu: float | None = Field(None, ge=0, description="Least vCPUs per GPU.")
    ram_gb_per_gpu: float | None = Field(None, ge=0, description="Least host RAM per GPU, GB.")
    disk_gb: float | None = Field(None, ge=0, description="Least local disk, GB.")

    @field_validator("gpu")
    @classmethod
    def _unique(cls, names: list[str]) -> list[str]:
        return list(dict.fromkeys(names))


class ProviderFilter(_Model):
    """Provider names (aws, gcp, azure, runpod, vastai, lambda, ssh; aliases accepted)."""

    allow: list[ProviderName] = Field(default_factory=list, max_length=32, description="Only these (empty: any).")
    deny: list[ProviderName] = Field(default_factory=list, max_length=32, description="Never these.")

    @field_validator("allow", "deny")
    @classmethod
    def _unique(cls, names: list[str]) -> list[str]:
        return list(dict.fromkeys(names))


class RegionFilter(_Model):
    """Region or zone globs (``us-*``, ``europe-west4-?``), matched against both region and zone."""

    allow: list[RegionGlob] = Field(default_factory=list, max_length=256, description="Only these (empty: any).")
    deny: list[RegionGlob] = Field(default_factory=list, max_length=256, description="Never these.")


class Run(_Model):
    """What to start on every node."""

    launcher: Launcher = Field(strict=False, description="torchrun, accelerate, deepspeed, or command (run as given).")
    script: str | None = Field(None, min_length=1, description="The training script (not for launcher: command).")
    args: list[Arg] = Field(default_factory=list, max_length=1000, description="Arguments after the script.")
    command: str | None = Field(None, min_length=1, description="The shell command, for launcher: command.")
    backend: Literal["nccl", "gloo"] | None = Field(None, description="torch.distributed backend (default nccl).")
    config: str | None = Field(None, min_length=1,
                               description="accelerate config file or deepspeed JSON config, relative to the job.")

    @model_validator(mode="after")
    def _launcher_fields(self) -> Run:
        if self.launcher is Launcher.COMMAND:
            if self.command is None:
                raise HintedValueError("launcher 'command' needs run.command", "e.g. command: python train.py")
            if self.script is not None:
                raise HintedValueError("launcher 'command' takes run.command, not run.script",
                                       "put the script inside command")
        else:
            if self.script is None:
                raise HintedValueError(f"launcher {self.launcher.value!r} needs run.script",
                                       "e.g. script: train.py")
            if self.command is not None:
                raise HintedValueError(f"run.command is only for launcher 'command', not {self.launcher.value!r}",
                                       "use script and args")
        if self.config is not None and self.launcher not in (Launcher.ACCELERATE, Launcher.DEEPSPEED):
            raise HintedValueError("run.config is only for launchers accelerate and deepspeed")
        return self


class IdlePolicy(_Model):
    min_gpu_util_pct: float = Field(5, ge=0, le=100, description="Below this mean GPU utilisation, it is idle.")
    window: Duration = Field(timedelta(minutes=15), description="For this long.")
    action: IdleAction = Field(IdleAction.TERMINATE, strict=False, description="stop (keep the disk) or terminate.")


class Policies(_Model):
    idle: IdlePolicy = Field(default_factory=IdlePolicy)
    budget_usd: Price | None = Field(None, description="Stop the job when its spend reaches this.")
    deadline: Deadline | None = None
    max_relaunches: int = Field(10, ge=0, description="Give up after this many relaunches.")
    preempted_zone_cooldown: Duration = Field(timedelta(minutes=30),
                                              description="Avoid a zone this long after a preemption there.")
    estimated_hours: Annotated[float, Field(gt=0), AfterValidator(check_estimated_hours),
                               WithJsonSchema({"type": "number", "exclusiveMinimum": 0,
                                               "maximum": MAX_ESTIMATED_HOURS})] | None = Field(
        None, description="Expected run time in hours (at most ten years), for cost estimates.")
    boot_timeout: Duration | None = Field(None, description="End a node whose agent has not reported this long "
                                          "after launch, and relaunch elsewhere (default: the daemon's, 20m).")
    heartbeat_timeout: Duration | None = Field(None, description="A node whose agent is silent this long is lost: "
                                               "recover from the last checkpoint (default: the daemon's, 10m).")
    unreachable_grace: Duration | None = Field(None, description="A machine its cloud lists as unreachable counts as "
                                               "lost after this long (default: the daemon's, 10m).")

    def deadline_at(self, applied_at: datetime) -> datetime | None:
        """The deadline as a UTC instant, a relative one counted from ``applied_at``."""
        if self.deadline is None:
            return None
        if isinstance(self.deadline, timedelta):
            return applied_at.astimezone(UTC) + self.deadline
        return self.deadline


class Manifest(_Model):
    """One job. Unknown fields are errors."""

    model_config = ConfigDict(title="orch Job manifest (orch/v1)")

    api_version: Literal["orch/v1"] = Field(alias="apiVersion")
    kind: Literal["Job"]
    name: str = Field(pattern=NAME_PATTERN, description="Lower-case DNS label: letters, digits, '-'.")
    project: str | None = Field(None, pattern=NAME_PATTERN, description="The project the job's spend counts "
                                "against: budgets with match: {project: ...} in orch's config cap it.")
    resources: Resources = Field(default_factory=Resources)
    model: ModelSpec | None = Field(None, description="The model trained; orch sizes (or checks) the GPUs from it.")
    market: MarketChoice = Field(MarketChoice.AUTO, strict=False,
                                 description="spot, on-demand, or auto (cheapest).")
    max_price_hr: Price | None = Field(None, description="Most $/h for the whole job (all nodes).")
    providers: ProviderFilter = Field(default_factory=ProviderFilter)
    regions: RegionFilter = Field(default_factory=RegionFilter)
    image: str | None = Field(None, min_length=1, description="Docker image to run in (default: the host).")
    setup: Annotated[list[str], BeforeValidator(lambda v: v.splitlines() if isinstance(v, str) else v),
                     WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})
                     ] = Field(
        default_factory=list, description="Shell lines run once per node before the job.")
    run: Run
    code: Code | None = Field(None, description="The repository files shipped to every node (default: the git "
                              "repository holding the manifest, at the applied commit).")
    data: list[DataItem] = Field(default_factory=list, max_length=256)
    checkpoint: Checkpoint | None = None
    policies: Policies = Field(default_factory=Policies)
    env: dict[EnvKey, EnvValue] = Field(default_factory=dict, max_length=1000,
                                        description="Plain configuration, NAME: value.")
    secrets: list[SecretName] = Field(default_factory=list, max_length=256,
                                      description="Names of environment variables read at launch "
                                      "on the machine running orch; their values are never stored.")

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise HintedValueError("a secret is listed twice")
        return names

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        if not self.resources.gpu and self.model is None:
            raise HintedValueError("say which GPUs: resources.gpu, or a model: block orch sizes them from",
                                   "e.g. resources: {gpu: A100-80G} or model: {params: 8B, method: qlora}",
                                   at=("resources", "gpu"))   # gpu: [] is reported at its line
        clash = set(self.env) & set(self.secrets)
        if clash:
            raise HintedValueError(f"{', '.join(sorted(clash))} is both in env and in secrets", "keep one")
        for provider in self.providers.allow:
            if provider in self.providers.deny:
                raise HintedValueError(f"provider {provider!r} is both allowed and denied")
        if self.image and self.checkpoint and self.checkpoint.notify and self.checkpoint.notify.signal:
            # Docker delivers signals to the container's PID 1 only, never to the training ranks.
            raise HintedValueError("with an image, checkpoint.notify must be a file, not a signal",
                                   "e.g. notify: {file: /ckpt/CHECKPOINT_NOW}")
        return self

    @property
    def total_gpus(self) -> int:
        return self.resources.count * self.resources.nodes

    def to_json(self) -> dict[str, Any]:
        """The canonical JSON form: what the store keeps, and what ``model_validate`` reads back."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def json_schema() -> dict[str, Any]:
    """The JSON Schema editors validate manifests with (by alias: ``apiVersion``)."""
    schema = Manifest.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
