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

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.inputfiles import InputFileError, read_text_file

MAX_BYTES = 1024 * 1024          # a manifest is a few kB; 1 MiB leaves room and keeps any file quick
MAX_DOCUMENTS = 1000
MAX_NODES = 50_000               # per file, alias expansion included
MAX_DEPTH = 64


class YamlInputError(Exception):
    """A problem at a position (1-based line and column; None where the file has no position)."""

    def __init__(self, message: str, line: int | None = None, col: int | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.col = col
        self.hint = hint


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


class YamlInt(int):
    """An integer as written in YAML; ``source`` is its text ("0x1F")."""

    source: str

    def __new__(cls, value: int, source: str) -> YamlInt:
        obj = super().__new__(cls, value)
        obj.source = source
        return obj


class YamlFloat(float):
    """A float as written in YAML; ``source`` is its text ("1e-4", "1.10")."""

    source: str

    def __new__(cls, value: float, source: str) -> YamlFloat:
        obj = super().__new__(cls, value)
        obj.source = source
        return obj


# -- reading files -------------------------------------------------------------------------------------

def read_regular_file(path: Path, limit: int, what: str = "manifest") -> str:
    """The UTF-8 text of ``path``, a regular file of at most ``limit`` bytes (see orchestrator.inputfiles);
    YamlInputError otherwise."""
    try:
        return read_text_file(path, limit, what)
    except InputFileError as exc:
        raise YamlInputError(exc.message, line=exc.line) from None


# -- resolving scalars (YAML 1.2 core schema) ----------------------------------------------------------

_NULL = re.compile(r"~|null|Null|NULL|")
_TRUE = re.compile(r"true|True|TRUE")
_FALSE = re.compile(r"false|False|FALSE")
_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_INF = re.compile(r"[-+]?\.(?:inf|Inf|INF)")
_NAN = re.compile(r"\.(?:nan|NaN|NAN)")
# Plain scalars that YAML 1.1 and 1.2 read differently: (pattern, 1.1's reading, 1.2's reading, the fix).
_AMBIGUOUS: tuple[tuple[re.Pattern[str], str, str, str], ...] = (
    (re.compile(r"yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF"), "a boolean", "text",
     "write true or false, or quote it ('{v}') to mean the text"),
    (re.compile(r"[-+]?0[0-9_]+"), "an octal number", "a decimal number",
     "write the number without leading zeros, or quote it ('{v}') to mean the text"),
    (re.compile(r"[-+]?0o[0-7_]+"), "text", "an octal number", "write it in decimal, or quote it ('{v}')"),
    (re.compile(r"[-+]?0b[01_]+"), "a binary number", "text", "write it in decimal, or quote it ('{v}')"),
    (re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?"), "a base-60 number", "text",
     "quote it ('{v}'); for a duration write e.g. 1m30s"),
    (re.compile(r"[-+]?(?:[0-9][0-9_]*_[0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?"), "a number", "text",
     "write it without '_', or quote it ('{v}')"),
    (re.compile(r"[-+]0x[0-9a-fA-F_]+|0x[0-9a-fA-F]*_[0-9a-fA-F_]*"), "a number", "text",
     "write it in decimal, or quote it ('{v}')"),
)

_CORE = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{_CORE}{t}" for t in ("str", "int", "float", "bool", "null")}


def _plain_scalar(value: str) -> Any:
    """A plain (unquoted, untagged) scalar by YAML 1.2's core schema; YamlInputError if 1.1 reads it otherwise."""
    if _NULL.fullmatch(value):
        return None
    if _TRUE.fullmatch(value):
        return True
    if _FALSE.fullmatch(value):
        return False
    if _INT.fullmatch(value):
        return YamlInt(int(value), value)
    if _HEX.fullmatch(value):
        return YamlInt(int(value, 16), value)
    for pattern, old, new, fix in _AMBIGUOUS:   # before floats: 1.2 reads 010 as 10, 1.1 as 8
        if pattern.fullmatch(value):
            raise YamlInputError(f"{value[:40]} is ambiguous: YAML 1.1 reads it as {old}, YAML 1.2 as {new}",
                                 hint=fix.format(v=value[:40]))
    if _FLOAT.fullmatch(value):
        return YamlFloat(float(value), value)
    if _INF.fullmatch(value):
        return YamlFloat(float("-inf") if value.startswith("-") else float("inf"), value)
    if _NAN.fullmatch(value):
        return YamlFloat(float("nan"), value)
    return value


def _tagged_scalar(tag: str, value: str) -> Any:
    """A scalar with an explicit core tag (``!!int 7``), read by YAML 1.2's rules."""
    kind = tag[len(_CORE):]
    if kind == "str":
        return value
    plain = _plain_scalar(value)
    wanted = {"int": int, "float": float, "bool": bool, "null": type(None)}[kind]
    if kind == "float" and isinstance(plain, int) and not isinstance(plain, bool):
        return YamlFloat(float(plain), value)
    if isinstance(plain, wanted) and not (kind == "int" and isinstance(plain, bool)):
        return plain
    raise YamlInputError(f"{value[:40]!r} is not a YAML 1.2 {kind}")


def _scalar(event: yaml.ScalarEvent) -> Any:
    tag = event.tag
    if tag in (None, "!"):
        plain = event.implicit[0] and not event.style
        return _plain_scalar(event.value) if plain and tag is None else event.value
    if tag in _SCALAR_TAGS:
        return _tagged_scalar(tag, event.value)
    raise YamlInputError(f"YAML tag {tag[:60]} is not allowed in a manifest",
                         hint="write plain values: text, numbers, true/false, lists and mappings")


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
    """Events to documents, iteratively, counting nodes (alias expansions included) and depth."""

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
            docs.append(self._document(_pos(start.start_mark)))
            p.get_event()   # DocumentEnd
        return docs

    def _count(self, n: int, mark: Any) -> None:
        self.nodes += n
        if self.nodes > MAX_NODES:
            raise YamlInputError(f"the file is too large: more than {MAX_NODES} values (aliases included)",
                                 *_loc(mark), hint="split it into several manifests")

    def _document(self, start: Pos) -> Document:
        doc = Document(None, start)
        anchors: dict[str, tuple[Any, int]] = {}   # anchor -> (value, nodes it expands to)
        building: set[str] = set()
        stack: list[_Open] = []
        result: list[Any] = []

        def path_here() -> Path_:
            if not stack:
                return ()
            top = stack[-1]
            if isinstance(top.value, list):
                return (*top.path, len(top.value))
            return (*top.path, top.key)

        while True:
            event = self.parser.get_event()
            mark = event.start_mark
            if isinstance(event, yaml.ScalarEvent | yaml.AliasEvent):
                if stack and isinstance(stack[-1].value, dict) and not stack[-1].has_key:
                    self._key(stack[-1], event, anchors)
                    continue
                path = path_here()
                doc.values.setdefault(path, _pos(mark))
                if isinstance(event, yaml.AliasEvent):
                    value = self._alias(event, anchors, building)
                else:
                    self._count(1, mark)
                    try:
                        value = _scalar(event)
                    except YamlInputError as exc:
                        raise _at(exc, mark) from None
                    if event.anchor:
                        anchors[event.anchor] = (value, 1)
                self._put(stack, result, value, doc)
            elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
                if stack and isinstance(stack[-1].value, dict) and not stack[-1].has_key:
                    raise YamlInputError("a mapping key must be a plain value", *_loc(mark))
                if len(stack) >= MAX_DEPTH:
                    raise YamlInputError(f"nested more than {MAX_DEPTH} levels deep", *_loc(mark),
                                         hint="a manifest needs a few levels; check the brackets and indentation")
                tag = event.tag
                kind = "seq" if isinstance(event, yaml.SequenceStartEvent) else "map"
                if tag not in (None, "!", f"{_CORE}{kind}"):
                    raise YamlInputError(f"YAML tag {tag[:60]} is not allowed in a manifest", *_loc(mark),
                                         hint="write plain lists and mappings")
                self._count(1, mark)
                path = path_here()
                doc.values.setdefault(path, _pos(mark))
                if event.anchor:
                    building.add(event.anchor)
                stack.append(_Open([] if kind == "seq" else {}, path, event.anchor, self.nodes - 1))
            elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
                done = stack.pop()
                if isinstance(done.value, dict):
                    _merge(done)
                if done.anchor:
                    building.discard(done.anchor)
                    anchors[done.anchor] = (done.value, self.nodes - done.size_before)
                self._put(stack, result, done.value, doc)
            else:
                raise YamlInputError(f"unexpected YAML event {type(event).__name__}", *_loc(mark))
            if not stack and result:
                doc.data = result[0]
                return doc

    def _key(self, top: _Open, event: Any, anchors: dict[str, tuple[Any, int]]) -> None:
        mark = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            raise YamlInputError("a mapping key must be a plain value, not an alias", *_loc(mark))
        self._count(1, mark)
        if event.tag is None and event.implicit[0] and not event.style and event.value == "<<":
            top.key, top.has_key, top.key_pos = _MERGE, True, _pos(mark)
            return
        try:
            key = _scalar(event)
        except YamlInputError as exc:
            raise _at(exc, mark) from None
        if isinstance(key, YamlInt | YamlFloat):
            key = key.source
        if isinstance(key, str | bool | int | float) or key is None:
            assert isinstance(top.value, dict)
            if key in top.value:
                raise YamlInputError(f"key {_short(key)} appears twice in one mapping", *_loc(mark), hint="remove one")
            top.key, top.has_key, top.key_pos = key, True, _pos(mark)
            return
        raise YamlInputError("a mapping key must be text", *_loc(mark))

    def _alias(self, event: Any, anchors: dict[str, tuple[Any, int]], building: set[str]) -> Any:
        mark = event.start_mark
        if event.anchor in building:
            raise YamlInputError("a YAML alias refers to itself", *_loc(mark))
        if event.anchor not in anchors:
            raise YamlInputError(f"unknown YAML alias *{event.anchor[:40]}", *_loc(mark),
                                 hint="define the anchor (&name) before using it")
        value, size = anchors[event.anchor]
        self._count(size, mark)
        return value

    @staticmethod
    def _put(stack: list[_Open], result: list[Any], value: Any, doc: Document) -> None:
        if not stack:
            result.append(value)
            return
        top = stack[-1]
        if isinstance(top.value, list):
            top.value.append(value)
            return
        if top.key is _MERGE:
            top.merges.append((value, top.key_pos or Pos(1, 1)))
        else:
            top.value[top.key] = value
            assert top.key_pos is not None
            doc.keys[(*top.path, top.key)] = top.key_pos
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
