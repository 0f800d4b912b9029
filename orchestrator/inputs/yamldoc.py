"""One YAML document as Python data with every key's and value's position (``Document``), built from the
parser's events on an explicit stack (no recursion, so no RecursionError): anchors and aliases (an alias counts
the nodes it expands to), merge keys (``<<``), a cap on nesting depth, and plain scalars read by the YAML 1.2
core schema (yaml12.py). yamlread.py's ``parse_yaml`` feeds it events and counts nodes across the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import yaml

from orchestrator.inputs.yaml12 import CORE_TAG, YamlFloat, YamlInputError, YamlInt, scalar

__all__ = ["MAX_DEPTH", "Document", "DocumentBuilder", "NodeCounter", "Path_", "Pos", "mark_loc", "mark_pos"]

MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class Pos:
    line: int
    col: int


Path_ = tuple[str | int, ...]


@dataclass
class Document:
    """One YAML document as Python data, with where each key and value was written."""

    data: Any
    start: Pos
    keys: dict[Path_, Pos] = field(default_factory=dict)     # where each mapping key is written
    values: dict[Path_, Pos] = field(default_factory=dict)   # where each value starts


def mark_pos(mark: Any) -> Pos:
    """Where the parser's ``mark`` points, 1-based (1:1 without one)."""
    return Pos(mark.line + 1, mark.column + 1) if mark is not None else Pos(1, 1)


def mark_loc(mark: Any) -> tuple[int, int]:
    """``mark_pos`` as the (line, col) YamlInputError takes."""
    pos = mark_pos(mark)
    return pos.line, pos.col


def _at(exc: YamlInputError, mark: Any) -> YamlInputError:
    if exc.line is None:
        pos = mark_pos(mark)
        exc.line, exc.col = pos.line, pos.col
    return exc


def _short(key: object) -> str:
    from orchestrator.redaction import shown

    return shown(key, 40)


class NodeCounter(Protocol):
    """Where a builder counts its nodes: the file-wide count and its cap (yamlread.py's composer)."""

    nodes: int

    def count(self, n: int, mark: Any) -> None:
        """Add ``n`` nodes; YamlInputError at ``mark`` past the cap."""


@dataclass
class _Open:
    """A collection being built: a list, or a mapping waiting for a key or for the value of ``key``."""

    value: list[Any] | dict[Any, Any]
    path: Path_
    anchor: str | None
    size_before: int
    key: Any = None
    has_key: bool = False
    key_pos: Pos | None = None
    merges: list[tuple[Any, Pos]] = field(default_factory=list)


