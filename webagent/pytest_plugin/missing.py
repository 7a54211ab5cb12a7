"""The ``web`` fixture when neither pytest-playwright nor pytest-playwright-asyncio is loaded."""

from __future__ import annotations

import pytest

__all__ = ["web"]

MESSAGE = (
    "webagent: the web fixture needs pytest-playwright: pip install 'webagent[pytest]' "
    "(or 'webagent[pytest-async]' for async tests)"
)


@pytest.fixture
def web() -> None:
    """Fails the test, saying what to install."""
    pytest.fail(MESSAGE, pytrace=False)
