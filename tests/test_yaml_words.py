"""Errors about a value's kind speak YAML, the language the user wrote, not Python's type names: ``got dict``,
``not NoneType`` asked the reader to know Python (orchestrator/inputs/yaml_words.py)."""

from __future__ import annotations

import pytest

from orchestrator.config.errors import ConfigLines
from orchestrator.inputs.durations import parse_duration, parse_price
from orchestrator.inputs.yaml_words import yaml_kind

PYTHON_NAMES = ("dict", "list", "str", "NoneType", "bool", "int", "float")


@pytest.mark.parametrize(("value", "words"), [({}, "a mapping"), ([], "a list"), ("x", "text"), (None, "nothing"),
                                              (True, "a boolean"), (3, "an integer"), (2.5, "a number")])
def test_yaml_kind_names_each_value_in_yaml_words(value: object, words: str) -> None:
    assert yaml_kind(value) == words


@pytest.mark.parametrize("value", [[1], {"a": 1}, None, True])
def test_a_duration_or_a_price_of_the_wrong_kind_says_what_it_got_in_yaml_words(value: object) -> None:
    for parse in (parse_duration, parse_price):
        with pytest.raises(ValueError) as err:
            parse(value)
        said = str(err.value)
        assert yaml_kind(value) in said and not any(f"not {name}" in said for name in PYTHON_NAMES), said


def test_the_config_says_a_list_was_a_mapping() -> None:
    from orchestrator.config.budgets import parse_budgets
    from orchestrator.config.errors import ConfigError

    with pytest.raises(ConfigError, match="must be a list, got a mapping"):
        parse_budgets({"a": {"monthly_usd": 1}}, ConfigLines("c.yaml"))
