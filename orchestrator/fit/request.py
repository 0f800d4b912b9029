"""From the user's words (flags or a manifest's ``model:``) to a FitQuery, with one clear error per mistake."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from orchestrator.fit.memory import (
    DEFAULT_HEADROOM,
    Method,
    Offload,
    Optimizer,
    Precision,
    SetupError,
    Sharding,
    TrainingSetup,
)
from orchestrator.fit.search import FitQuery
from orchestrator.fit.shapes import MAX_NODES, ShapeError, ShapeSource, parse_count, shape_from
from providers.base import Market

AUTO = "auto"
E = TypeVar("E", bound=StrEnum)


class FitInputError(ValueError):
    """Bad input for a fit (exit 2); the message names the value and the valid choices. ``setup``: the
    combination's own error, when that is what it is (its fix as a setting, for a caller with other words)."""

    def __init__(self, message: str, setup: SetupError | None = None) -> None:
        super().__init__(message)
        self.setup = setup


def parse_choice(kind: type[E], value: str, what: str) -> E:
    key = value.strip().lower().replace("_", "-")
    aliases = {"adam": "adamw", "adamw8bit": "adamw-8bit", "8bit-adam": "adamw-8bit", "adam-8bit": "adamw-8bit",
               "zero-1": "zero1", "zero-2": "zero2", "zero-3": "zero3", "none": "ddp" if kind is Sharding else "none",
               "float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "mixed": "bf16"}
    key = aliases.get(key, key)
    try:
        return kind(key)
    except ValueError:
        choices = [m.value for m in kind]
        close = difflib.get_close_matches(key, choices, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise FitInputError(f"unknown {what} {value!r} ({hint}choose {', '.join(choices)})") from None


@dataclass(frozen=True, slots=True)
class FitWords:
    """What a user may say about the training job; None means "orch's default"."""

    params: str | float | None = None
    model: str | None = None
    method: str = "full"
    precision: str | None = None      # None: chosen per GPU (bf16 where supported, else fp16)
    optimizer: str = "adamw"
    sharding: str = AUTO
    offload: str = "none"
    seq_len: int = 2048
    micro_batch: int = 1
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    vocab: int | None = None
    lora_rank: int = 16
    checkpointing: bool = True
    flash_attention: bool = True


def build_query(words: FitWords, *, gpus: tuple[str, ...] = (), markets: frozenset[Market] = frozenset(Market),
                hours: float | None = None, max_nodes: int = 8, headroom: float = DEFAULT_HEADROOM) -> FitQuery:
    """Validate ``words`` and the search bounds; raises FitInputError with one line."""
    if hours is not None and hours <= 0:
        raise FitInputError(f"--hours must be positive, got {hours:g}")
    if not 1 <= max_nodes <= MAX_NODES:
        raise FitInputError(f"--max-nodes must be 1 to {MAX_NODES} (the most machines orch runs a job on), "
                            f"got {max_nodes}")
    if not 0 <= headroom <= 0.9:   # as the message says: 0.999 left a GPU 0.1% of its memory, and "nothing fits"
        raise FitInputError(f"--headroom is a fraction of GPU memory kept free, 0 to 0.9, got {headroom:g}")
    for flag, value in (("--seq-len", words.seq_len), ("--micro-batch", words.micro_batch),
                        ("--lora-rank", words.lora_rank)):
        if value < 1:
            raise FitInputError(f"{flag} must be 1 or more, got {value}")
    try:
        params = parse_count(words.params) if words.params is not None else None
        shape = shape_from(params, words.model, words.layers, words.hidden, words.heads, words.vocab)
    except ShapeError as exc:
        raise FitInputError(str(exc)) from None
    auto = words.sharding.strip().lower() == AUTO
    offload = parse_choice(Offload, words.offload, "offload")
    # With sharding left to orch the setup is checked as ZeRO-3 (offload needs a ZeRO stage); the search
    # then picks the stage per shape.
    placeholder = Sharding.ZERO3 if offload is not Offload.NONE else Sharding.DDP
    try:
        setup = TrainingSetup(
            shape, parse_choice(Method, words.method, "method"),
            parse_choice(Precision, words.precision or "bf16", "precision"),
            parse_choice(Optimizer, words.optimizer, "optimizer"),
            placeholder if auto else parse_choice(Sharding, words.sharding, "sharding"),
            offload, words.seq_len, words.micro_batch, words.checkpointing, words.lora_rank, words.flash_attention)
    except SetupError as exc:
        raise FitInputError(str(exc), exc) from None
    return FitQuery(setup, auto, headroom, max_nodes, gpus, markets, hours, auto_precision=words.precision is None)


def describe(q: FitQuery) -> str:
    """One line saying what was estimated, e.g. for a table header."""
    s = q.setup
    shape = s.shape.describe() + (" [shape guessed from the size]" if s.shape.source is ShapeSource.GUESSED else "")
    sharding = "auto" if q.auto_sharding else s.sharding.value
    extras = [f"offload {s.offload.value}"] if s.offload is not Offload.NONE else []
    if s.method is not Method.FULL:
        extras.append(f"rank {s.lora_rank}")
    precision = f"{s.precision.value} (fp16 where no bf16)" if q.auto_precision else s.precision.value
    return (f"{shape}; {s.method.value} {precision} {s.optimizer.value}, sharding {sharding}"
            f"{', ' + ', '.join(extras) if extras else ''}; seq {s.seq_len} x micro-batch {s.micro_batch}, "
            f"checkpointing {'on' if s.checkpointing else 'off'}")
