"""The actions the policy can choose: a union tagged by ``"action"``.

Every action is a frozen Pydantic model; ``PolicyReply`` is the policy's whole structured reply.
Dispatch on actions with ``match`` and ``assert_never`` (see ``webagent.loop``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from .guard.secrets import shorten
from .keys import normalize_key

__all__ = [
    "ACTION_TYPES",
    "ELEMENT_ACTIONS",
    "MODIFIERS",
    "Action",
    "Answer",
    "AskUser",
    "ClickElement",
    "CloseTab",
    "DoubleClickElement",
    "DragElement",
    "ElementAction",
    "GoBack",
    "Goto",
    "HoverElement",
    "Modifier",
    "PolicyReply",
    "PressKey",
    "Refresh",
    "RightClickElement",
    "Scroll",
    "SelectOption",
    "SwitchTab",
    "UploadFile",
    "Wait",
    "WriteElement",
    "describe_action",
    "normalize_key",
    "points_of",
]

MAX_WAIT_S = 10.0


class _Action(BaseModel):
    # Lenient on input (a model may add keys); the schema sent to the server is strict.
    model_config = ConfigDict(frozen=True, extra="ignore")


Modifier = Literal["shift", "ctrl", "alt", "meta"]
#: The keys a click may hold, as Playwright names them.
MODIFIERS: Mapping[str, str] = {"shift": "Shift", "ctrl": "Control", "alt": "Alt", "meta": "Meta"}
_MODIFIER_ALIASES = {
    "control": "ctrl",
    "cmd": "meta",
    "command": "meta",
    "win": "meta",
    "super": "meta",
    "option": "alt",
}
_HELD = "Keys held during the click (shift, ctrl, alt, meta), or null"


def _modifiers(value: Any) -> Any:
    """A model's held keys as webagent names them: ``"Shift+Ctrl"``, ``["Control"]``, ``[]`` (none)."""
    if value is None:
        return None
    items = value.replace(",", "+").split("+") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        return value  # refused by the type
    names: list[Any] = []
    for item in items:
        name = item.strip().lower() if isinstance(item, str) else item
        name = _MODIFIER_ALIASES.get(name, name) if isinstance(name, str) else name
        if name != "" and name not in names:
            names.append(name)
    return tuple(names) or None


class ClickElement(_Action):
    """Click the element the description names."""

    action: Literal["click_element"] = "click_element"
    element: str = Field(min_length=1, description="Natural-language description of the element")
    modifiers: tuple[Modifier, ...] | None = Field(default=None, description=_HELD)

    _held = field_validator("modifiers", mode="before")(_modifiers)


class WriteElement(_Action):
    """Click a text field, replace its text with ``content``, optionally press Enter."""

    action: Literal["write_element"] = "write_element"
    element: str = Field(min_length=1, description="Natural-language description of the field")
    content: str = Field(description="Text to type")
    press_enter: bool = Field(default=False, description="Press Enter after typing")


class HoverElement(_Action):
    """Move the pointer over the element and leave it there (menus that open on hover)."""

    action: Literal["hover_element"] = "hover_element"
    element: str = Field(min_length=1, description="Natural-language description of the element")


class DoubleClickElement(_Action):
    """Double-click the element (to edit a cell, open an item)."""

    action: Literal["double_click_element"] = "double_click_element"
    element: str = Field(min_length=1, description="Natural-language description of the element")
    modifiers: tuple[Modifier, ...] | None = Field(default=None, description=_HELD)

    _held = field_validator("modifiers", mode="before")(_modifiers)


class RightClickElement(_Action):
    """Right-click the element (the page's context menu)."""

    action: Literal["right_click_element"] = "right_click_element"
    element: str = Field(min_length=1, description="Natural-language description of the element")


class DragElement(_Action):
    """Press on the element, move to the target, release there (drag and drop, sliders)."""

    action: Literal["drag_element"] = "drag_element"
    element: str = Field(min_length=1, description="Natural-language description of the element")
    target: str = Field(min_length=1, description="Natural-language description of where to release it")


class Scroll(_Action):
    """Scroll the page, or the scrollable panel the element names (the wheel turns over it)."""

    action: Literal["scroll"] = "scroll"
    direction: Literal["up", "down", "left", "right"]
    element: str | None = Field(
        default=None,
        description="The scrollable panel to scroll, or null for the page",
    )

    @field_validator("element", mode="before")
    @classmethod
    def _blank(cls, v: Any) -> Any:
        return None if isinstance(v, str) and not v.strip() else v


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


