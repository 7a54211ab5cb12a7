"""The append-only policy context: each request extends the one before, epochs restart it compactly.

The policy model is a scripted stand-in for ``ModelClient`` that keeps every request it is sent, so
the tests see the exact message lists (and their objects) the loop built.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from webagent.config import AgentSettings, LocalizerConfig, RoleConfig
from webagent.errors import ModelReplyError
from webagent.images import Screenshot
from webagent.loop import Episode, Roles
from webagent.model.client import ModelClient, Reply
from webagent.model.parsing import ReplyParseError
from webagent.records import ModelCall, PolicyState, RunResult, Step, ToolCall, Verdict
from webagent.roles.localizer import Localizer
from webagent.roles.policy import Policy, PolicyImages
from webagent.roles.prompting import NO_REPLY, AppendPrompt, PromptOptions
from webagent.roles.validator import Validator
from webagent.runs.trajectory import RunFiles
from webagent.training.export import ExportOptions, RunRef, export_sft

from .fakepage import FakePage
from .test_episode import GOAL

SCROLL = json.dumps({"note": "", "thought": "look further", "action": {"action": "scroll", "direction": "down"}})


def _reply(i: int, action: dict[str, Any] | None = None) -> str:
    # Raw texts with odd spacing: the conversation must keep them as returned, not re-serialised.
    action = action or {"action": "scroll", "direction": "down"}
    return f'{{ "note": "fact {i}",  "thought": "step {i}", "action": {json.dumps(action)} }}'


ANSWER = {"action": "answer", "content": "42"}


class ScriptedClient:
    """Answers policy requests from a list of raw reply texts; keeps each request's message list."""

    role = "policy"
    model = "scripted"

    def __init__(self, replies: Sequence[str | tuple[str, ...]]) -> None:
        self.replies = list(replies)
        self.requests: list[list[dict[str, Any]]] = []
        self.bodies: list[dict[str, Any]] = []

    async def call(self, messages: Sequence[Any], parse: Callable[[Any], Any], **options: Any) -> tuple[Any, ModelCall]:
        self.requests.append(list(messages))
        self.bodies.append(options.get("extra_body") or {})
        item = self.replies.pop(0)
        raws = [r if isinstance(r, Reply) else Reply(r) for r in (list(item) if isinstance(item, tuple) else [item])]
        record = ModelCall(
            role="policy", model=self.model, raw=[str(r) for r in raws], tool_calls=list(raws[-1].tool_calls)
        )
        try:
            return parse(raws[-1]), record
        except ReplyParseError as exc:
            error = ModelReplyError(f"the policy model's reply was unusable: {exc}", role="policy", raw=raws[-1])
            record.error = str(exc)
            error.call = record
            raise error from None


async def _judge(answer: str, url: str, images: list[Screenshot]) -> tuple[Verdict, ModelCall | None]:
    return Verdict(success="42" in answer, feedback="Wrong, look again."), None


def _episode(client: ScriptedClient, page: FakePage, policy: Policy | None = None, **settings: Any) -> Episode:
    unused = ModelClient("localizer", RoleConfig(base_url="http://127.0.0.1:9/v1", model="m"))
    roles = Roles(
        policy=policy or Policy(client),  # type: ignore[arg-type]
        localizer=Localizer(unused, LocalizerConfig()),
        validator=Validator(unused),
    )
    options: dict[str, Any] = {"context": "append", "epoch_steps": 3, "max_steps": 20, **settings}
    return Episode(roles, page, AgentSettings(**options), url="http://127.0.0.1:1/start", goal=GOAL, judge=_judge)


async def _run(client: ScriptedClient, page: FakePage | None = None, **settings: Any) -> tuple[Episode, list[Step]]:
    page = page or FakePage()
    page.changing = True  # a new screenshot at every step
    episode = _episode(client, page, **settings)
    steps = [step async for step in episode.steps()]
    return episode, steps


