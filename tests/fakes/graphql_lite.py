"""Just enough GraphQL to serve a fake: parse one operation's root fields, their arguments (literals and
``$variables``) and selection sets, and prune an answer to what was selected.

Not a GraphQL implementation: no fragments, directives, type checking or introspection. What it does
parse it parses faithfully, so a fake built on it sees exactly the inputs a client sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)'
                    r"|(?P<var>\$[_A-Za-z][_0-9A-Za-z]*)|(?P<name>[_A-Za-z][_0-9A-Za-z]*)|(?P<punct>[{}()\[\]:!,=]))")


class GraphQLSyntaxError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Var:
    name: str


@dataclass
class Field:
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    selection: list[Field] = field(default_factory=list)


@dataclass
class Operation:
    kind: str                       # "query" | "mutation"
    name: str | None
    variables: dict[str, str]       # declared $name -> type text
    fields: list[Field]


def _tokens(text: str) -> list[tuple[str, str]]:
    text = re.sub(r"#[^\n]*", "", text)
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise GraphQLSyntaxError(f"Syntax Error: unexpected character at {pos}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = [t for t in _tokens(text) if t != ("punct", ",")]
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise GraphQLSyntaxError(f"Syntax Error: expected {value or 'a token'}, found {tok[1] if tok else 'EOF'}")
        self.i += 1
        return tok

    def operation(self) -> Operation:
        kind, name, variables = "query", None, {}
        tok = self.peek()
        if tok and tok[1] in ("query", "mutation"):
            kind = self.take()[1]
            tok = self.peek()
            if tok and tok[0] == "name":
                name = self.take()[1]
            if self.peek() == ("punct", "("):
                self.take("(")
                while self.peek() != ("punct", ")"):
                    var = self.take()[1]
                    self.take(":")
                    typ = ""
                    while self.peek() not in (("punct", ")"), None) and self.peek()[0] != "var":  # type: ignore[index]
                        if self.peek() == ("punct", "="):
                            self.take()
                            self.value()
                            continue
                        typ += self.take()[1]
                    variables[var[1:]] = typ
                self.take(")")
        fields = self.selection()
        if self.peek() is not None:
            raise GraphQLSyntaxError("Syntax Error: only one operation per document is supported")
        return Operation(kind, name, variables, fields)

    def selection(self) -> list[Field]:
        self.take("{")
        fields = []
        while self.peek() != ("punct", "}"):
            name = self.take()[1]
            if self.peek() == ("punct", ":"):  # alias: keep the real field name
                self.take(":")
                name = self.take()[1]
            f = Field(name)
            if self.peek() == ("punct", "("):
                self.take("(")
                while self.peek() != ("punct", ")"):
                    arg = self.take()[1]
                    self.take(":")
                    f.args[arg] = self.value()
                self.take(")")
            if self.peek() == ("punct", "{"):
                f.selection = self.selection()
            fields.append(f)
        self.take("}")
        return fields

    def value(self) -> Any:
        kind, text = self.take()
        if kind == "str":
            return bytes(text[1:-1], "utf-8").decode("unicode_escape")
        if kind == "num":
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "var":
            return Var(text[1:])
        if kind == "name":
            return {"true": True, "false": False, "null": None}.get(text, text)  # enums stay strings
        if text == "[":
            items = []
            while self.peek() != ("punct", "]"):
                items.append(self.value())
            self.take("]")
            return items
        if text == "{":
            obj = {}
            while self.peek() != ("punct", "}"):
                key = self.take()[1]
                self.take(":")
                obj[key] = self.value()
            self.take("}")
            return obj
        raise GraphQLSyntaxError(f"Syntax Error: unexpected {text}")


def parse(text: str) -> Operation:
    return _Parser(text).operation()


def resolve(value: Any, variables: dict[str, Any], declared: dict[str, str]) -> Any:
    """Replace ``$var`` references by the request's variables (undeclared ones are an error, as in GraphQL)."""
    if isinstance(value, Var):
        if value.name not in declared:
            raise GraphQLSyntaxError(f'Variable "${value.name}" is not defined.')
        return variables.get(value.name)
    if isinstance(value, list):
        return [resolve(v, variables, declared) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, variables, declared) for k, v in value.items()}
    return value


class UnknownFieldError(ValueError):
    pass


def prune(value: Any, selection: list[Field], type_name: str) -> Any:
    """Keep only the selected fields of ``value`` (recursively); a field the object lacks is an error."""
    if value is None or not selection:
        return value
    if isinstance(value, list):
        return [prune(v, selection, type_name) for v in value]
    out = {}
    for f in selection:
        if f.name not in value:
            raise UnknownFieldError(f'Cannot query field "{f.name}" on type "{type_name}".')
        out[f.name] = prune(value[f.name], f.selection, f.name)
    return out
