"""Reading manifest files within bounds, and YAML read by the 1.2 core schema with every value's position.

- ``read_regular_file``: regular files only (a FIFO, a device such as /dev/zero, a directory are refused
  before anything is read), and the size cap is counted while reading, never taken from ``st_size``.
- ``parse_yaml``: documents are built straight from the parser's events, iteratively (no recursion, so
  no RecursionError), under caps on documents, nodes (alias expansion included) and nesting depth.
- Plain scalars resolve as YAML 1.2's core schema: ``true``/``false``, ``null``/``~``, decimal and
  ``0x`` integers, floats (``.inf``/``.nan`` included; the schema refuses them where a number is
  expected). The YAML 1.1 readings 1.2 does not share are refused with a hint instead of guessed:
  ``yes``/``no``/``on``/``off``, octal ``010``/``0o10``, binary ``0b1``, sexagesimal ``1:30``,
  ``1_000``. Timestamps stay text (the schema parses date-times itself). Tags beyond the core
  schema's (``!!timestamp``, ``!!binary``, ``!!python/...``, custom ones) are refused.
- Numbers keep the text they were written as (``YamlInt.source``), so ``env: {LR: 1e-4}`` passes
  ``1e-4`` to the job, not ``0.0001``.

Uses libyaml's parser when PyYAML has it (as its wheels do), else PyYAML's pure-Python one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.inputs.files import InputFileError, read_text_file
from orchestrator.inputs.yaml12 import CORE_TAG, YamlFloat, YamlInputError, YamlInt, scalar

MAX_BYTES = 1024 * 1024          # a manifest is a few kB; 1 MiB leaves room and keeps any file quick
MAX_DOCUMENTS = 1000
MAX_NODES = 50_000               # per file, alias expansion included
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


# -- reading files -------------------------------------------------------------------------------------

def read_regular_file(path: Path, limit: int, what: str = "manifest") -> str:
    """The UTF-8 text of ``path``, a regular file of at most ``limit`` bytes (see orchestrator.inputs.files);
    YamlInputError otherwise."""
    try:
        return read_text_file(path, limit, what)
    except InputFileError as exc:
        raise YamlInputError(exc.message, line=exc.line) from None


# -- building documents from events --------------------------------------------------------------------

def _pos(mark: Any) -> Pos:
    return Pos(mark.line + 1, mark.column + 1) if mark is not None else Pos(1, 1)


def _at(exc: YamlInputError, mark: Any) -> YamlInputError:
    if exc.line is None:
        pos = _pos(mark)
        exc.line, exc.col = pos.line, pos.col
    return exc


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


class _Composer:
    """Events to documents, iteratively, counting nodes (alias expansions included) across the file."""

    def __init__(self, parser: Any) -> None:
        self.parser = parser
        self.nodes = 0

    def documents(self) -> list[Document]:
        p = self.parser
        p.get_event()   # StreamStart
        docs: list[Document] = []
        while not p.check_event(yaml.StreamEndEvent):
            start = p.get_event()   # DocumentStart
            if len(docs) >= MAX_DOCUMENTS:
                raise YamlInputError(f"more than {MAX_DOCUMENTS} documents in one file",
                                     *_loc(start.start_mark), hint="split it into several files")
            builder = _DocumentBuilder(self, Document(None, _pos(start.start_mark)))
            while not builder.done:
                builder.feed(p.get_event())
            docs.append(builder.doc)
            p.get_event()   # DocumentEnd
        return docs

    def count(self, n: int, mark: Any) -> None:
        self.nodes += n
        if self.nodes > MAX_NODES:
            raise YamlInputError(f"the file is too large: more than {MAX_NODES} values (aliases included)",
                                 *_loc(mark), hint="split it into several manifests")


class _DocumentBuilder:
    """One document's data, built event by event on an explicit stack (no recursion), with positions."""

    def __init__(self, composer: _Composer, doc: Document) -> None:
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
            raise YamlInputError(f"unexpected YAML event {type(event).__name__}", *_loc(event.start_mark))

    def _wants_key(self) -> bool:
        return bool(self.stack) and isinstance(self.stack[-1].value, dict) and not self.stack[-1].has_key

    def _path(self) -> Path_:
        if not self.stack:
            return ()
        top = self.stack[-1]
        return (*top.path, len(top.value) if isinstance(top.value, list) else top.key)

    def _value(self, event: Any) -> None:
        mark = event.start_mark
        self.doc.values.setdefault(self._path(), _pos(mark))
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
            raise YamlInputError("a mapping key must be a plain value", *_loc(mark))
        if len(self.stack) >= MAX_DEPTH:
            raise YamlInputError(f"nested more than {MAX_DEPTH} levels deep", *_loc(mark),
                                 hint="a manifest needs a few levels; check the brackets and indentation")
        kind = "seq" if isinstance(event, yaml.SequenceStartEvent) else "map"
        if event.tag not in (None, "!", f"{CORE_TAG}{kind}"):
            raise YamlInputError(f"YAML tag {event.tag[:60]} is not allowed in a manifest", *_loc(mark),
                                 hint="write plain lists and mappings")
        self.composer.count(1, mark)
        path = self._path()
        self.doc.values.setdefault(path, _pos(mark))
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
            raise YamlInputError("a mapping key must be a plain value, not an alias", *_loc(mark))
        self.composer.count(1, mark)
        if event.tag is None and event.implicit[0] and not event.style and event.value == "<<":
            top.key, top.has_key, top.key_pos = _MERGE, True, _pos(mark)
            return
        try:
            key = scalar(event)
        except YamlInputError as exc:
            raise _at(exc, mark) from None
        if isinstance(key, YamlInt | YamlFloat):
            key = key.source
        if not isinstance(key, str | bool | int | float) and key is not None:
            raise YamlInputError("a mapping key must be text", *_loc(mark))
        if key in top.value:
            raise YamlInputError(f"key {_short(key)} appears twice in one mapping", *_loc(mark), hint="remove one")
        top.key, top.has_key, top.key_pos = key, True, _pos(mark)

    def _alias(self, event: Any) -> Any:
        mark = event.start_mark
        if event.anchor in self.building:
            raise YamlInputError("a YAML alias refers to itself", *_loc(mark))
        if event.anchor not in self.anchors:
            raise YamlInputError(f"unknown YAML alias *{event.anchor[:40]}", *_loc(mark),
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


def _loc(mark: Any) -> tuple[int, int]:
    pos = _pos(mark)
    return pos.line, pos.col


def _short(key: object) -> str:
    from orchestrator.redaction import shown

    return shown(key, 40)


def _line_col(text: str, index: int) -> tuple[int, int]:
    index = max(0, min(index, len(text)))
    before = text[:index]
    return before.count("\n") + 1, index - (before.rfind("\n") + 1) + 1


def _parser(text: str) -> Any:
    if getattr(yaml, "__with_libyaml__", False):
        from yaml.cyaml import CParser

        return CParser(text)

    class _PyParser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)

    return _PyParser(text)


def parse_yaml(text: str) -> list[Document]:
    """Every document of ``text`` (empty ones as data None); YamlInputError at the first problem."""
    try:
        parser = _parser(text)
        return _Composer(parser).documents()
    except yaml.reader.ReaderError as exc:
        line, col = _line_col(text, exc.position)
        raise YamlInputError(f"character #x{exc.character:04x} is not allowed in YAML", line, col,
                             hint="remove control characters") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        line, col = _loc(mark)
        raise YamlInputError(f"YAML syntax error: {message}", line, col,
                             hint="check the indentation and quoting") from None
    except yaml.YAMLError as exc:
        raise YamlInputError(f"YAML error: {' '.join(str(exc).split())[:200]}") from None
