"""The agent loop: observe → policy → localize → act → (answer → validate), one Step per turn.

The policy's context is bounded: an append-only conversation restarted every ``epoch_steps``
steps (or the last ``screenshots_in_context`` screenshots in the window context), the last
``recent_actions`` actions and notes within ``notes_max_chars``, so prompts do not grow with
the step count. Failures inside a step (an unusable reply, a point off the image, an action the
page refused) are recorded and told to the policy; only an unreachable model or a dead browser
end the run early, with stop reason ``error``; a spent budget ends it with ``budget``.

With a ``StepReplay`` each observation is fingerprinted; while it matches the recording the step is
replayed (recorded action, point and verdict; no model call), and from the first mismatch on the
models plan as usual.

``episode.py`` drives a run (``Episode``), ``page.py`` says what it needs from a page
(``PageDriver``) and carries actions out on it, ``meter.py`` keeps its usage and budgets,
``progress.py`` tells the policy when its last action changed nothing visible, ``verdicts.py``
judges the answers and keeps their feedback for the policy, ``task.py`` says what a task that
rewards itself (a benchmark page) gives the loop, ``human.py`` who answers the policy's ``ask_user``. The loop
never imports the browser: ``Agent`` hands it a ``BrowserSession`` as a ``PageDriver``.
"""

from __future__ import annotations

from .episode import Episode
from .human import HumanHandler, HumanRequest
from .meter import Meter
from .page import PageDriver, Placed, Roles, perform
from .task import TaskCheck, TaskHook
from .verdicts import Judge, Verdicts

__all__ = [
    "Episode",
    "HumanHandler",
    "HumanRequest",
    "Judge",
    "Meter",
    "PageDriver",
    "Placed",
    "Roles",
    "TaskCheck",
    "TaskHook",
    "Verdicts",
    "perform",
]