def _texts(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    return [content] if isinstance(content, str) else [p["text"] for p in content if p["type"] == "text"]


def _images(message: dict[str, Any]) -> list[Any]:
    content = message["content"]
    return [] if isinstance(content, str) else [p["image_url"]["url"] for p in content if p["type"] == "image_url"]


# --------------------------------------------------------------------------- the loop


async def test_each_request_extends_the_previous_one_within_an_epoch() -> None:
    replies = [_reply(i) for i in range(1, 6)] + [_reply(6, ANSWER)]
    client = ScriptedClient(replies)
    episode, steps = await _run(client)
    assert episode.result is not None and episode.result.success
    requests = client.requests
    assert len(requests) == 6
    assert [s.context.epoch for s in steps if s.context] == [1, 1, 1, 4, 4, 4]
    for k in (0, 1, 3, 4):
        before, after = requests[k], requests[k + 1]
        # The prefix property: the same messages, the same objects, in the same order.
        assert after[: len(before)] == before
        assert all(a is b for a, b in zip(after, before, strict=False))
        assert len(after) == len(before) + 2
        assistant, user = after[len(before)], after[len(before) + 1]
        assert assistant == {"role": "assistant", "content": replies[k]}  # the raw text, byte for byte
        assert user["role"] == "user" and len(_images(user)) == 1
        assert _images(user)[0] is steps[k + 1].image.data_url  # type: ignore[union-attr]
        text = _texts(user)[0]
        assert f"Step: {k + 2} of 20" in text.split("\n")
        assert f"- step {k + 1}: scroll down -> " in text
        assert "Task:" not in text and "Notes so far" not in text
    # Nothing that changes per step comes before the history.
    assert requests[0][0]["role"] == "system" and requests[5][0] == requests[0][0]
    # Every screenshot is sent once per epoch turn, then re-sent as the same object.
    assert [len(_images(m)) for m in requests[2]] == [0, 1, 0, 1, 0, 1]
    assert [s.context.reply for s in steps if s.context] == replies


async def test_a_new_epoch_starts_from_the_task_notes_recent_actions_and_the_current_screenshot() -> None:
    client = ScriptedClient([_reply(i) for i in range(1, 4)] + [_reply(4, ANSWER)])
    _, steps = await _run(client)
    fourth = client.requests[3]
    assert [m["role"] for m in fourth] == ["system", "user"]
    text = _texts(fourth[1])[0]
    assert text.startswith(f"Task: {GOAL}\n")
    assert "Notes so far:\n- fact 1\n- fact 2\n- fact 3\n" in text
    assert "Recent actions:\n- step 1: scroll down" in text and "- step 3: scroll down" in text
    assert "Step: 4 of 20" in text.split("\n")
    assert "Previous action:" not in text  # the recent actions already say it
    assert _images(fourth[1]) == [steps[3].image.data_url]  # type: ignore[union-attr]
    # The epoch's first turn is far smaller than the conversation it replaces.
    assert sum(len(_images(m)) for m in client.requests[2]) == 3


async def test_an_epoch_also_ends_at_its_text_limit() -> None:
    client = ScriptedClient([_reply(i) for i in range(1, 4)] + [_reply(4, ANSWER)])
    _, steps = await _run(client, epoch_steps=10, epoch_max_chars=1)
    assert [s.context.epoch for s in steps if s.context] == [1, 2, 3, 4]
    assert all(len(r) == 2 for r in client.requests)


async def test_an_unusable_reply_is_kept_and_its_failure_told_in_the_next_turn() -> None:
    client = ScriptedClient([("oops", "still not json"), _reply(2, ANSWER)])
    _, steps = await _run(client)
    second = client.requests[1]
    assert second[2] == {"role": "assistant", "content": "still not json"}
    assert "- step 1: (no valid action) -> failed: the policy's reply was unusable" in _texts(second[3])[0]
    assert steps[0].context is not None and steps[0].context.reply == "still not json"


async def test_rejected_answer_feedback_is_told_once() -> None:
    wrong = {"action": "answer", "content": "41"}
    client = ScriptedClient([_reply(1, wrong), _reply(2), _reply(3, ANSWER)])
    await _run(client, epoch_steps=6)
    second, third = (_texts(r[-1])[0] for r in client.requests[1:3])
    assert "Validator feedback on your last answer:\nWrong, look again." in second
    assert "- step 1: answer" in second and "rejected by the validator" in second
    assert "Validator feedback" not in third


async def test_the_final_step_asks_for_the_answer_in_a_turn() -> None:
    client = ScriptedClient([_reply(1), _reply(2, ANSWER)])
    _, steps = await _run(client, max_steps=2)
    assert [s.kind for s in steps] == ["action", "final"]
    assert "FINAL STEP" in _texts(client.requests[1][-1])[0]
    assert "FINAL STEP" not in _texts(client.requests[1][1])[0]


async def test_window_context_is_the_rebuilt_single_message() -> None:
    client = ScriptedClient([_reply(1), _reply(2), _reply(3, ANSWER)])
    _, steps = await _run(client, context="window", screenshots_in_context=2)
    assert all(s.context and s.context.epoch is None and s.context.reply is None for s in steps)
    third = client.requests[2]
    assert [m["role"] for m in third] == ["system", "user"]
    text = _texts(third[1])[0]
    assert "Current URL: http://127.0.0.1:1/start" in text and "Recent actions:" in text
    assert _images(third[1]) == [s.image.data_url for s in steps[1:3]]  # type: ignore[union-attr]


async def test_env_observation_is_the_request_the_agent_would_send() -> None:
    client = ScriptedClient([_reply(1), _reply(2, ANSWER)])
    page = FakePage()
    episode = _episode(client, page)
    assert await episode.open()
    sent: list[list[Any]] = []
    for _ in range(2):
        step = episode.next_step()
        state = await episode.observe(step)
        sent.append(episode.policy_messages(state))
        await episode.run_step(step, _decide(episode, step, state))
        episode.end_step(step)
    assert sent == client.requests


async def _decide(episode: Episode, step: Step, state: PolicyState) -> None:
    decision, call = await episode.roles.policy.decide(episode.policy_messages(state), episode.screenshots[-1].frame)
    await episode.apply(step, decision.reply, raw=call.raw[-1])


# --------------------------------------------------------------------------- the builder


def test_context_builder_prefix_and_forced_epochs() -> None:
    from webagent.images import frame_for

    frame = frame_for(1280, 800, None)
    shots = [Screenshot(_tiny(look), "image/png", frame) for look in range(3)]
    policy = Policy(ScriptedClient([]), secret_names=["PASSWORD"], restrictions="only example.com")  # type: ignore[arg-type]
    context = AppendPrompt(policy.speaker, PromptOptions(epoch_steps=2))
    state = policy.state(goal=GOAL, url="http://a/", step=1, max_steps=5, notes=["n"], recent=[])
    first = context.observe(state, shots[0])
    assert "Secrets you can type" in _texts(first[1])[0] and "only example.com" in _texts(first[1])[0]
    context.reply("r1")
    second = context.observe(PolicyState(goal=GOAL, url="http://b/", step=2, max_steps=5, outcome="x"), shots[1])
    assert second[:2] == first and second[2]["content"] == "r1"
    third = context.observe(PolicyState(goal=GOAL, url="http://c/", step=3, max_steps=5), shots[2])
    assert len(third) == 2 and context.epoch == 3
    # A missing reply is recorded as such, so turns keep alternating.
    fourth = context.observe(PolicyState(goal=GOAL, url="http://c/", step=4, max_steps=5), shots[2])
    assert [m["role"] for m in fourth] == ["system", "user", "assistant", "user"]
    assert fourth[2]["content"] == NO_REPLY
    # The window builder is untouched by the append one.
    assert policy.messages(state, shots)[0] == first[0]


def _tiny(look: int) -> str:
    from .fakepage import png

    return png(4, 3, look)


# --------------------------------------------------------------------------- export


@pytest.mark.parametrize(
    "settings",
    [
        {"context": "append"},
        {"context": "history", "history_screenshots": 2, "history_pruning": "epoch"},
        {"context": "history", "history_screenshots": 2, "history_pruning": "step"},
        {"context": "window", "screenshots_in_context": 2},
    ],
)
async def test_export_rebuilds_each_context_s_requests_exactly(tmp_path: Path, settings: dict[str, Any]) -> None:
    wrong = {"action": "answer", "content": "41"}
    replies = [_reply(1), ("bad", "worse"), _reply(3, wrong), _reply(4), _reply(5, ANSWER)]
    client = ScriptedClient(replies)
    page = FakePage()
    page.changing = True
    episode = _episode(client, page, **settings)
    run = tmp_path / "run"
    files = RunFiles(run)
    async for step in episode.steps():
        files.step(step)
    files.finish(episode.result)
    assert isinstance(episode.result, RunResult) and episode.result.success
    output = tmp_path / "export"
    export_sft([RunRef(run, "t")], output, ExportOptions(roles=frozenset({"policy"}), include_failed=True))
    records = [json.loads(line) for line in (output / "data.jsonl").read_text().splitlines()]
    assert len(records) == len(client.requests) == 5
    for record, request in zip(records, client.requests, strict=True):
        assert _digested(record["messages"], output) == _digested_request(request)


def _digested(messages: list[dict[str, Any]], output: Path) -> list[Any]:
    out = []
    for m in messages:
        texts = [p["text"] for p in m["content"] if p["type"] == "text"]
        images = [
            hashlib.sha256((output / p["image_url"]["url"]).read_bytes()).hexdigest()
            for p in m["content"]
            if p["type"] == "image_url"
        ]
        out.append((m["role"], texts, images))
    return out


def _digested_request(messages: list[dict[str, Any]]) -> list[Any]:
    import base64

    out = []
    for m in messages:
        images = [hashlib.sha256(base64.b64decode(str(u).partition(",")[2])).hexdigest() for u in _images(m)]
        out.append((m["role"], _texts(m), images))
    return out


def _tool(i: int, name: str, **arguments: Any) -> Reply:
    call = ToolCall(id=f"call_{i}", name=name, arguments=json.dumps({"note": f"fact {i}", **arguments}))
    return Reply(f"thinking {i}", (call,))


async def test_a_grounded_tool_calling_policy_in_the_history_context_is_exported_exactly(tmp_path: Path) -> None:
    """Holo3.1 in native tool calls, grounding its own clicks: one request per step (no localizer),
    each tool call answered by its outcome before the next observation; the SFT records hold the
    exact messages, the tools offered and the calls made."""
    replies: list[Any] = [
        _tool(1, "click", element="the button", x=500, y=500),
        _tool(2, "click", element="off the page", x=1200, y=500),  # outside the screenshot: told, not clicked
        (Reply("no tool"), _tool(3, "scroll", direction="down")),  # repaired
        _tool(4, "answer", content="42"),
    ]
    client = ScriptedClient(replies)
    policy = Policy(client, images=PolicyImages("holo3.1"), output="tools")  # type: ignore[arg-type]
    page = FakePage()
    page.changing = True
    episode = _episode(client, page, policy, context="history", history_screenshots=2, grounding="policy")
    run = tmp_path / "run"
    files = RunFiles(run)
    steps = []
    async for step in episode.steps():
        files.step(step)
        steps.append(step)
    files.finish(episode.result)
    assert episode.result is not None and episode.result.success and episode.result.grounding == "policy"
    assert [c for c in page.calls if c[0] == "click"] == [("click", 640, 400)]  # its 0-1000 point on 1280x800
    assert steps[1].error is not None and "outside the 1280x800 screenshot" in steps[1].error
    assert all(s.grounding == "policy" and all(c.role == "policy" for c in s.calls) for s in steps)
    second = client.requests[1]
    assert second[2]["tool_calls"][0]["id"] == "call_1"
    assert second[3] == {"role": "tool", "tool_call_id": "call_1", "content": steps[1].context.policy.outcome}  # type: ignore[union-attr]
    assert "Previous action" not in _texts(second[4])[0]  # told by the tool result
    assert client.bodies[0]["tool_choice"] == "required" and "reasoning_effort" in client.bodies[0]
    output = tmp_path / "export"
    export_sft([RunRef(run, "t")], output, ExportOptions(roles=frozenset({"policy"}), include_failed=True))
    records = [json.loads(line) for line in (output / "data.jsonl").read_text().splitlines()]
    assert len(records) == len(client.requests) == 4  # one per step (a repair is part of its call)
    assert records[2]["metadata"]["repaired"] is True
    for record, request in zip(records, client.requests, strict=True):
        assert _digested(record["messages"], output) == _digested_request(request)
        assert [m.get("tool_calls") for m in record["messages"]] == [m.get("tool_calls") for m in request]
        assert record["tools"] == client.bodies[0]["tools"]
    assert record["target_tool_calls"][0]["function"]["name"] == "answer"


async def test_parallel_tool_calls_are_answered_each_and_exported_exactly(tmp_path: Path) -> None:
    """Several actions a turn as parallel native tool calls: each call answered with its own action's
    outcome before the next observation (a call past the limit, not carried out), the system prompt
    and the request's tools those of the limit, and the SFT records the exact requests again."""
    calls = [
        ToolCall(
            id="a1",
            name="write",
            arguments=json.dumps({"note": "form", "element": "name", "content": "Ada", "x": 100, "y": 100}),
        ),
        ToolCall(id="a2", name="click", arguments=json.dumps({"note": "", "element": "go", "x": 500, "y": 500})),
        ToolCall(id="a3", name="scroll", arguments=json.dumps({"note": "", "direction": "down"})),
        ToolCall(id="a4", name="wait", arguments=json.dumps({"note": "", "seconds": 0})),
    ]
    replies: list[Any] = [Reply("fill it", tuple(calls)), _tool(5, "answer", content="42")]
    client = ScriptedClient(replies)
    policy = Policy(client, images=PolicyImages("holo3.1"), output="tools")  # type: ignore[arg-type]
    page = FakePage()
    page.restructuring = {"click"}  # the click adds elements: the scroll waits for the next look
    episode = _episode(client, page, policy, context="history", grounding="policy", max_actions_per_turn=3)
    run = tmp_path / "run"
    files = RunFiles(run)
    steps = []
    async for step in episode.steps():
        files.step(step)
        steps.append(step)
    files.finish(episode.result)
    assert episode.result is not None and episode.result.success
    assert [c[0] for c in page.calls[1:]] == ["write", "click"]
    assert "up to 3 actions" in str(client.requests[0][0]["content"]) and client.bodies[0]["parallel_tool_calls"]
    results = [m for m in client.requests[1] if m["role"] == "tool"]
    assert [r["tool_call_id"] for r in results] == ["a1", "a2", "a3", "a4"]
    assert results[0]["content"] == 'write_element "name" content="Ada" -> ok'
    assert results[2]["content"] == "scroll down -> not carried out: the page changed (elements were added or removed)"
    assert results[3]["content"] == "not carried out: at most 3 actions per step"
    output = tmp_path / "export"
    export_sft([RunRef(run, "t")], output, ExportOptions(roles=frozenset({"policy"}), include_failed=True))
    records = [json.loads(line) for line in (output / "data.jsonl").read_text().splitlines()]
    assert len(records) == len(client.requests) == 2
    for record, request in zip(records, client.requests, strict=True):
        assert _digested(record["messages"], output) == _digested_request(request)
    assert len(records[0]["target_tool_calls"]) == 4
