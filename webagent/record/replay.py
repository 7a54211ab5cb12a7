"""``ReplaySink``: a successful run updates the replay cache's recording it was given
(``webagent.replay``): the steps it replayed and those it re-planned, redacted."""

from __future__ import annotations

from ..guard.secrets import Secrets
from ..records import RunResult
from ..replay import ReplayCache, StepReplay
from .sink import RunSink

__all__ = ["ReplaySink"]


class ReplaySink(RunSink):
    """Stores ``replay`` (what the run replayed and recorded) under ``key`` when the run succeeds."""

    def __init__(
        self,
        cache: ReplayCache,
        key: str,
        replay: StepReplay,
        *,
        url: str,
        goal: str,
        expect: str | None,
        secrets: Secrets,
    ) -> None:
        self.cache = cache
        self.key = key
        self.replay = replay
        self.url = url
        self.goal = goal
        self.expect = expect
        self.secrets = secrets

    async def finish(self, result: RunResult | None) -> None:
        if result is None or not result.success:
            return
        self.cache.update(
            self.key, self.replay, url=self.url, goal=self.goal, expect=self.expect, redact=self.secrets.redact_model
        )
