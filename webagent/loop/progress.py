"""Progress signals: whether the last action changed anything visible, and repeats of it.

Each observation is compared with the one before: the same URL and the same screenshot (the
browser's encoded bytes, compared as they are: identical renderings encode identically, and the
comparison is one ``memcmp``, microseconds per step). When they match and the step in between
carried out an action that could change the page, the policy is told so at the next step; when the
same action has changed nothing ``repeat_after`` times without the page changing in between, it is
told more firmly to try something else. A ``wait`` on an unchanged page is told too, but neither
counts as a repeat nor breaks a run of them. Actions that failed (the policy is told why anyway),
actions followed by a page event (a dialog, a download, a blocked navigation: told as events),
answers and unusable replies give no signal and end a run of repeats. The browser session hides
the text caret (``[browser] hide_caret``); a page whose look changes by itself otherwise (an
animation) reads as changed: a signal may be missed, never invented.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..actions import Action, Answer, Wait, describe_action
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


class ProgressTracker:
    """Compares each observation with the previous one; ``acted`` records what happened in between."""

    def __init__(self, repeat_after: int) -> None:
        #: Repeats after which the policy is told to try something else (0: never).
        self.repeat_after = repeat_after
        self._seen: tuple[str, str, str] | None = None
        self._acted: Action | None = None
        self._last: Action | None = None
        self._repeats = 0

    def acted(self, action: Action | None) -> None:
        """The step's action was carried out (None: it was not, or there was none)."""
        self._acted = None if isinstance(action, Answer) else action

    def observe(self, url: str, shot: Screenshot, *, events: bool = False) -> Progress:
        """The signal for this observation (``NO_SIGNAL`` at the first one); ``events``: page events
        were reported since the last one (the action did something, or the policy is told why not)."""
        seen = (url, shot.mime, shot.b64)
        same = self._seen is not None and self._seen == seen
        self._seen = seen
        action, self._acted = self._acted, None
        if action is None or events or not same:
            self._last, self._repeats = None, 0
            return NO_SIGNAL
        what = describe_action(action)
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