class SwitchTab(_Action):
    """Drive the open tab at this index."""

    action: Literal["switch_tab"] = "switch_tab"
    index: int = Field(ge=0, description="The tab's index among the open tabs")


class CloseTab(_Action):
    """Close the open tab at this index."""

    action: Literal["close_tab"] = "close_tab"
    index: int = Field(ge=0, description="The tab's index among the open tabs")


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
    | HoverElement
    | DoubleClickElement
    | RightClickElement
    | DragElement
    | SwitchTab
    | CloseTab
    | AskUser
    | Answer,
    Field(discriminator="action"),
]
ElementAction: TypeAlias = (
    ClickElement
    | WriteElement
    | SelectOption
    | UploadFile
    | HoverElement
    | DoubleClickElement
    | RightClickElement
    | DragElement
)
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
    HoverElement,
    DoubleClickElement,
    RightClickElement,
    DragElement,
    SwitchTab,
    CloseTab,
    AskUser,
    Answer,
)
#: The actions that act on an element at a point (a drag at two: the element's and its target's).
ELEMENT_ACTIONS: frozenset[str] = frozenset(
    {
        "click_element",
        "write_element",
        "select_option",
        "upload_file",
        "hover_element",
        "double_click_element",
        "right_click_element",
        "drag_element",
    }
)


def points_of(action: Action) -> int:
    """How many points an action is placed at: 2 for a drag (the element, then its target), 1 for
    another element action or a scroll over a named panel, else 0."""
    if isinstance(action, DragElement):
        return 2
    if isinstance(action, ElementAction) or (isinstance(action, Scroll) and action.element is not None):
        return 1
    return 0


class PolicyReply(BaseModel):
    """The policy's structured reply."""

    # One action, or (max_actions_per_turn above 1) several carried out in order: given as
    # {"actions": [...]}, kept as ``action`` and ``more`` (the docstring above is the schema's text).

    model_config = ConfigDict(frozen=True, extra="ignore")

    note: str = Field(default="", description="Facts worth remembering for later steps (may be empty)")
    thought: str = Field(default="", description="Short reasoning about what to do next")
    action: Action
    more: SkipJsonSchema[tuple[Action, ...]] = Field(
        default=(), description="The turn's further actions, in order (several actions a turn)"
    )

    @model_validator(mode="before")
    @classmethod
    def _several(cls, data: Any) -> Any:
        # {"actions": [a, b, c]} (webagent's shape with several actions a turn) is action a, more (b, c).
        if isinstance(data, Mapping) and "action" not in data and isinstance(data.get("actions"), list | tuple):
            first, *rest = data["actions"] or [None]
            data = {**data, "action": first, "more": rest}
        return data

    @model_serializer(mode="wrap")
    def _shape(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Written back in webagent's shape: "action" alone, or "actions" when there are several.
        data = handler(self)
        if isinstance(data, dict):
            more = data.pop("more", None)
            if more:
                data["actions"] = [data.pop("action"), *more]
        return data

    @property
    def actions(self) -> tuple[Action, ...]:
        """Every action of the reply, in order."""
        return (self.action, *self.more)


def describe_action(action: Action) -> str:
    """A one-line, human-readable form of an action, as shown to the policy and in logs."""
    match action:
        case ClickElement(element=e, modifiers=m):
            return f"click_element {_q(e)}" + _held(m)
        case WriteElement(element=e, content=c, press_enter=enter):
            return f"write_element {_q(e)} content={_q(c)}" + (" +Enter" if enter else "")
        case Scroll(direction=d, element=e):
            return f"scroll {d}" + (f" in {_q(e)}" if e else "")
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
        case HoverElement(element=e):
            return f"hover_element {_q(e)}"
        case DoubleClickElement(element=e, modifiers=m):
            return f"double_click_element {_q(e)}" + _held(m)
        case RightClickElement(element=e):
            return f"right_click_element {_q(e)}"
        case DragElement(element=e, target=t):
            return f"drag_element {_q(e)} to {_q(t)}"
        case SwitchTab(index=i):
            return f"switch_tab {i}"
        case CloseTab(index=i):
            return f"close_tab {i}"
        case AskUser(question=q):
            return f"ask_user {_q(q)}"
        case Answer(content=c):
            return f"answer {_q(c)}"
    raise AssertionError(f"unknown action {action!r}")  # pragma: no cover


def _held(modifiers: tuple[str, ...] | None) -> str:
    return f" holding {'+'.join(modifiers)}" if modifiers else ""


def _q(text: str, limit: int = 120) -> str:
    text = shorten(" ".join(text.split()), limit)
    return '"' + text.replace('"', "'") + '"'
