"""Fixtures shared by the batch tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from webagent.testing.server import FakeModelServer

from ..conftest import load_task_script

#: Seconds each policy reply of ``slow_model`` waits, unless its module sets ``MODEL_LATENCY_S``.
MODEL_LATENCY_S = 0.2


@pytest.fixture(scope="module")
def slow_model(request: pytest.FixtureRequest) -> Iterator[FakeModelServer]:
    """The offline model server on the local tasks' script, in a thread, its policy replies a little
    slow (``MODEL_LATENCY_S``, or the module's own): a batch is still running when it is looked at,
    killed or stopped."""
    latency_s = getattr(request.module, "MODEL_LATENCY_S", MODEL_LATENCY_S)
    fake = FakeModelServer({**load_task_script("local"), "latency_s": {"policy": latency_s}})
    fake.start_in_thread()
    try:
        yield fake
    finally:
        fake.stop_thread()
