"""Limits on what users hand the agent: a goal too long, or one UTF-8 cannot carry, is a one-line error."""

from __future__ import annotations

import pytest

from webagent.errors import InputError
from webagent.inputs import check_text


def test_a_goal_over_the_limit_is_refused_with_its_length() -> None:
    check_text("x" * 10, "--goal", limit=10)
    with pytest.raises(InputError, match="--goal is 11 characters long; the limit is 10"):
        check_text("x" * 11, "--goal", limit=10)


def test_a_goal_utf_8_cannot_carry_is_refused_where_it_breaks() -> None:
    check_text("prix en € \U0001f600", "--goal")
    # b"find \xff price" read as a command line by Python: the byte becomes a lone surrogate
    goal = b"find \xff price".decode("utf-8", "surrogateescape")
    with pytest.raises(InputError) as caught:
        check_text(goal, "--goal")
    assert (
        str(caught.value) == "--goal is not valid text at character 6 (a byte of another encoding?); give it in UTF-8"
    )
