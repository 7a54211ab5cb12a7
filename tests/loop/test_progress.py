"""ProgressTracker on its own: which observations carry a signal, and how repeats are counted."""

from __future__ import annotations

import base64

from webagent.actions import Answer, ClickElement, GoBack, Scroll, Wait
from webagent.images import Frame, Screenshot
from webagent.loop.progress import ProgressTracker

FRAME = Frame(1280, 800, 1280, 800)
CLICK = ClickElement(element="Search button")
A = "http://127.0.0.1:1/a"


def shot(look: str) -> Screenshot:
    return Screenshot(base64.b64encode(look.encode() * 1000).decode(), "image/jpeg", FRAME)


def test_first_observation_has_no_signal() -> None:
    tracker = ProgressTracker(3)
    tracker.acted(CLICK)  # whatever came before the first observation
    progress = tracker.observe(A, shot("x"))
    assert not progress.unchanged and progress.repeated == 0 and progress.line is None


def test_same_url_and_screenshot_after_an_action_is_unchanged() -> None:
    tracker = ProgressTracker(3)
    tracker.observe(A, shot("x"))
    tracker.acted(CLICK)
    progress = tracker.observe(A, shot("x"))  # equal bytes, another object
    assert progress.unchanged and progress.repeated == 1
    assert progress.line == (
        'Your last action (click_element "Search button") changed nothing visible on the page '
        "(same URL, same screenshot)."
    )


def test_a_new_url_or_screenshot_is_a_change() -> None:
    tracker = ProgressTracker(3)
    tracker.observe(A, shot("x"))
    tracker.acted(CLICK)
    assert not tracker.observe(A + "?q=1", shot("x")).unchanged
    tracker.acted(CLICK)
    assert not tracker.observe(A + "?q=1", shot("y")).unchanged
    tracker.acted(CLICK)
    assert tracker.observe(A + "?q=1", shot("y")).unchanged


def test_repeats_are_counted_and_flagged_from_the_setting_on() -> None:
    tracker = ProgressTracker(3)
    tracker.observe(A, shot("x"))
    seen = []
    for _ in range(4):
        tracker.acted(CLICK)
        p = tracker.observe(A, shot("x"))
        seen.append((p.repeated, (p.line or "").startswith("WARNING")))
    assert seen == [(1, False), (2, False), (3, True), (4, True)]


def test_another_action_a_change_or_a_failure_restarts_the_count() -> None:
    tracker = ProgressTracker(2)
    tracker.observe(A, shot("x"))
    for action, look, expected in [
        (CLICK, "x", 1),
        (Scroll(direction="down"), "x", 1),  # another action
        (Scroll(direction="down"), "x", 2),
        (Scroll(direction="down"), "y", 0),  # the page changed
        (Scroll(direction="down"), "y", 1),
        (None, "y", 0),  # a failed action: no signal
        (Scroll(direction="down"), "y", 1),
    ]:
        tracker.acted(action)
        assert tracker.observe(A, shot(look)).repeated == expected, (action, look)


def test_waits_are_told_but_neither_count_nor_break_a_run_of_repeats() -> None:
    tracker = ProgressTracker(2)
    tracker.observe(A, shot("x"))
    tracker.acted(GoBack())
    assert tracker.observe(A, shot("x")).repeated == 1
    tracker.acted(Wait(seconds=2))
    waited = tracker.observe(A, shot("x"))
    assert waited.unchanged and waited.repeated == 0
    assert waited.line == "Nothing visible changed while you waited (wait 2s): same URL, same screenshot."
    tracker.acted(GoBack())
    again = tracker.observe(A, shot("x"))
    assert again.repeated == 2 and again.line is not None and again.line.startswith("WARNING")


def test_answers_give_no_signal_and_zero_never_warns() -> None:
    tracker = ProgressTracker(0)
    tracker.observe(A, shot("x"))
    tracker.acted(Answer(content="42"))
    assert tracker.observe(A, shot("x")).line is None
    for _ in range(5):
        tracker.acted(CLICK)
        p = tracker.observe(A, shot("x"))
    assert p.repeated == 5 and p.line is not None and not p.line.startswith("WARNING")


def test_page_events_count_as_an_effect() -> None:
    tracker = ProgressTracker(2)
    tracker.observe(A, shot("x"))
    tracker.acted(CLICK)
    assert tracker.observe(A, shot("x")).repeated == 1
    tracker.acted(CLICK)  # say it opened a dialog, accepted and reported as an event
    assert tracker.observe(A, shot("x"), events=True) == ProgressTracker(2).observe(A, shot("x"))
    tracker.acted(CLICK)
    assert tracker.observe(A, shot("x")).repeated == 1  # the run of repeats starts again
