"""Replay-cache building blocks: fingerprints, matching tolerance, the cache file."""

from __future__ import annotations

import base64
import io
import json
import os
import stat
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from webagent.actions import (
    Action,
    Answer,
    AskUser,
    ClickElement,
    DoubleClickElement,
    DragElement,
    Goto,
    HoverElement,
    PressKey,
    RightClickElement,
    Scroll,
    SwitchTab,
    UploadFile,
    WriteElement,
)
from webagent.errors import InputError
from webagent.images import Frame, Screenshot
from webagent.records import Acted, Fingerprint, Point, Step, Verdict
from webagent.replay import CachedStep, ReplayCache, StepReplay, image_hash, origin_of, sensitive, text_hash
from webagent.replay.views import IMAGE_TOLERANCE_BITS, relative_url, same_view


def shot(draw: list[tuple[int, int, int, int]], size: tuple[int, int] = (640, 400)) -> Screenshot:
    img = Image.new("RGB", size, "white")
    pen = ImageDraw.Draw(img)
    for box in draw:
        pen.rectangle(box, fill="black")
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=85)
    return Screenshot(
        base64.b64encode(buf.getvalue()).decode(), "image/jpeg", Frame(size[0], size[1], size[0], size[1])
    )


SITE = "http://127.0.0.1:8000/a"


def fp(text: str = "t", image: str = "0" * 64, url: str = "/a", title: str = "T") -> Fingerprint:
    return Fingerprint(url=url, title=title, text=text_hash(text), image=image)


def test_text_hash_ignores_whitespace_only() -> None:
    assert text_hash("Buy  now\n$12") == text_hash(" Buy now $12 ")
    assert text_hash("Buy now $12") != text_hash("Buy now $13")


def test_image_hash_sees_a_moved_button_but_not_jpeg_noise() -> None:
    button = image_hash(shot([(100, 100, 220, 140)]))
    same = image_hash(shot([(100, 100, 220, 140)], size=(640, 400)))
    moved = image_hash(shot([(400, 250, 520, 290)]))
    assert len(button) == 64 and button == same
    assert (int(button, 16) ^ int(moved, 16)).bit_count() > IMAGE_TOLERANCE_BITS


def test_same_view_rules() -> None:
    base = fp(image="f" * 64)
    assert same_view(base, fp(image="f" * 63 + "e"))  # one bit off: a caret
    assert not same_view(base, fp(image="0" * 64))
    assert not same_view(base, fp(image="f" * 64, text="other"))
    assert not same_view(base, fp(image="f" * 64, url="/b"))
    assert not same_view(base, fp(image="zz"))
    assert not same_view(base, base.model_copy(update={"size": (640, 400)}))  # another viewport or profile


def test_relative_url() -> None:
    start = "http://127.0.0.1:8000/catalog/"
    assert relative_url("http://127.0.0.1:8000/catalog/search?q=a", start) == "/catalog/search?q=a"
    assert relative_url("http://127.0.0.1:9000/x", start) == "http://127.0.0.1:9000/x"
    assert relative_url("about:blank", start) == "about:blank"


def step(index: int, action: object, seen: Fingerprint, **kw: object) -> Step:
    return Step.model_validate({"index": index, "url": "u", "action": action, "fingerprint": seen, **kw})


def test_step_replay_matches_in_order_and_stops_at_the_first_mismatch() -> None:
    a, b, c = fp("a"), fp("b"), fp("c")
    click = ClickElement(element="x")
    point = Point(image=(1, 2), viewport=(3, 4))
    recorder = StepReplay()
    recorder.observe(step(1, click, a, point=point))
    recorder.observe(step(2, click, b, error="boom"))  # failed steps are not recorded
    recorder.observe(step(3, Answer(content="no"), b, verdict=Verdict(success=False, feedback="f")))
    recorder.observe(step(4, Answer(content="yes"), c, verdict=Verdict(success=True, feedback="ok")))
    assert [s.fingerprint.text for s in recorder.steps] == [a.text, c.text] and recorder.changed

    replay = StepReplay(recorder.steps)
    first = replay.lookup(a)
    assert first is not None and first.point == point and first.calls == 2
    assert recorder.steps[1].calls == 1  # an answer's replay saves the policy's call: the validator judges it again
    assert replay.lookup(b) is None and not replay.replaying
    assert replay.lookup(c) is None  # no replay after a mismatch, even of a later recorded view


def test_cache_file_is_stable_and_validated(tmp_path: Path) -> None:
    path = tmp_path / "cache.json"
    cache = ReplayCache(path)
    replay = StepReplay()
    replay.observe(step(1, Answer(content="42"), fp("a"), verdict=Verdict(success=True, feedback="ok")))
    assert cache.update("k", replay, url="http://x.test/", goal="g", expect="e")
    text = path.read_text()
    data = json.loads(text)
    assert data["version"] == 1 and list(data["checks"]) == ["k"] and text.endswith("}\n")
    again = ReplayCache(path)
    again.save()
    assert path.read_text() == text  # byte-stable: no diff when nothing changed
    assert again.replay_for("k", goal="g", url="http://x.test/", expect="e").replaying
    assert not again.replay_for("k", goal="g", url="http://x.test/", expect="other").replaying
    assert not again.replay_for("k", goal="other", url="http://x.test/", expect="e").replaying

    path.write_text('{"version": 1, "checks": {"k": {"goal": "g"}}}')
    with pytest.raises(InputError, match=r"replay cache .* is not valid"):
        ReplayCache(path)
    path.write_text("not json")
    with pytest.raises(InputError, match="delete it to record a new one"):
        ReplayCache(path)


