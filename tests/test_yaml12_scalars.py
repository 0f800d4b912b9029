"""orchestrator/inputs/yaml12.py reads a plain scalar that starts with none of its patterns' first characters as
text without trying them: every string any pattern matches starts with one of those characters."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.inputs import yaml12

PATTERNS = [p for p in vars(yaml12).values() if isinstance(p, re.Pattern)] + [a[0] for a in yaml12._AMBIGUOUS]


def test_every_pattern_of_the_module_is_covered() -> None:
    assert len(PATTERNS) == 16   # a new pattern is seen here (and by the test below)


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.pattern[:30])
@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(data=st.data())
def test_whatever_a_pattern_matches_starts_with_a_special_character(pattern: re.Pattern[str],
                                                                    data: st.DataObject) -> None:
    value = data.draw(st.from_regex(pattern, fullmatch=True))
    assert value == "" or value[0] in yaml12._SPECIAL_START


@pytest.mark.parametrize("value", ["gpu", "A100", "L4", "s3://b/k", "Job", "é", "_x", "#", "'q'"])
def test_other_plain_scalars_are_text(value: str) -> None:
    assert yaml12._plain_scalar(value) == value
