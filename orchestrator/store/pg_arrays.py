"""PostgreSQL array literals built as text the server casts (``CAST(:a AS type[])``): psycopg dumps a list
parameter element by element, a Python call per value, which at 10k rows cost more than the statement. Used by
the bulk instance update (instance_rows.py) and the reads by id (queries.py)."""

from __future__ import annotations

from typing import Any

__all__ = ["pg_array_literal"]

#: Joins a text column whole when no value holds it (checked), so escaping runs once per column.
_SEP = "\x1f"


def pg_array_literal(values: list[Any]) -> str:
    """A PostgreSQL array literal (text the server casts): psycopg's dumping of each element of a list cost
    more than the statement. Text is quoted with its backslashes and quotes escaped; None is NULL. A column
    of text alone, or of floats or ints alone, is joined and escaped whole (a first tick writes 11 columns of
    10k machines: a Python call per value was ~0.1 s)."""
    kinds = set(map(type, values))
    if kinds == {str}:
        joined = _SEP.join(values)
        if joined.count(_SEP) == len(values) - 1:       # no value holds the separator
            escaped = joined.replace("\\", "\\\\").replace('"', '\\"')
            return '{"' + escaped.replace(_SEP, '","') + '"}'
    elif kinds and kinds <= {int, float}:
        return "{" + ",".join(map(repr, values)) + "}"

    def one(v: Any) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return repr(v)
    return "{" + ",".join(map(one, values)) + "}"
