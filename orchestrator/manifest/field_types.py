"""The manifest's field types: names, durations, prices, deadlines, environment keys, GPU and provider
names, each an ``Annotated`` type whose validator normalises the value or raises ``HintedValueError`` with a
hint (the loader turns it into file, line, field and hint). schema.py and storage_spec.py build the manifest's
models from them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import (
    AfterValidator,
    BeforeValidator,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
)

from orchestrator.inputs.durations import (
    DURATION_HINT,
    DURATION_PATTERN,
    PRICE_PATTERN,
    HintedValueError,
    format_duration,
    parse_duration,
    parse_price,
)
from orchestrator.redaction import shown

NAME_PATTERN = r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"
ENV_NAME_PATTERN = r"^[A-Z_][A-Z0-9_]*$"
_ENV_NAME_RE = re.compile(ENV_NAME_PATTERN)
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Environment names that, in ``env:``, almost surely carry a credential: those belong in ``secrets:``.
_SECRETISH_ENV_RE = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY)$", re.I)
DATA_SCHEMES = ("s3", "gs", "az", "https", "http")
STORE_SCHEMES = ("s3", "gs", "az")


def _duration_json(description: str) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [{"type": "string", "pattern": DURATION_PATTERN},
                                     {"type": "number", "minimum": 0}], "description": description})


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    _duration_json("A duration: 30s, 15m, 2h, 1d, 1h30m, or a number of seconds."),
]

Price = Annotated[
    float,
    BeforeValidator(parse_price),
    WithJsonSchema({"anyOf": [{"type": "string", "pattern": PRICE_PATTERN}, {"type": "number", "minimum": 0}],
                    "description": "US dollars: 2.5, \"$2.50\" or 2.5/h."}),
]


def _scalar_text(value: object) -> object:
    """Plain config values may be written as YAML numbers/booleans; the process sees text: a number as
    it was written (``1e-4`` stays ``1e-4``, ``1.10`` stays ``1.10``) where the loader kept it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        source = getattr(value, "source", None)
        return source if isinstance(source, str) else str(value)
    return value


_SCALAR_JSON = {"type": ["string", "number", "boolean"]}
EnvValue = Annotated[str, BeforeValidator(_scalar_text), WithJsonSchema(_SCALAR_JSON)]
Arg = Annotated[str, BeforeValidator(_scalar_text), WithJsonSchema(_SCALAR_JSON)]


# A deadline is a moment within orch's reach: instants outside this range are typos (and near year 1 or
# 9999 an offset would carry them out of what a datetime can hold).
_DEADLINE_MIN = datetime(2000, 1, 1, tzinfo=UTC)
_DEADLINE_MAX = datetime(2200, 1, 1, tzinfo=UTC)
_DEADLINE_HINT = "write an ISO date-time like 2025-07-01T18:00:00Z, or a duration from apply like 36h"


def _deadline_instant(value: datetime) -> datetime:
    try:
        instant = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except (OverflowError, ValueError):   # year 1 east of UTC, year 9999 west of it
        instant = None
    if instant is None or not _DEADLINE_MIN <= instant < _DEADLINE_MAX:
        raise HintedValueError(f"the deadline {value.isoformat()} is out of range (2000 to 2199, UTC)",
                               _DEADLINE_HINT)
    return instant


def _parse_deadline(value: object) -> datetime | timedelta:
    if isinstance(value, datetime):
        return _deadline_instant(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None:
            return _deadline_instant(parsed)
        try:
            return parse_duration(text)
        except HintedValueError:
            raise HintedValueError(f"{shown(value)} is neither a date-time nor a duration", _DEADLINE_HINT) from None
    if isinstance(value, timedelta | int | float) and not isinstance(value, bool):
        return parse_duration(value)
    raise HintedValueError("a deadline must be a date-time or a duration", DURATION_HINT)


def _dump_deadline(value: datetime | timedelta) -> str:
    return format_duration(value) if isinstance(value, timedelta) else value.isoformat()


Deadline = Annotated[
    datetime | timedelta,
    PlainValidator(_parse_deadline),
    PlainSerializer(_dump_deadline, return_type=str),
    WithJsonSchema({"anyOf": [{"type": "string", "format": "date-time"},
                              {"type": "string", "pattern": DURATION_PATTERN}],
                    "description": "An ISO date-time (UTC if no offset), or a duration counted from apply."}),
]


def _canonical_gpu(name: str) -> str:
    from providers.gpus import UnknownGpuError, canonical_names, resolve_gpu

    try:
        return resolve_gpu(name).name
    except UnknownGpuError as exc:
        hint = (f"did you mean {' or '.join(exc.suggestions)}?" if exc.suggestions
                else f"known: {', '.join(canonical_names())}")
        raise HintedValueError(f"unknown GPU {shown(name)}", hint) from None


def _canonical_provider(name: str) -> str:
    from providers.registry import PROVIDER_NAMES, UnknownProviderError, canonical_provider

    try:
        return canonical_provider(name)
    except UnknownProviderError as exc:
        hint = (f"did you mean {' or '.join(exc.suggestions)}?" if exc.suggestions
                else f"known: {', '.join(PROVIDER_NAMES)}")
        raise HintedValueError(f"unknown provider {shown(name)}", hint) from None


def _region_glob(pattern: str) -> str:
    from orchestrator.offers.quote import QuoteInputError, check_region_glob

    try:
        return check_region_glob(pattern)
    except QuoteInputError as exc:
        raise HintedValueError(str(exc)) from None


def _secret_name(name: str) -> str:
    if not _ENV_NAME_RE.fullmatch(name):
        # Never repeat the text back: it may be the credential itself.
        raise HintedValueError("give the NAME of an environment variable, not its value",
                               "e.g. secrets: [HF_TOKEN, WANDB_API_KEY]; names are A-Z, 0-9 and _")
    return name


def _env_key(key: str) -> str:
    if not _ENV_KEY_RE.fullmatch(key):
        raise HintedValueError(f"{shown(key)} is not an environment variable name", "use letters, digits and _")
    if _SECRETISH_ENV_RE.search(key):
        raise HintedValueError(f"{key} looks like a credential",
                               f"list its name under secrets: and export {key} where orch runs")
    return key


EnvKey = Annotated[str, AfterValidator(_env_key)]
GpuName = Annotated[str, AfterValidator(_canonical_gpu)]
ProviderName = Annotated[str, AfterValidator(_canonical_provider)]
RegionGlob = Annotated[str, AfterValidator(_region_glob)]
SecretName = Annotated[str, AfterValidator(_secret_name)]


def gpu_list(value: object) -> object:
    """One GPU name, or a list of them. ``gpu: 4090`` is a YAML number: it was "Input should be a valid list",
    which told the user to write a list; what it lacks is the name."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise HintedValueError(f"a GPU is given by its name, not a number ({shown(value)})",
                               "e.g. gpu: RTX4090-24G, or a list: gpu: [A100-80G, H100-80G]")
    return [value] if isinstance(value, str) else value
