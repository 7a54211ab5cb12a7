"""The actions the policy can choose: a union tagged by ``"action"``.

Every action is a frozen Pydantic model; ``PolicyReply`` is the policy's whole structured reply.
Dispatch on actions with ``match`` and ``assert_never`` (see ``webagent.loop``).
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from .secrets import shorten

__all__ = [
    "ACTION_TYPES",
    "ELEMENT_ACTIONS",
    "Action",
    "Answer",
    "AskUser",
    "ClickElement",
    "ElementAction",
    "GoBack",
    "Goto",
    "PolicyReply",
    "PressKey",
    "Refresh",
    "Scroll",
    "SelectOption",
    "UploadFile",
    "Wait",
    "WriteElement",
    "describe_action",
    "normalize_key",
]

MAX_WAIT_S = 10.0


class _Action(BaseModel):
    # Lenient on input (a model may add keys); the schema sent to the server is strict.
    model_config = ConfigDict(frozen=True, extra="ignore")


class ClickElement(_Action):
    """Click the element the description names."""

    action: Literal["click_element"] = "click_element"
    element: str = Field(min_length=1, description="Natural-language description of the element")


class WriteElement(_Action):
    """Click a text field, replace its text with ``content``, optionally press Enter."""

    action: Literal["write_element"] = "write_element"
    element: str = Field(min_length=1, description="Natural-language description of the field")
    content: str = Field(description="Text to type")
    press_enter: bool = Field(default=False, description="Press Enter after typing")


class Scroll(_Action):
    """Scroll the page (or the scrollable area under the centre of the viewport)."""

    action: Literal["scroll"] = "scroll"
    direction: Literal["up", "down", "left", "right"]


class PressKey(_Action):
    """Press a key or a combination such as ``Enter``, ``Escape``, ``Control+A``."""

    action: Literal["press_key"] = "press_key"
    key: str = Field(min_length=1)


class SelectOption(_Action):
    """Choose ``option`` (its visible label or value) in the native select the description names."""

    action: Literal["select_option"] = "select_option"
    element: str = Field(min_length=1, description="Natural-language description of the select")
    option: str = Field(min_length=1, description="Visible label of the option to choose")


class Goto(_Action):
    """Open a URL in the current tab."""

    action: Literal["goto"] = "goto"
    url: str = Field(min_length=1)


class GoBack(_Action):
    """Go back in history."""

    action: Literal["go_back"] = "go_back"


class Refresh(_Action):
    """Reload the page."""

    action: Literal["refresh"] = "refresh"


class Wait(_Action):
    """Wait for the page to change (capped at 10 seconds)."""

    action: Literal["wait"] = "wait"
    seconds: float = Field(ge=0, description="Seconds to wait, at most 10")

    @field_validator("seconds")
    @classmethod
    def _cap(cls, v: float) -> float:
        return min(v, MAX_WAIT_S)


class UploadFile(_Action):
    """Upload an allowed file (by name) through the file input or upload button the description names."""

    action: Literal["upload_file"] = "upload_file"
    element: str = Field(min_length=1, description="Natural-language description of the file input or upload button")
    file: str = Field(min_length=1, description="The name of a file you may upload")


class AskUser(_Action):
    """Ask the user for what only a person can give (a 2FA code, a CAPTCHA, a choice); the run waits."""

    action: Literal["ask_user"] = "ask_user"
    question: str = Field(min_length=1, description="The question, self-contained")


class Answer(_Action):
    """Finish with an answer to the task; a validator then checks it."""

    action: Literal["answer"] = "answer"
    content: str = Field(description="The answer to the task")


Action: TypeAlias = Annotated[
    ClickElement
    | WriteElement
    | Scroll
    | PressKey
    | SelectOption
    | Goto
    | GoBack
    | Refresh
    | Wait
    | UploadFile
    | AskUser
    | Answer,
    Field(discriminator="action"),
]
ElementAction: TypeAlias = ClickElement | WriteElement | SelectOption | UploadFile
ACTION_ADAPTER: TypeAdapter[Action] = TypeAdapter(Action)
#: Every action class, in the union's order.
ACTION_TYPES: tuple[type[BaseModel], ...] = (
    ClickElement,
    WriteElement,
    Scroll,
    PressKey,
    SelectOption,
    Goto,
    GoBack,
    Refresh,
    Wait,
    UploadFile,
    AskUser,
    Answer,
)
#: The actions that act on an element at a point.
ELEMENT_ACTIONS: frozenset[str] = frozenset({"click_element", "write_element", "select_option", "upload_file"})


class PolicyReply(BaseModel):
    """The policy's structured reply."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    note: str = Field(default="", description="Facts worth remembering for later steps (may be empty)")
    thought: str = Field(default="", description="Short reasoning about what to do next")
    action: Action


