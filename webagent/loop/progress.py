"""Progress signals: whether the last action changed anything visible, and repeats of it.

Each observation is compared with the one before: the same URL and the same screenshot (the
browser's encoded bytes, compared as they are: identical renderings encode identically, and the
comparison is one ``memcmp``, microseconds per step). When they match and the step in between
carried out an action that could change the page, the policy is told so at the next step; when the
same action has changed nothing ``repeat_after`` times without the page changing in between, it is
told more firmly to try something else. A ``wait`` on an unchanged page is told too, but neither
counts as a repeat nor breaks a run of them. Actions that failed (the policy is told why anyway),
actions followed by a page event (a dialog, a download, a blocked navigation: told as events),
answers and unusable replies give no signal and end a run of repeats. A pointer action that opens
nothing by a click (a hover, a double or right click) is told when it did change the page (same
URL, another screenshot): a menu or tooltip may have opened under the pointer. A step that carried
out several actions is one action here (all of them, in order). The browser session hides
the text caret (``[browser] hide_caret``); a page whose look changes by itself otherwise (an
animation) reads as changed: a signal may be missed, never invented.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..actions import Action, Answer, DoubleClickElement, HoverElement, RightClickElement, Wait, describe_action
from ..images import Screenshot

__all__ = ["Progress", "ProgressTracker"]


@dataclass(frozen=True, slots=True)
class Progress:
    """The signal of one observation about the action of the step before it."""

    unchanged: bool = False
    """The previous step's action was carried out and the page looks as before it."""
    repeated: int = 0
    """Times in a row that action (the same one) changed nothing; 0 for a wait or a change."""
    line: str | None = None
    """What the policy is told (None: nothing)."""


NO_SIGNAL = Progress()
#: Actions whose effect is easy to miss on the screenshot: told when they changed the page too.
_POINTER = (HoverElement, DoubleClickElement, RightClickElement)
Acted = Action | tuple[Action, ...]


class ProgressTracker:
    """Compares each observation with the previous one; ``acted`` records what happened in between."""

    def __init__(self, repeat_after: int) -> None:
        #: Repeats after which the policy is told to try something else (0: never).
        self.repeat_after = repeat_after
        self._seen: tuple[str, str, str] | None = None
        self._acted: Acted | None = None
        self._last: Acted | None = None
        self._repeats = 0

    def acted(self, action: Acted | None) -> None:
        """The step's action (or actions, in order) was carried out (None: it was not, or there was none)."""
        if isinstance(action, tuple):
            action = action[0] if len(action) == 1 else action or None
        self._acted = None if isinstance(action, Answer) else action

    def observe(self, url: str, shot: Screenshot, *, events: bool = False) -> Progress:
        """The signal for this observation (``NO_SIGNAL`` at the first one); ``events``: page events
        were reported since the last one (the action did something, or the policy is told why not)."""
        seen = (url, shot.mime, shot.b64)
        before, self._seen = self._seen, seen
        same = before is not None and before == seen
        action, self._acted = self._acted, None
        if action is None or events or not same:
            self._last, self._repeats = None, 0
            if isinstance(action, _POINTER) and not events and before is not None and before[0] == url:
                what = describe_action(action)
                return Progress(line=f"Your last action ({what}) changed the page: see what opened or moved under it.")
            return NO_SIGNAL
        what = _describe(action)
        if isinstance(action, Wait):
            return Progress(True, 0, f"Nothing visible changed while you waited ({what}): same URL, same screenshot.")
        if action == self._last:
            self._repeats += 1
        else:
            self._last, self._repeats = action, 1
        if self.repeat_after and self._repeats >= self.repeat_after:
            line = (
                f"WARNING: you have done the same action ({what}) {self._repeats} times and the page has not "
                "changed (same URL, same screenshot): it does not work. Do not repeat it; try something "
                "different (another element or description, scrolling, the keyboard, going back, another URL)."
            )
        else:
            line = f"Your last action ({what}) changed nothing visible on the page (same URL, same screenshot)."
        return Progress(True, self._repeats, line)


def _describe(acted: Acted) -> str:
    if isinstance(acted, tuple):
        return "; then ".join(describe_action(a) for a in acted)
    return describe_action(acted)