class DocumentBuilder:
    """One document's data, built event by event on an explicit stack (no recursion), with positions."""

    def __init__(self, composer: NodeCounter, doc: Document) -> None:
        self.composer = composer
        self.doc = doc
        self.anchors: dict[str, tuple[Any, int]] = {}   # anchor -> (value, nodes it expands to)
        self.building: set[str] = set()                  # anchors whose collection is still open
        self.stack: list[_Open] = []
        self.done = False

    def feed(self, event: Any) -> None:
        if isinstance(event, yaml.ScalarEvent | yaml.AliasEvent):
            if self._wants_key():
                self._key(event)
            else:
                self._value(event)
        elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            self._open(event)
        elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            self._close()
        else:
            raise YamlInputError(f"unexpected YAML event {type(event).__name__}", *mark_loc(event.start_mark))

    def _wants_key(self) -> bool:
        return bool(self.stack) and isinstance(self.stack[-1].value, dict) and not self.stack[-1].has_key

    def _path(self) -> Path_:
        if not self.stack:
            return ()
        top = self.stack[-1]
        return (*top.path, len(top.value) if isinstance(top.value, list) else top.key)

    def _value(self, event: Any) -> None:
        mark = event.start_mark
        self.doc.values.setdefault(self._path(), mark_pos(mark))
        if isinstance(event, yaml.AliasEvent):
            value = self._alias(event)
        else:
            self.composer.count(1, mark)
            try:
                value = scalar(event)
            except YamlInputError as exc:
                raise _at(exc, mark) from None
            if event.anchor:
                self.anchors[event.anchor] = (value, 1)
        self._put(value)

    def _open(self, event: Any) -> None:
        mark = event.start_mark
        if self._wants_key():
            raise YamlInputError("a mapping key must be a plain value", *mark_loc(mark))
        if len(self.stack) >= MAX_DEPTH:
            raise YamlInputError(f"nested more than {MAX_DEPTH} levels deep", *mark_loc(mark),
                                 hint="a manifest needs a few levels; check the brackets and indentation")
        kind = "seq" if isinstance(event, yaml.SequenceStartEvent) else "map"
        if event.tag not in (None, "!", f"{CORE_TAG}{kind}"):
            raise YamlInputError(f"YAML tag {event.tag[:60]} is not allowed in a manifest", *mark_loc(mark),
                                 hint="write plain lists and mappings")
        self.composer.count(1, mark)
        path = self._path()
        self.doc.values.setdefault(path, mark_pos(mark))
        if event.anchor:
            self.building.add(event.anchor)
        self.stack.append(_Open([] if kind == "seq" else {}, path, event.anchor, self.composer.nodes - 1))

    def _close(self) -> None:
        done = self.stack.pop()
        if isinstance(done.value, dict):
            _merge(done)
        if done.anchor:
            self.building.discard(done.anchor)
            self.anchors[done.anchor] = (done.value, self.composer.nodes - done.size_before)
        self._put(done.value)

    def _key(self, event: Any) -> None:
        mark = event.start_mark
        top = self.stack[-1]
        if isinstance(event, yaml.AliasEvent):
            raise YamlInputError("a mapping key must be a plain value, not an alias", *mark_loc(mark))
        self.composer.count(1, mark)
        if event.tag is None and event.implicit[0] and not event.style and event.value == "<<":
            top.key, top.has_key, top.key_pos = _MERGE, True, mark_pos(mark)
            return
        try:
            key = scalar(event)
        except YamlInputError as exc:
            raise _at(exc, mark) from None
        if isinstance(key, YamlInt | YamlFloat):
            key = key.source
        if not isinstance(key, str | bool | int | float) and key is not None:
            raise YamlInputError("a mapping key must be text", *mark_loc(mark))
        if key in top.value:
            raise YamlInputError(f"key {_short(key)} appears twice in one mapping", *mark_loc(mark), hint="remove one")
        top.key, top.has_key, top.key_pos = key, True, mark_pos(mark)

    def _alias(self, event: Any) -> Any:
        mark = event.start_mark
        if event.anchor in self.building:
            raise YamlInputError("a YAML alias refers to itself", *mark_loc(mark))
        if event.anchor not in self.anchors:
            raise YamlInputError(f"unknown YAML alias *{event.anchor[:40]}", *mark_loc(mark),
                                 hint="define the anchor (&name) before using it")
        value, size = self.anchors[event.anchor]
        self.composer.count(size, mark)
        return value

    def _put(self, value: Any) -> None:
        if not self.stack:
            self.doc.data = value
            self.done = True
            return
        top = self.stack[-1]
        if isinstance(top.value, list):
            top.value.append(value)
            return
        if top.key is _MERGE:
            top.merges.append((value, top.key_pos or Pos(1, 1)))
        else:
            top.value[top.key] = value
            assert top.key_pos is not None
            self.doc.keys[(*top.path, top.key)] = top.key_pos
        top.key, top.has_key, top.key_pos = None, False, None


class _MergeKey:
    """The ``<<`` key (YAML merge): its mappings' keys are added where the mapping lacks them."""


_MERGE = _MergeKey()


def _merge(done: _Open) -> None:
    assert isinstance(done.value, dict)
    for value, pos in done.merges:
        sources = value if isinstance(value, list) else [value]
        for source in sources:
            if not isinstance(source, dict):
                raise YamlInputError("a merge key (<<) takes a mapping or a list of mappings", pos.line, pos.col)
            for key, item in source.items():
                done.value.setdefault(key, item)
