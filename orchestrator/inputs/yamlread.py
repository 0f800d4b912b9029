"""Reading manifest files within bounds, and YAML read by the 1.2 core schema with every value's position.

- ``read_regular_file``: regular files only (a FIFO, a device such as /dev/zero, a directory are refused
  before anything is read), and the size cap is counted while reading, never taken from ``st_size``.
- ``parse_yaml``: documents are built straight from the parser's events, iteratively (no recursion, so
  no RecursionError), under caps on documents, nodes (alias expansion included) and nesting depth. This
  module counts the documents and nodes of the file; yamldoc.py builds each ``Document``.
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

from pathlib import Path
from typing import Any

import yaml

from orchestrator.inputs.files import InputFileError, read_text_file
from orchestrator.inputs.yaml12 import YamlInputError
from orchestrator.inputs.yamldoc import Document, DocumentBuilder, mark_loc, mark_pos

MAX_BYTES = 1024 * 1024          # a manifest is a few kB; 1 MiB leaves room and keeps any file quick
MAX_DOCUMENTS = 1000
MAX_NODES = 50_000               # per file, alias expansion included


# -- reading files -------------------------------------------------------------------------------------

def read_regular_file(path: Path, limit: int, what: str = "manifest") -> str:
    """The UTF-8 text of ``path``, a regular file of at most ``limit`` bytes (see orchestrator.inputs.files);
    YamlInputError otherwise."""
    try:
        return read_text_file(path, limit, what)
    except InputFileError as exc:
        raise YamlInputError(exc.message, line=exc.line) from None


# -- building documents from events --------------------------------------------------------------------

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
                                     *mark_loc(start.start_mark), hint="split it into several files")
            builder = DocumentBuilder(self, Document(None, mark_pos(start.start_mark)))
            while not builder.done:
                builder.feed(p.get_event())
            docs.append(builder.doc)
            p.get_event()   # DocumentEnd
        return docs

    def count(self, n: int, mark: Any) -> None:
        self.nodes += n
        if self.nodes > MAX_NODES:
            raise YamlInputError(f"the file is too large: more than {MAX_NODES} values (aliases included)",
                                 *mark_loc(mark), hint="split it into several manifests")


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
        line, col = mark_loc(mark)
        raise YamlInputError(f"YAML syntax error: {message}", line, col,
                             hint="check the indentation and quoting") from None
    except yaml.YAMLError as exc:
        raise YamlInputError(f"YAML error: {' '.join(str(exc).split())[:200]}") from None
