"""The browser actions of a step: their points placed, carried out, and a list of them stopped early.

A reply may carry several actions (``max_actions_per_turn``). They are carried out in order, one
observation after them all, and the list stops after the first action that changes the page under
the policy's feet: a new URL, a page event (a new tab, a dialog, a download, a blocked navigation),
or elements added to or removed from the page (the session counts them with a mutation observer
read in the wait after each action, so the check costs no page read of its own). An answer or a
question to the user ends the list too, and so does an action that failed. The actions the list
stopped before are recorded as not carried out, and the policy is told why.

Points: a grounded reply brings each action's point (and a drag's release point); a point off the
screenshot is a ``LocalizationError``, a failed step the policy is told of. Without one the
localizer is asked, once per point: for a drag both the element and its target, at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from ..actions import Action, Answer, AskUser, DragElement, ElementAction, Scroll, describe_action
from ..errors import LocalizationError
from ..files.uploads import AllowedFiles
from ..images import Screenshot
from ..records import Acted, Point, Step
from ..roles.localizer import Localizer
from .meter import Meter
from .page import PageDriver, Placed, perform

__all__ = ["Hands", "Perform", "batch_line", "batch_outcome"]

#: How the episode carries out one action of a list: (the action's record, the action, where it is
#: placed, the actions before it in the list) -> its outcome.
Perform = Callable[[Acted, Action, Placed, Sequence[Acted]], Awaitable[str]]


class Hands:
    """Carries out an episode's browser actions on its page."""

    def __init__(
        self, page: PageDriver, localizer: Localizer, meter: Meter, uploads: AllowedFiles | None, *, grounded: bool
    ) -> None:
        self.page = page
        self.localizer = localizer
        #: The policy places its own points: a scroll it gave none turns the wheel at the page's centre.
        self.grounded = grounded
        self.meter = meter
        self.uploads = uploads
        #: Page events read between the actions of a list: the next observation reports them.
        self.held: list[str] = []

    async def act(self, step: Step, record: Step | Acted, action: Action, placed: Placed, shot: Screenshot) -> str:
        """Carry out ``action`` (placed by the reply, or located now on ``shot``); its outcome. The
        points go into ``record`` (the step, or one action of its list), the calls and times into ``step``."""
        placed = await self._place(step, record, action, placed, shot)
        record.point, record.target_point = placed.point, placed.target
        before = self.page.url
        t = time.perf_counter()
        try:
            outcome = await perform(self.page, action, placed.point, self.uploads, placed.target)
        finally:
            step.timings.act_s += time.perf_counter() - t
        after = self.page.url
        if after != before:
            outcome += f", now at {after}"
        return outcome

    async def _place(
        self, step: Step, record: Step | Acted, action: Action, placed: Placed, shot: Screenshot
    ) -> Placed:
        """The action's points: the reply's, checked against the screenshot, or the localizer's."""
        if isinstance(action, ElementAction) or (
            isinstance(action, Scroll) and (placed.point is not None or (action.element and not self.grounded))
        ):
            record.element = action.element
        else:
            return placed  # nothing to place: a scroll of the page
        frame = shot.frame
        for point, what in ((placed.point, action_element(action)), (placed.target, _target(action))):
            if point is not None and not frame.contains(*point.image):
                x, y = point.image
                raise LocalizationError(
                    f"the policy placed {what or action.action!r} at ({x:g}, {y:g}), outside the "
                    f"{frame.image_width}x{frame.image_height} screenshot"
                )
        wanted = [placed.point is None, isinstance(action, DragElement) and placed.target is None]
        if not any(wanted):
            return placed
        # The points the reply did not give, asked of the localizer at once (a drag's two together).
        descriptions = [action_element(action), _target(action)]
        asks = [self._locate(step, d, shot) for d, want in zip(descriptions, wanted, strict=True) if want]
        t = time.perf_counter()
        try:
            found = await asyncio.gather(*asks, return_exceptions=True)
        finally:
            step.timings.localize_s += time.perf_counter() - t
        failed = next((r for r in found if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed
        points = iter(p for p in found if isinstance(p, Point))
        return Placed(next(points) if wanted[0] else placed.point, next(points) if wanted[1] else placed.target)

    async def _locate(self, step: Step, description: str, shot: Screenshot) -> Point:
        self.meter.reserve()
        point, call = await self.localizer.locate(description, shot)
        self.meter.charge(step, call)
        return point

    async def several(
        self,
        actions: Sequence[Action],
        places: Sequence[Placed],
        perform: Perform,
        stopped: Callable[[], bool],
    ) -> list[Acted]:
        """Carry out a reply's list of actions in order, up to the first that changes the page (or
        fails, or ends the run: ``stopped``); one record each, the rest not carried out."""
        acted: list[Acted] = []
        stop: str | None = None
        await self.page.watch_structure()
        try:
            for i, (action, placed) in enumerate(zip(actions, places, strict=True)):
                record = Acted(action=action)
                acted.append(record)
                if stop is not None:
                    record.outcome = f"not carried out: {stop}"
                    continue
                before = self.page.url
                record.outcome = await perform(record, action, placed, acted[:-1])
                if stopped():
                    stop = "the run stopped"
                elif i < len(actions) - 1:
                    stop = await self._stop_after(action, record, before)
        finally:
            await self.page.unwatch_structure()
        return acted

    async def _stop_after(self, action: Action, record: Acted, before: str) -> str | None:
        """After one action of a list (not the last): why the list stops here (None: it goes on)."""
        if record.error is not None:
            return "the action before it failed"
        if isinstance(action, Answer | AskUser):
            return f"the list ended with {action.action}"
        if self.page.url != before:
            return f"the page changed (now at {self.page.url})"
        events = self.page.drain_events()
        if events:
            self.held += events
            return "the page reported an event (see the page events)"
        if await self.page.structure_changed():
            return "the page changed (elements were added or removed)"
        return None


def action_element(action: Action) -> str:
    """What an action acts on, in the policy's words ("" when nothing)."""
    return getattr(action, "element", None) or ""


def _target(action: Action) -> str:
    return action.target if isinstance(action, DragElement) else ""


def batch_line(acted: Sequence[Acted]) -> str:
    """A step's list of actions as one line: each action and its outcome, in order."""
    return "; then ".join(f"{describe_action(a.action)} -> {a.outcome}" for a in acted)


def batch_outcome(acted: Sequence[Acted]) -> str:
    """A step's outcome when it carried out several actions: each one's, numbered."""
    return "; ".join(f"[{i}] {a.outcome}" for i, a in enumerate(acted, start=1))
