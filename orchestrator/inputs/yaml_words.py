"""What a YAML value is, in the words of the file the user wrote (``a mapping``, ``text``, ``nothing``), never
Python's type names (``dict``, ``str``, ``NoneType``): manifests, the config and the value parsers say it alike."""

from __future__ import annotations

_WORDS = {"dict": "a mapping", "list": "a list", "str": "text", "int": "an integer", "float": "a number",
          "YamlInt": "an integer", "YamlFloat": "a number", "bool": "a boolean", "NoneType": "nothing",
          "datetime": "a date-time", "date": "a date"}


def yaml_type(python_type: str) -> str:
    """``python_type`` (a type's ``__name__``) as YAML words; an unknown name as it is."""
    return _WORDS.get(python_type, python_type)


def yaml_kind(value: object) -> str:
    """What ``value`` (as a YAML loader gave it) is, in YAML words."""
    return yaml_type(type(value).__name__)
