"""Model shapes: the few numbers the memory model needs, from a well-known name, the user, or a guess.

Published shapes are taken from each model's released ``config.json`` (hidden_size, num_hidden_layers,
num_attention_heads, num_key_value_heads, intermediate_size, vocab_size) and its model card (parameter
count). Standard library only: ``orch fit`` imports this on every call.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, replace
from enum import StrEnum


class ShapeSource(StrEnum):
    KNOWN = "known"        # a well-known model's published shape
    GIVEN = "given"        # every number from the user
    GUESSED = "guessed"    # layers/hidden derived from the parameter count (see guess_shape)


class Architecture(StrEnum):
    TRANSFORMER = "transformer"   # decoder-only LLM: activations from Korthikanti et al. 2022
    DIFFUSION_UNET = "unet"       # image UNet: activations are a flat per-sample allowance (see memory.py)


@dataclass(frozen=True, slots=True)
class ModelShape:
    """A model's size and shape. ``ffn`` is the MLP width (gated MLP: gate/up/down); ``kv_heads`` < ``heads``
    means grouped-query attention. ``embedding_params`` are the input embedding plus an untied output head."""

    params: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    tied_embeddings: bool = False
    name: str | None = None
    source: ShapeSource = ShapeSource.GIVEN
    architecture: Architecture = Architecture.TRANSFORMER

    @property
    def embedding_params(self) -> float:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def largest_layer_params(self) -> float:
        """The biggest single module (DeepSpeed's ``largest_layer_params``): the embedding or an MLP matrix."""
        return max(self.vocab * self.hidden, self.hidden * self.ffn)

    @property
    def kv_dim(self) -> int:
        return self.hidden * self.kv_heads // self.heads

    def describe(self) -> str:
        label = self.name or human_count(self.params)
        return f"{label} ({human_count(self.params)} params, {self.layers} layers, hidden {self.hidden})"


def _llm(name: str, params: float, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int,
         tied: bool = False) -> ModelShape:
    return ModelShape(params, layers, hidden, heads, kv_heads, ffn, vocab, tied, name, ShapeSource.KNOWN)


#: Published shapes (config.json of each release; parameter counts from the model cards).
KNOWN_MODELS: dict[str, ModelShape] = {m.name or "": m for m in (
    _llm("llama-3-8b", 8.03e9, 32, 4096, 32, 8, 14336, 128256),
    _llm("llama-3-70b", 70.6e9, 80, 8192, 64, 8, 28672, 128256),
    _llm("llama-3.1-405b", 405.9e9, 126, 16384, 128, 8, 53248, 128256),
    _llm("llama-2-7b", 6.74e9, 32, 4096, 32, 32, 11008, 32000),
    _llm("llama-2-13b", 13.0e9, 40, 5120, 40, 40, 13824, 32000),
    _llm("llama-2-70b", 69.0e9, 80, 8192, 64, 8, 28672, 32000),
    _llm("mistral-7b", 7.24e9, 32, 4096, 32, 8, 14336, 32000),
    _llm("mixtral-8x7b", 46.7e9, 32, 4096, 32, 8, 14336, 32000),
    _llm("qwen2.5-7b", 7.62e9, 28, 3584, 28, 4, 18944, 152064),
    _llm("qwen2.5-72b", 72.7e9, 80, 8192, 64, 8, 29568, 152064),
    _llm("gemma-7b", 8.54e9, 28, 3072, 16, 16, 24576, 256000, tied=True),
    _llm("phi-3-mini", 3.82e9, 32, 3072, 32, 32, 8192, 32064),
    # SDXL's UNet (2.567B parameters, the part that is trained); layers/hidden are nominal: a UNet's
    # activations are not transformer-shaped, so memory.py gives it a flat per-sample allowance.
    ModelShape(2.567e9, 70, 1280, 20, 20, 5120, 0, False, "sdxl", ShapeSource.KNOWN, Architecture.DIFFUSION_UNET),
)}

_ALIASES = {
    "llama3-8b": "llama-3-8b", "llama-3.1-8b": "llama-3-8b", "meta-llama-3-8b": "llama-3-8b",
    "llama3-70b": "llama-3-70b", "llama-3.1-70b": "llama-3-70b", "meta-llama-3-70b": "llama-3-70b",
    "llama-3-405b": "llama-3.1-405b", "llama2-7b": "llama-2-7b", "llama2-13b": "llama-2-13b",
    "llama2-70b": "llama-2-70b", "mistral-7b-v0.1": "mistral-7b", "mixtral": "mixtral-8x7b",
    "qwen2.5-7b-instruct": "qwen2.5-7b", "qwen2.5-72b-instruct": "qwen2.5-72b", "sdxl-base": "sdxl",
    "stable-diffusion-xl": "sdxl",
}


class ShapeError(ValueError):
    """A size or model name orch cannot use; the message names it and the nearest valid choices."""


def known_model(name: str) -> ModelShape:
    key = re.sub(r"[\s_]+", "-", name.strip().lower()).removeprefix("meta-llama/").removeprefix("mistralai/")
    key = _ALIASES.get(key, key)
    if key in KNOWN_MODELS:
        return KNOWN_MODELS[key]
    close = difflib.get_close_matches(key, list(KNOWN_MODELS) + list(_ALIASES), n=2, cutoff=0.6)
    hint = f"did you mean {' or '.join(_ALIASES.get(c, c) for c in close)}?" if close else \
        f"known: {', '.join(KNOWN_MODELS)}; or give --params"
    raise ShapeError(f"unknown model {name!r} ({hint})")


_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


#: The largest parameter count orch sizes: 1000T. The largest machine of the catalog (8x B200, 1.44 TB of GPU
#: memory) holds under 3T parameters even at 4 bits, so every size up to this gets an answer ("nothing fits"
#: within --max-nodes, and what would); a larger one is a typo, refused like zero or a negative one.
MAX_PARAMS = 1e15

#: The most machines orch sizes or runs one job on: a manifest's ``resources.nodes`` and ``orch fit --max-nodes``
#: stop here (256 machines of 8 GPUs: 2048 GPUs).
MAX_NODES = 256


def parse_count(text: str | float | int) -> float:
    """``70B``, ``7.2b``, ``350M``, ``1.5T`` or a plain number -> parameters. Zero, negative, not finite or
    over MAX_PARAMS is an error."""
    if isinstance(text, bool):
        raise ShapeError(f"{text!r} is not a parameter count (write e.g. 7B, 350M or 70e9)")
    if isinstance(text, int | float):
        value = float(text)
    else:
        if text.strip().startswith("-"):
            raise ShapeError(f"parameter count {text!r} is negative (write e.g. 7B or 70B)")
        m = _SIZE_RE.match(text)
        if not m:
            raise ShapeError(f"{text!r} is not a parameter count (write e.g. 7B, 350M or 70e9)")
        value = float(m.group(1)) * _SCALE[m.group(2).lower()]
    if not math.isfinite(value):
        raise ShapeError(f"parameter count {text!r} is not a finite number (write e.g. 7B, 350M or 70e9)")
    if value <= 0:
        raise ShapeError(f"parameter count must be positive, got {text!r}")
    if value > MAX_PARAMS:
        raise ShapeError(f"parameter count {text!r} is over orch's limit, 1000T (write e.g. 7B or 70B)")
    if value < 1e6:
        raise ShapeError(f"{text!r} parameters is below a million: did you mean {text}B?")
    return value


def human_count(params: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if params >= scale:
            return f"{params / scale:.3g}{unit}"
    return f"{params:.0f}"


def _round_to(value: float, multiple: int) -> int:
    return max(multiple, round(value / multiple) * multiple)


def guess_shape(params: float, vocab: int = 32000) -> ModelShape:
    """A llama-like shape for a bare parameter count.

    A transformer block holds ~12·h² parameters (Kaplan et al. 2020, "Scaling Laws for Neural Language
    Models", Table 1: N ≈ 12·n_layer·d_model²), and released models keep d_model/n_layer near 128 (Llama 2 7B:
    4096/32; 70B: 8192/80). So P ≈ 12·L·(128·L)² gives L, then h = sqrt(P / 12L), rounded to 128.
    """
    layers = max(1, round((params / (12 * 128 ** 2)) ** (1 / 3)))
    hidden = _round_to(math.sqrt(params / (12 * layers)), 128)
    heads = max(1, hidden // 128)
    return ModelShape(params, layers, hidden, heads, heads, _round_to(hidden * 8 / 3, 256), vocab,
                      source=ShapeSource.GUESSED)


def shape_from(params: float | None = None, model: str | None = None, layers: int | None = None,
               hidden: int | None = None, heads: int | None = None, vocab: int | None = None) -> ModelShape:
    """Combine what the user said: a known name, a parameter count, explicit dimensions (which win)."""
    for label, v in (("--layers", layers), ("--hidden", hidden), ("--heads", heads), ("--vocab", vocab)):
        if v is not None and v < (0 if label == "--vocab" else 1):
            raise ShapeError(f"{label} must be positive, got {v}")
    if model:
        base = known_model(model)
        if params is not None:
            base = replace(base, params=params)
    elif params is not None:
        base = guess_shape(params, vocab or 32000)
    elif layers and hidden:
        v = vocab if vocab is not None else 32000
        base = ModelShape(12.0 * layers * hidden ** 2 + 2.0 * v * hidden, layers, hidden, max(1, hidden // 128),
                          max(1, hidden // 128), _round_to(hidden * 8 / 3, 256), v)
    else:
        raise ShapeError("say how big the model is: --params 7B, --model llama-3-8b, or --layers and --hidden")
    changes: dict[str, object] = {}
    if layers is not None:
        changes["layers"] = layers
    if hidden is not None:
        changes["hidden"] = hidden
        changes["ffn"] = _round_to(hidden * 8 / 3, 256) if base.hidden != hidden else base.ffn
        if heads is None and base.hidden != hidden:
            changes["heads"] = changes["kv_heads"] = max(1, hidden // 128)
    if heads is not None:
        changes["heads"] = heads
        changes["kv_heads"] = min(base.kv_heads, heads) if base.source is ShapeSource.KNOWN else heads
    if vocab is not None:
        changes["vocab"] = vocab
    if changes:
        source = base.source if base.source is ShapeSource.KNOWN and not {"layers", "hidden"} & set(changes) \
            else ShapeSource.GIVEN
        base = replace(base, **changes, source=source)  # type: ignore[arg-type]
    if base.hidden % base.heads:
        raise ShapeError(f"hidden size {base.hidden} is not a multiple of {base.heads} heads")
    return base
