"""The answers of one episode: each judged (by the validator model or a caller's judge), counted,
and its feedback kept for the policy until an answer is accepted."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from ..actions import Answer
from ..images import Screenshot
from ..records import ModelCall, Step, Verdict
from ..roles.validator import Continuation, Validator
from .meter import Meter

__all__ = ["Judge", "Verdicts"]

#: A judge other than the validator model: (answer, url, screenshots) -> (verdict, model call or None).
Judge = Callable[[str, str, list[Screenshot]], Awaitable[tuple[Verdict, ModelCall | None]]]


class Verdicts:
    """Answers judged so far, the last one given, whether one was accepted, and the feedback."""

    def __init__(
        self, validator: Validator, meter: Meter, *, goal: str, judge: Judge | None = None, expect: str | None = None
    ) -> None:
        self.validator = validator
        self.meter = meter
        self.goal = goal
        self.judge = judge
        self.expect = expect
        #: Answers judged, the last answer given, and whether one was accepted.
        self.attempts = 0
        self.answer: str | None = None
        self.success = False
        #: The rejection's feedback the policy is shown until an answer is accepted (None: none standing).
        self.standing: str | None = None
        #: Every verdict's feedback, in order.
        self.feedbacks: list[str] = []

    async def judge_answer(
        self,
        step: Step,
        answer: Answer,
        url: str,
        images: list[Screenshot],
        conversation: Continuation | None = None,
    ) -> str:
        """Judge ``answer`` (``conversation``: the validator model judges it in the policy's
        conversation), record it in ``step``, and return the step's outcome. Every answer is judged,
        a replayed one too: a cache never stands for the validator. Raises ModelError when the
        validator model fails."""
        if self.judge is None:
            self.meter.reserve()
        self.attempts += 1
        self.answer = answer.content
        t = time.perf_counter()
        try:
            if self.judge is not None:
                verdict, judged = await self.judge(answer.content, url, images)
            else:
                verdict, judged = await self.validator.judge(
                    self.goal, answer.content, url, images, expect=self.expect, conversation=conversation
                )
        finally:
            step.timings.validate_s = time.perf_counter() - t
        if judged is not None:
            self.meter.charge(step, judged)
        step.verdict = verdict
        self.feedbacks.append(verdict.feedback)
        if verdict.success:
            self.success, self.standing = True, None
            return "accepted by the validator"
        self.standing = verdict.feedback
        return "rejected by the validator"

    def ended(self, max_attempts: int) -> bool:
        """An answer was accepted, or the last one allowed was judged."""
        return self.success or self.attempts >= max_attempts

    def summary(self) -> str:
        """What came of the answers, in words (the end of a result's message)."""
        if self.success:
            return "the validator accepted the answer"
        if self.attempts:
            return f"the validator rejected {self.attempts} answer(s)"
        return "no answer was given"
