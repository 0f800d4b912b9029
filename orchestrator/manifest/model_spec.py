"""A manifest's ``model:`` block: what is trained, so that orch can size the GPUs (docs/fit.md).

``model: {params: 8B, method: qlora, precision: bf16}`` may stand instead of (or beside) ``resources.gpu``.
Values are checked with the same rules as ``orch fit``; the JSON form keeps the parameter count as a number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from orchestrator.fit.memory import Method, Offload, Optimizer, Precision
from orchestrator.inputs.durations import HintedValueError

if TYPE_CHECKING:
    from orchestrator.fit.search import FitQuery


def _count(value: object) -> object:
    from orchestrator.fit.shapes import ShapeError, parse_count

    if isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            return parse_count(value)
        except ShapeError as exc:
            raise HintedValueError(str(exc), "e.g. params: 8B, 70B or 350M") from None
    return value


ParamCount = Annotated[
    float, BeforeValidator(_count),
    WithJsonSchema({"anyOf": [{"type": "string", "pattern": r"^\s*[0-9]*\.?[0-9]+(e[0-9]+)?\s*[kKmMbBtT]?\s*$"},
                              {"type": "number", "exclusiveMinimum": 0, "maximum": 1e15}],
                    "description": "Parameters: 8B, 70B, 350M, or a number."}),
]


class ModelSpec(BaseModel):
    """The model being trained and how; orch picks (or checks) the GPUs from it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str | None = Field(None, min_length=1, description="A well-known model standing for its shape "
                             "(llama-3-8b, llama-3-70b, mistral-7b, sdxl, ...).")
    params: ParamCount | None = Field(None, description="Parameter count (overrides the named model's).")
    method: Method = Field(Method.FULL, strict=False, description="full, lora or qlora.")
    precision: Precision = Field(Precision.BF16, strict=False, description="fp32, bf16, fp16 or fp8.")
    optimizer: Optimizer = Field(Optimizer.ADAMW, strict=False, description="adamw, adamw-8bit or sgd.")
    sharding: Literal["auto", "ddp", "zero1", "zero2", "zero3", "fsdp"] = Field(
        "auto", description="auto lets orch pick per machine shape.")
    offload: Offload = Field(Offload.NONE, strict=False, description="none, optimizer or params (CPU offload).")
    seq_len: int = Field(2048, ge=1, description="Tokens per sample.")
    micro_batch: int = Field(1, ge=1, description="Samples per GPU per step.")
    layers: int | None = Field(None, ge=1)
    hidden: int | None = Field(None, ge=1)
    heads: int | None = Field(None, ge=1)
    vocab: int | None = Field(None, ge=1)
    lora_rank: int = Field(16, ge=1)
    checkpointing: bool = Field(True, description="Full activation checkpointing.")
    flash_attention: bool = Field(True, description="Attention does not keep the s x s scores.")

    @field_validator("name")
    @classmethod
    def _known(cls, name: str | None) -> str | None:
        from orchestrator.fit.shapes import ShapeError, known_model

        if name is None:
            return None
        try:
            return known_model(name).name
        except ShapeError as exc:
            raise HintedValueError(str(exc).split(" (")[0], str(exc).partition(" (")[2].rstrip(")")) from None

    @model_validator(mode="after")
    def _usable(self) -> ModelSpec:
        from orchestrator.fit.request import FitInputError

        try:
            self.fit_query()
        except FitInputError as exc:
            setup = exc.setup
            if setup is not None and setup.setting:   # the fix as this block's field, not orch fit's flag
                raise HintedValueError(setup.problem, f"{setup.setting}: {setup.values}") from None
            raise HintedValueError(str(exc)) from None
        return self

    def fit_query(self, **search: object) -> FitQuery:
        """The FitQuery for this block; ``search`` passes gpus/markets/hours/max_nodes/headroom through."""
        from orchestrator.fit.request import FitWords, build_query

        words = FitWords(self.params, self.name, self.method.value, self.precision.value, self.optimizer.value,
                         self.sharding, self.offload.value, self.seq_len, self.micro_batch, self.layers,
                         self.hidden, self.heads, self.vocab, self.lora_rank, self.checkpointing,
                         self.flash_attention)
        return build_query(words, **search)  # type: ignore[arg-type]
