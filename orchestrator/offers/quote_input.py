"""The user's words for a quote, checked: GPU names and ``NAME:COUNT`` specs, region globs.

Apart from ``quote.py`` (which re-exports every name here) so that ``orch quote`` with no ``--gpu`` checks its
flags without defining the quote's rows (tests/bench/bench_quote.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from providers.gpus import resolve_gpu, suggest_gpus

__all__ = ["QuoteInputError", "check_region_glob", "parse_gpu_specs", "resolve_gpu_name", "resolve_gpu_names"]


class QuoteInputError(ValueError):
    """Bad user input; the message names the bad value and the closest valid choices."""


#: What a region glob may hold (compiled by re on first use: most quotes name no region).
_GLOB = r"[A-Za-z0-9*?\[\]!._-]+"


def check_region_glob(pattern: str) -> str:
    from orchestrator.redaction import brief

    # The value is shown briefly only: what is pasted where a region belongs may be a credential.
    if not pattern or not re.fullmatch(_GLOB, pattern) or pattern.count("[") != pattern.count("]"):
        raise QuoteInputError(
            f"malformed region glob {brief(pattern)!r} (use letters, digits, '-', '*', '?', [..]; e.g. 'us-*')"
        )
    if len(pattern) > _MAX_GLOB:
        raise QuoteInputError(
            f"region glob {brief(pattern)!r} is longer than any region ({_MAX_GLOB} characters at most; e.g. 'us-*')"
        )
    depth = 0
    for ch in pattern:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise QuoteInputError(f"malformed region glob {brief(pattern)!r} (unbalanced brackets)")
    return pattern


#: A region glob longer than this is not one (the longest region or zone name is 25 characters).
_MAX_GLOB = 64


def _short_name_matches(name: str) -> list[str]:
    """Canonical GPUs one of whose spellings contains ``name`` (``4090`` -> RTX4090-24G), registry order."""
    from providers.gpus import _index, _norm

    key = _norm(name)
    if not key:
        return []
    return list(dict.fromkeys(m.name for spelling, m in _index().items() if key in spelling))


def resolve_gpu_name(name: str) -> str:
    """The canonical name for a name, alias, or unambiguous short name (``4090``, ``a6000``); an ambiguous
    or unknown one raises QuoteInputError with the candidates ("did you mean ...")."""
    try:
        return resolve_gpu(name).name
    except ValueError:
        pass
    found = _short_name_matches(name)
    if len(found) == 1:
        return found[0]
    choices = found or suggest_gpus(name)
    if not choices:
        raise QuoteInputError(f"unknown GPU {name!r} (`orch quote` with no --gpu lists them)")
    listed = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
    what = "ambiguous" if len(found) > 1 else "unknown"
    raise QuoteInputError(f"{what} GPU {name!r} (did you mean {listed}?)")


def parse_gpu_specs(values: Sequence[str]) -> tuple[tuple[str, ...], int | None]:
    """(canonical GPUs, count or None) from ``--gpu`` values: names, aliases and short names, comma-separated
    alternatives, each optionally ``NAME:COUNT`` (dstack's form, ``H100:8``; a non-numeric tail such as
    ``a100:80gb`` is part of the name). All counts given must agree."""
    out: list[str] = []
    counts: set[int] = set()
    for raw in values:
        for part in raw.split(","):
            part = part.strip()
            if not part:
                continue
            name, sep, count_text = part.rpartition(":")
            count_text = count_text.strip()
            if sep and count_text.isascii() and count_text.isdigit():  # H100:8; "a100:80gb" stays a name
                shown = part if len(part) <= 40 else part[:37] + "..."
                if len(count_text) > 6:  # int() of 4,300+ digits raises; none is a GPU count
                    raise QuoteInputError(f"--gpu {shown!r}: the count after ':' is too large (e.g. H100:8)")
                if int(count_text) < 1:
                    raise QuoteInputError(f"--gpu {shown!r}: the count after ':' must be 1 or more (e.g. H100:8)")
                counts.add(int(count_text))
            else:
                name = part
            canonical = resolve_gpu_name(name.strip())
            if canonical not in out:
                out.append(canonical)
    if values and not out:
        # `--gpu ""` or `--gpu ,` (an unset shell variable, a stray comma): a GPU was asked for and none named;
        # answering with the list of every GPU would hide the mistake.
        raise QuoteInputError("--gpu names no GPU (e.g. --gpu A100-80G, or leave --gpu out to list every GPU)")
    if len(counts) > 1:
        raise QuoteInputError(
            f"--gpu gives different counts ({', '.join(map(str, sorted(counts)))}): one machine shape per quote"
        )
    return tuple(out), (counts.pop() if counts else None)


def resolve_gpu_names(names: Sequence[str]) -> tuple[str, ...]:
    """Canonical names for each name, alias or short name; commas separate alternatives inside one value."""
    return parse_gpu_specs(names)[0]