def test_answers_are_kept_per_key_and_page_state(tmp_path: Path) -> None:
    path = tmp_path / "cache.json"
    cache = ReplayCache(path)
    a, b = fp("page a"), fp("page b")
    assert cache.answer_for("check: x", a, url=SITE) is None
    assert cache.store_answer("check: x", a, {"holds": True, "feedback": "ok"}, url=SITE)
    assert not cache.store_answer("check: x", a, {"holds": True, "feedback": "ok"}, url=SITE)  # the same: no write
    assert cache.store_answer("check: x", b, {"holds": True, "feedback": "on b"}, url=SITE)
    again = ReplayCache(path)
    hit = again.answer_for("check: x", fp("page a", image="0" * 63 + "1"), url=SITE)  # within the image tolerance
    assert hit is not None and hit.value == {"holds": True, "feedback": "ok"}
    assert again.answer_for("check: x", fp("page c"), url=SITE) is None
    assert again.answer_for("check: y", a, url=SITE) is None
    # the same page state on a look-alike of another origin: no answer, unless the operator opts in
    assert again.answer_for("check: x", a, url="http://127.0.0.1:9999/a") is None
    assert again.answer_for("check: x", a, url="http://127.0.0.1:9999/a", any_origin=True) is not None
    for n in range(20):  # bounded per key, the newest kept
        again.store_answer("extract: y", fp(f"p{n}"), n, url=SITE)
    assert again.answer_for("extract: y", fp("p19"), url=SITE) is not None
    assert again.answer_for("extract: y", fp("p0"), url=SITE) is None


def test_a_cache_without_answers_is_written_as_before(tmp_path: Path) -> None:
    path = tmp_path / "cache.json"
    cache = ReplayCache(path)
    replay = StepReplay()
    replay.observe(step(1, Answer(content="42"), fp("a"), verdict=Verdict(success=True, feedback="ok")))
    cache.update("k", replay, url="http://x.test/", goal="g")
    assert sorted(json.loads(path.read_text())) == ["checks", "version"]


def test_processes_sharing_a_cache_file_keep_each_others_recordings(tmp_path: Path) -> None:
    """A suite on Ray: each actor opened the file before the others wrote; each write keeps theirs."""
    path = tmp_path / "cache.json"
    driver, first, second = ReplayCache(path), ReplayCache(path), ReplayCache(path)
    for cache, key in ((first, "a"), (second, "b"), (first, "c")):
        replay = StepReplay()
        replay.observe(step(1, Answer(content=key), fp(key), verdict=Verdict(success=True, feedback="ok")))
        assert cache.update(key, replay, url="http://x.test/", goal=key)
    assert second.store_answer("check: x", fp("p"), {"holds": True}, url=SITE)
    data = json.loads(path.read_text())
    assert sorted(data["checks"]) == ["a", "b", "c"] and list(data["answers"]) == ["check: x"]
    assert sorted(driver.refresh()) == sorted(driver.updated) == ["a", "b", "c", "check: x"]  # what the others wrote
    assert driver.replay_for("b", goal="b", url="http://x.test/").replaying and driver.refresh() == []


# ---------------------------------------------------------------- what a cache may make a run do

START = "http://127.0.0.1:8000/catalog/"


def recorded(*actions: object, page: str = "/catalog/") -> list[CachedStep]:
    return [CachedStep(fingerprint=fp(f"p{i}", url=page), action=a) for i, a in enumerate(actions)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("action", "page", "why"),
    [
        (Goto(url="http://127.0.0.1:9000/leak?d=x"), "/catalog/", "it leaves the start origin"),
        (Goto(url="https://127.0.0.1:8000/leak"), "/catalog/", "it leaves the start origin"),  # another scheme
        (WriteElement(element="password", content="{{ PASSWORD }}"), "/catalog/", "it types a secret"),
        (UploadFile(element="cv", file="cv.pdf"), "/catalog/", "it uploads a file"),
        (AskUser(question="your password?"), "/catalog/", "it asks a person"),
        (ClickElement(element="x"), "http://evil.test/catalog/", "it was recorded on a page of another origin"),
    ],
)
def test_a_step_that_leaves_the_origin_types_a_secret_or_asks_is_the_policys(
    action: object, page: str, why: str
) -> None:
    steps = recorded(ClickElement(element="first"), action, Answer(content="ok"), page=page)
    steps[0] = steps[0].model_copy(update={"fingerprint": fp("p0")})  # the first on the start page
    assert sensitive(steps[1], origin_of(START)) == why
    replay = StepReplay(steps, origin=origin_of(START))
    assert replay.lookup(steps[0].fingerprint) is steps[0]
    assert replay.lookup(steps[1].fingerprint) is None and not replay.replaying  # the policy is asked
    assert replay.lookup(steps[2].fingerprint) is None  # and decides every step after


