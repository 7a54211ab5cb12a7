"""The loop's part of ``ask_user`` and ``upload_file``, on a fake page: the person's time is left out
of ``max_time_s``; an upload gives the page the allowed file's bytes, never a file the policy names
by a path, a link or a dotfile."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from webagent import Agent
from webagent.files.uploads import AllowedFiles, Upload
from webagent.loop import Episode, HumanRequest

from ..conftest import ServerFactory, make_config
from .fakepage import FakePage
from .test_episode import GOAL, script


class UploadingPage(FakePage):
    async def upload_file(self, x: float, y: float, file: Upload) -> str:
        self._record("upload", round(x), round(y), file)
        return f"ok, gave the file {file.name!r} to the page"


async def _episode(server: Any, page: FakePage, **kwargs: Any) -> Episode:
    config = make_config(server, max_time_s=1.0)
    agent = Agent(config)
    uploads = kwargs.get("uploads")
    roles = agent.runtime.new_roles(uploads=uploads.names if uploads is not None else ())
    episode = Episode(roles, page, config.agent, url="http://127.0.0.1:1/start", goal=GOAL, **kwargs)
    episode._agent = agent  # type: ignore[attr-defined]  # closed by the caller
    return episode


async def test_the_persons_time_is_not_the_runs(model_server: ServerFactory) -> None:
    policy = [
        {"when": {"step": 1}, "action": {"action": "ask_user", "question": "Which account?"}},
        {"when": {"step": 2}, "action": {"action": "answer", "content": "42"}},
    ]
    asked: list[str] = []

    async def person(request: HumanRequest) -> str:
        asked.append(request.question)
        await asyncio.sleep(1.5)  # past max_time_s = 1 s
        return "the work one"

    async with model_server(script(policy)) as server:
        episode = await _episode(server, FakePage(), human=person)
        steps = [step async for step in episode.steps()]
        await episode._agent.aclose()  # type: ignore[attr-defined]
    assert episode.result is not None and episode.result.success, episode.result
    assert asked == ["Which account?"] and steps[0].outcome == "the user answered: the work one"
    assert episode.result.duration_s >= 1.5 and episode.clock.elapsed() < 1.0


async def test_an_upload_gives_the_allowed_files_bytes_only(model_server: ServerFactory, tmp_path: Path) -> None:
    (tmp_path / "cv.pdf").write_bytes(b"%PDF-1.4")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.txt").write_text("x")
    (tmp_path / "link.txt").symlink_to("/etc/hostname")
    policy = [
        {"when": {"step": 1}, "action": {"action": "upload_file", "element": "big button", "file": "/etc/passwd"}},
        {"when": {"step": 2}, "action": {"action": "upload_file", "element": "big button", "file": "sub/deep.txt"}},
        {"when": {"step": 3}, "action": {"action": "upload_file", "element": "big button", "file": "link.txt"}},
        {"when": {"step": 4}, "action": {"action": "upload_file", "element": "big button", "file": "cv.pdf"}},
        {"when": {"step": 5}, "action": {"action": "answer", "content": "42"}},
    ]
    page = UploadingPage()
    async with model_server(script(policy)) as server:
        episode = await _episode(server, page, uploads=AllowedFiles(tmp_path))
        episode.settings = episode.settings.model_copy(update={"max_time_s": 60.0})
        episode.clock.max_time_s = 60.0
        steps = [step async for step in episode.steps()]
        await episode._agent.aclose()  # type: ignore[attr-defined]
    assert [c for c in page.calls if c[0] == "upload"] == [
        ("upload", 640, 400, Upload("cv.pdf", "application/pdf", b"%PDF-1.4"))
    ]
    assert "not a path" in (steps[0].error or "") and "not a path" in (steps[1].error or "")
    assert "is a link, not a file" in (steps[2].error or "")
    assert steps[3].outcome == "ok, gave the file 'cv.pdf' to the page"
    assert (
        steps[0].context is not None
        and steps[0].context.policy is not None
        and steps[0].context.policy.uploads == ["cv.pdf"]
    )  # the link out is not offered


def test_no_upload_without_an_allow_list() -> None:
    import pytest

    from webagent.errors import ActionError

    with pytest.raises(ActionError, match="allowed none"):
        AllowedFiles().open("cv.pdf")
