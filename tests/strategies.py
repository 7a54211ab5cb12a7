"""Hypothesis strategies shared by the property tests of the reply and file parsers."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

__all__ = ["JSON_OBJECTS", "JSON_VALUES", "MESSY_TEXT", "PROPERTIES", "json_objects_with"]

#: Modest and without deadlines: the whole suite stays fast on a loaded 2-core CI machine.
PROPERTIES = settings(max_examples=200, deadline=None)

_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="`"), max_size=30)
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**15), 10**15)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_TEXT, children, max_size=4),
    max_leaves=10,
)
JSON_OBJECTS = st.dictionaries(_TEXT, JSON_VALUES, max_size=5)


def json_objects_with(
    keys: list[str], values: st.SearchStrategy[Any] = JSON_VALUES
) -> st.SearchStrategy[dict[str, Any]]:
    """Objects whose keys are mostly the expected ones (some missing, some extra), any values."""
    known = st.dictionaries(st.sampled_from(keys), values, max_size=len(keys))
    return st.builds(lambda a, b: {**b, **a}, known, st.dictionaries(_TEXT, JSON_VALUES, max_size=2))


_PIECES = st.one_of(
    _TEXT,
    st.sampled_from(["{", "}", "[", "]", '"', "\\", ":", ",", "```", "```json\n", "\n", "Click(", ")", "null"]),
    JSON_VALUES.map(json.dumps),
    JSON_OBJECTS.map(json.dumps),
)
#: Text that looks a bit like a model reply: prose, stray braces and quotes, fences, JSON fragments.
MESSY_TEXT = st.lists(_PIECES, max_size=8).map("".join)