@pytest.mark.parametrize(
    ("action", "why"),
    [
        (Goto(url="http://127.0.0.1:9000/leak?d=x"), "it leaves the start origin"),
        (WriteElement(element="password", content="{{PASSWORD}}"), "it types a secret"),
        (UploadFile(element="cv", file="cv.pdf"), "it uploads a file"),
        (AskUser(question="your password?"), "it asks a person"),
    ],
)
def test_a_turn_of_several_actions_is_the_policys_if_any_of_them_is(action: Action, why: str) -> None:
    """A recorded turn replays every action it holds: the rules hold for each one, not only the first."""
    turn = CachedStep(
        fingerprint=fp("p0", url="/catalog/"),
        action=ClickElement(element="first"),
        more=[Acted(action=WriteElement(element="q", content="blue")), Acted(action=action)],
    )
    assert sensitive(turn, origin_of(START), max_actions=3) == why
    replay = StepReplay([turn], origin=origin_of(START))
    assert replay.lookup(turn.fingerprint, max_actions=3) is None and not replay.replaying


def test_a_turn_of_the_new_hands_replays_within_the_runs_limit_of_actions() -> None:
    hands = [
        HoverElement(element="menu"),
        DoubleClickElement(element="cell", modifiers=("Shift",)),
        RightClickElement(element="row"),
        DragElement(element="card", target="done"),
        Scroll(direction="down", element="panel"),
        PressKey(key="Control+A"),
        SwitchTab(index=1),
    ]
    turn = CachedStep(fingerprint=fp("p0", url="/catalog/"), action=hands[0], more=[Acted(action=a) for a in hands[1:]])
    assert sensitive(turn, origin_of(START), max_actions=len(hands)) is None
    assert StepReplay([turn], origin=origin_of(START)).lookup(turn.fingerprint, max_actions=len(hands)) is turn
    # A run that lets one turn take fewer actions than were recorded: its policy decides the turn.
    assert (
        sensitive(turn, origin_of(START), max_actions=2)
        == "it carries 7 actions, more than the 2 a turn this run allows"
    )
    assert StepReplay([turn], origin=origin_of(START)).lookup(turn.fingerprint) is None  # one a turn by default


def test_same_origin_steps_replay() -> None:
    steps = recorded(Goto(url="127.0.0.1:8000/catalog/search?q=a"), WriteElement(element="q", content="blue"))
    assert [sensitive(s, origin_of(START)) for s in steps] == [None, None]
    assert (
        origin_of("http://127.0.0.1:8000/x")
        == origin_of("http://127.0.0.1:8000")
        != origin_of("http://localhost:8000/")
    )
    assert origin_of("https://shop.test/") == "https://shop.test:443" and origin_of("about:blank") == "about:blank"


def test_a_recording_is_bound_to_its_start_origin_unless_the_operator_opts_in(tmp_path: Path) -> None:
    cache = ReplayCache(tmp_path / "cache.json")
    replay = StepReplay(origin=origin_of(START))
    replay.observe(step(1, Answer(content="42"), fp("a"), verdict=Verdict(success=True, feedback="ok")))
    cache.update("k", replay, url=START, goal="g")
    assert cache.replay_for("k", goal="g", url="http://127.0.0.1:8000/other").replaying  # the same origin
    look_alike = "http://127.0.0.1:8001/catalog/"  # the same pages on another port
    assert not cache.replay_for("k", goal="g", url=look_alike).replaying
    assert cache.replay_for("k", goal="g", url=look_alike, any_origin=True).replaying


def test_a_cache_file_others_can_write_or_own_is_refused_and_it_is_written_0600(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path.chmod(0o755)  # (a private folder would make any file in it 0600 anyway)
    path = tmp_path / "cache.json"
    cache = ReplayCache(path)
    replay = StepReplay(origin=origin_of(START))
    replay.observe(step(1, Answer(content="42"), fp("a"), verdict=Verdict(success=True, feedback="ok")))
    cache.update("k", replay, url=START, goal="g")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    ReplayCache(path)  # its owner's, writable by no one else: read
    for mode in (0o666, 0o620, 0o602):
        path.chmod(mode)
        with pytest.raises(InputError, match=rf"is writable by others \(mode 0{mode:o}\).*chmod 600") as info:
            ReplayCache(path)
        assert "\n" not in str(info.value)
    path.chmod(0o600)
    if path.stat().st_uid == 0:  # root's files are trusted by everyone (root can change anything anyway)
        os.chown(path, 1234, -1)
    monkeypatch.setattr(os, "getuid", lambda: 4242)  # another user reads it
    with pytest.raises(InputError, match="belongs to another user"):
        ReplayCache(path)
