"""The chat completions of the offline model server, without the HTTP: what a request says, what
the script answers, which fault it gets and what the reply costs.

:mod:`webagent.testing.server` receives the requests and sends the replies; this module reads the
OpenAI chat messages (text, images), records them (:class:`RecordedRequest`), draws the faults
(:class:`FaultDraw`), answers from the :class:`~webagent.testing.script.Script` and estimates the
usage of a reply.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import time
import uuid
from typing import Any

from pydantic import BaseModel

from webagent.records import Role
from webagent.testing.contracts import ScriptedReply, asked, policy_reply, thinking
from webagent.testing.images import image_size
from webagent.testing.pagechecks import RequestKind, answer_check, answer_extract, request_kind
from webagent.testing.script import (
    FAULT_KINDS,
    REPLY_FAULTS,
    FaultKind,
    Script,
    candidate_answer,
    format_click,
    localizer_profile,
    parse_policy_prompt,
)

NO_ACTION: dict[str, Any] = {"action": "answer", "content": "NO SCRIPTED ACTION"}
MALFORMED = "Sure! I think the answer is {broken"
#: The reasoning a request with thinking on gets beside its content.
REASONING = "Looking at the screenshot to decide the next action."
#: How ``prompts/repair.jinja`` begins: a request asking again after an unusable reply.
REPAIR_PREFIX = "Your previous reply could not be used:"
WRONG_SHAPE: dict[Role, str] = {
    "policy": '{"note": "x"}',
    "validator": '{"ok": 1}',
    "localizer": '{"foo": 1}',
}


class RecordedRequest(BaseModel):
    """One logged chat-completion request (never holds image bytes)."""

    role: Role
    path: str
    model: str
    task: str | None = None
    step: int | None = None
    fault: FaultKind | None = None
    kind: RequestKind = "run"
    """``check`` or ``extract`` for a ``Pilot.check``/``Pilot.extract`` request (a run's otherwise)."""
    text: str = ""
    """The first user message's text (the task; in a window request, the whole observation)."""
    turn: str = ""
    """The text of the last user message that is not a repair request: the current observation
    (the same as ``text`` in a single-turn request; the step's turn in an append-only conversation)."""
    system: str = ""
    n_images: int = 0
    image_sizes: list[list[int]] = []
    messages_count: int = 0
    extra: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    """The messages as received, each image URL replaced by ``sha256:<digest of the image bytes>``."""
    new_text_chars: int = 0
    """Characters of text after the conversation's last reply (the turn this request adds: the
    observation's text, a tool call's result; the whole text of a first request)."""
    prompt_tokens: int = 0
    """Prompt tokens as the simulated prefix cache counted them (0 for a request that got an HTTP fault)."""
    cached_tokens: int = 0
    """Of those, the tokens the simulated prefix cache served."""


# ---------------------------------------------------------------- reading the messages


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [p for p in content if isinstance(p, dict)] if isinstance(content, list) else []


def texts(content: Any) -> list[str]:
    """The text parts of one message's content."""
    return [str(p.get("text", "")) for p in _parts(content) if p.get("type") == "text"]


def image_urls(content: Any) -> list[str]:
    """The image URLs of one message's content."""
    urls: list[str] = []
    for p in _parts(content):
        if p.get("type") == "image_url":
            img = p.get("image_url")
            urls.append(str(img.get("url", "")) if isinstance(img, dict) else str(img or ""))
    return urls


def digest_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with each image URL replaced by ``sha256:<digest of the image bytes>``."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = [_digest_part(p) for p in content]
        out.append({**message, "content": content})
    return out


def _digest_part(part: Any) -> Any:
    if not (isinstance(part, dict) and part.get("type") == "image_url" and isinstance(part.get("image_url"), dict)):
        return part
    url = str(part["image_url"].get("url", ""))
    payload = url.partition(",")[2] if url.startswith("data:") else ""
    try:
        digest = "sha256:" + hashlib.sha256(base64.b64decode(payload, validate=True)).hexdigest()
    except ValueError:
        digest = url
    return {**part, "image_url": {**part["image_url"], "url": digest}}


def first_user(messages: list[dict[str, Any]]) -> Any:
    """The content of the first user message (the goal and page state; a repair request quotes it)."""
    return next((m.get("content") for m in messages if m.get("role") == "user"), "")


def is_repair(messages: list[dict[str, Any]]) -> bool:
    """Whether the request asks again after an unusable reply (its last user message, or the tool
    result of its last tool call, says so)."""
    last = next((m.get("content") for m in reversed(messages) if m.get("role") in ("user", "tool")), "")
    return any(t.startswith(REPAIR_PREFIX) for t in texts(last))


def current_user(messages: list[dict[str, Any]]) -> Any:
    """The content of the last user message that is not a repair request (the current observation)."""
    for message in reversed(messages):
        if message.get("role") == "user" and not any(
            t.startswith(REPAIR_PREFIX) for t in texts(message.get("content"))
        ):
            return message.get("content")
    return ""


def infer_role(body: dict[str, Any]) -> Role:
    """The role of a request to the plain ``/v1`` endpoint, from what it asks for: a verdict (a
    validator continuing the policy's conversation offers the policy's tools too), a policy reply
    (its tools or schema), else its response format's schema name."""
    fmt = body.get("response_format")
    schema = fmt.get("json_schema") if isinstance(fmt, dict) else None
    name = schema.get("name") if isinstance(schema, dict) else None
    if name in ("validator_verdict", "check_verdict"):
        return "validator"
    if asked(body) is not None or name in ("policy_reply", "extraction"):
        return "policy"
    return "localizer"


def recorded(
    body: dict[str, Any], messages: list[dict[str, Any]], *, role: Role, path: str, model: str, fault: FaultKind | None
) -> RecordedRequest:
    """What the log keeps of one request (its messages are added only when the server records)."""
    rec = RecordedRequest(
        role=role,
        path=path,
        model=model,
        fault=fault,
        text="\n".join(texts(first_user(messages))),
        turn="\n".join(texts(current_user(messages))),
        system="\n".join(t for m in messages if m.get("role") == "system" for t in texts(m.get("content"))),
        messages_count=len(messages),
        extra={k: v for k, v in body.items() if k not in ("messages", "model")},
        new_text_chars=sum(len(t) for m in _after_last_reply(messages) for t in texts(m.get("content"))),
    )
    sizes = [image_size(u) for m in messages for u in image_urls(m.get("content"))]
    rec.n_images, rec.image_sizes = len(sizes), [list(s) for s in sizes if s]
    return rec


def _after_last_reply(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    return messages[last + 1 :] if last >= 0 else [m for m in messages if m.get("role") != "system"]


# ---------------------------------------------------------------- faults


class FaultDraw:
    """Which fault, if any, a request gets: scripted ones by role and count, else drawn at the rates."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self._rng = random.Random()
        self._owed: dict[str, float] = {}
        self.reset()

    def reset(self) -> None:
        """Start the draws over from the script's seed."""
        self._rng.seed(self.script.seed)
        even = self.script.fault_schedule == "even"
        self._owed = {k: self._rng.random() for k in self.script.fault_rates} if even else {}

    def pick(self, role: Role, nth: int, *, repair: bool = False) -> FaultKind | None:
        """The fault of the ``nth`` request of ``role`` (``repair``: it quotes a bad reply back)."""
        rates = self.script.fault_rates
        if self.script.fault_schedule == "even":
            for kind in rates:
                self._owed[kind] += rates[kind]
            drawn = sorted((k for k in FAULT_KINDS if self._owed.get(k, 0.0) >= 1.0), key=lambda k: -self._owed[k])
        else:  # always draw every rate so the random stream does not depend on deterministic faults
            drawn = [k for k in FAULT_KINDS if k in rates and self._rng.random() < rates[k]]
        if repair and not self.script.fault_repairs:
            drawn = [k for k in drawn if k not in REPLY_FAULTS]
        scripted = next((f.kind for f in self.script.faults if f.role == role and f.nth == nth), None)
        candidates = [scripted] if scripted else drawn
        fault = next((k for k in candidates if k != "offtarget" or role == "localizer"), None)
        if fault is not None and not scripted and fault in self._owed:
            self._owed[fault] -= 1.0  # an even fault that could not land here stays owed
        return fault


# ---------------------------------------------------------------- answers


def scripted_reply(script: Script, rec: RecordedRequest, body: dict[str, Any]) -> ScriptedReply:
    """The reply the script gives (spoilt by a reply fault); fills ``rec.task``/``rec.step``."""
    reply = _answer(script, rec, body, offtarget=rec.fault == "offtarget")
    if rec.fault == "malformed":
        reply = ScriptedReply(MALFORMED)
    elif rec.fault == "schema":
        reply = ScriptedReply(WRONG_SHAPE[rec.role])
    if thinking(body):
        reply.reasoning = REASONING
    return reply


def _answer(script: Script, rec: RecordedRequest, body: dict[str, Any], *, offtarget: bool) -> ScriptedReply:
    rec.kind = request_kind(rec.text)
    if rec.kind == "check":
        return ScriptedReply(answer_check(script.checks, rec.text))
    if rec.kind == "extract":
        return ScriptedReply(answer_extract(script.extracts, rec.text))
    if rec.role == "localizer":
        return ScriptedReply(_click(script, rec.model, rec.text, rec.image_sizes, offtarget=offtarget))
    task = script.task_for(rec.text)
    rec.task = task.id if task else None
    if rec.role == "validator":
        if task is None:
            return ScriptedReply(json.dumps({"success": False, "feedback": "No scripted task matched this request."}))
        # The last user turn: the validator's own request, or its turn after the policy's conversation.
        ok, feedback = task.judge(candidate_answer([rec.turn]), parse_policy_prompt(rec.turn).url)
        return ScriptedReply(json.dumps({"success": ok, "feedback": feedback}))
    state = parse_policy_prompt(rec.turn)
    rec.step = state.step
    rule = task.policy_rule(state) if task else None
    note, thought, actions = (
        (rule.note or "", rule.thought or "", rule.all_actions)
        if rule
        else ("", "no scripted rule matched", [NO_ACTION])
    )
    how = asked(body)
    if how is None:  # a request that asks for no particular form: webagent's JSON, its first action
        return ScriptedReply(json.dumps({"note": note, "thought": thought, "action": actions[0]}))
    vp = script.viewport
    w, h = rec.image_sizes[-1] if rec.image_sizes else (vp.width, vp.height)
    scale = max(w / vp.width, h / vp.height)

    def at(description: Any) -> tuple[float, float] | None:
        hit = script.find_element(str(description)) if description else None
        return (hit[1][0] * scale, hit[1][1] * scale) if hit else None

    spots = [(at(a.get("element")), at(a.get("target"))) for a in actions]
    return policy_reply(how, note, thought, actions, model=rec.model, spots=spots, image=(w, h))


def _click(script: Script, model: str, text: str, sizes: list[list[int]], *, offtarget: bool) -> str:
    vp = script.viewport
    w, h = sizes[0] if sizes else (vp.width, vp.height)
    profile = localizer_profile(model, script.localizer_profile)
    hit = None if offtarget else script.find_element(text)
    if hit is None:
        x, y = (w + 100, h + 100) if offtarget else (w + 50, h // 2)
    else:
        scale = max(w / vp.width, h / vp.height)
        x, y = round(hit[1][0] * scale), round(hit[1][1] * scale)
    return format_click(profile, x, y, w, h)


def reply_usage(prompt_tokens: int, cached_tokens: int, completion: str) -> dict[str, Any]:
    """OpenAI-style usage of a reply: the prompt as the simulated prefix cache counted it (with vLLM's
    ``prompt_tokens_details.cached_tokens``) and ~4 characters per completion token."""
    done = math.ceil(len(completion) / 4)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": done,
        "total_tokens": prompt_tokens + done,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def completion(model: str, reply: ScriptedReply, usage: dict[str, int]) -> dict[str, Any]:
    """An OpenAI ``chat.completion`` object with one choice."""
    finish = "tool_calls" if reply.tool_calls else "stop"
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": reply.message(), "finish_reason": finish}],
        "usage": usage,
    }