_KEY_ALIASES = {
    "enter": "Enter",
    "return": "Enter",
    "tab": "Tab",
    "esc": "Escape",
    "escape": "Escape",
    "space": "Space",
    "backspace": "Backspace",
    "delete": "Delete",
    "del": "Delete",
    "up": "ArrowUp",
    "down": "ArrowDown",
    "left": "ArrowLeft",
    "right": "ArrowRight",
    "arrowup": "ArrowUp",
    "arrowdown": "ArrowDown",
    "arrowleft": "ArrowLeft",
    "arrowright": "ArrowRight",
    "pageup": "PageUp",
    "pagedown": "PageDown",
    "home": "Home",
    "end": "End",
    "ctrl": "Control",
    "control": "Control",
    "cmd": "Meta",
    "command": "Meta",
    "meta": "Meta",
    "win": "Meta",
    "alt": "Alt",
    "option": "Alt",
    "shift": "Shift",
}


def normalize_key(key: str) -> str:
    """Turn a model's key name (``ctrl+a``, ``ENTER``, ``page down``, ``ctrl++``) into Playwright's syntax."""
    text = key.strip()
    if not text:
        return key
    plus_key = text.endswith("+") and (text == "+" or text[:-1].rstrip().endswith("+"))
    if plus_key:
        text = text[:-1].rstrip()[:-1] if text != "+" else ""
    parts = [p.strip() for p in text.split("+") if p.strip()]
    out = [_normalize_part(p) for p in parts]
    if plus_key:
        out.append("+")
    return "+".join(out) or key


def _normalize_part(part: str) -> str:
    alias = _KEY_ALIASES.get(part.lower().replace(" ", "").replace("_", ""))
    if alias:
        return alias
    if len(part) == 1:
        return part
    if part[0] in "fF" and part[1:].isdigit():
        return part.upper()
    return part[0].upper() + part[1:]


def describe_action(action: Action) -> str:
    """A one-line, human-readable form of an action, as shown to the policy and in logs."""
    match action:
        case ClickElement(element=e):
            return f"click_element {_q(e)}"
        case WriteElement(element=e, content=c, press_enter=enter):
            return f"write_element {_q(e)} content={_q(c)}" + (" +Enter" if enter else "")
        case Scroll(direction=d):
            return f"scroll {d}"
        case PressKey(key=k):
            return f"press_key {_q(k)}"
        case SelectOption(element=e, option=o):
            return f"select_option {_q(e)} option={_q(o)}"
        case Goto(url=u):
            return "goto " + " ".join(u.split())  # one line, whatever the model put in the URL
        case GoBack():
            return "go_back"
        case Refresh():
            return "refresh"
        case Wait(seconds=s):
            return f"wait {s:g}s"
        case UploadFile(element=e, file=f):
            return f"upload_file {_q(e)} file={_q(f)}"
        case AskUser(question=q):
            return f"ask_user {_q(q)}"
        case Answer(content=c):
            return f"answer {_q(c)}"
    raise AssertionError(f"unknown action {action!r}")  # pragma: no cover


def _q(text: str, limit: int = 120) -> str:
    text = shorten(" ".join(text.split()), limit)
    return '"' + text.replace('"', "'") + '"'
