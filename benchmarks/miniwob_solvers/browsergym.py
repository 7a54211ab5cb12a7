"""BrowserGym's high-level action set beside webagent's action space, from BrowserGym's own
definitions (ServiceNow/BrowserGym, ``browsergym/core/src/browsergym/core/action/highlevel.py``:
``ACTION_SUBSETS`` and ``HighLevelActionSet``; ``functions.py``: each action's signature and
docstring; read at commit 9e779f08). Facts only: which action of one side does what an action of
the other does, and which have none."""

from __future__ import annotations

__all__ = ["BROWSERGYM", "BROWSERGYM_SOURCE", "WEBAGENT", "action_table"]

BROWSERGYM_SOURCE = "ServiceNow/BrowserGym@9e779f08 browsergym/core/src/browsergym/core/action/{highlevel,functions}.py"

#: BrowserGym's actions: (its subset, the call, webagent's equivalent actions (none: empty), a note).
#: ``noop`` is always allowed; ``check``/``uncheck`` are defined but left out of every subset.
BROWSERGYM: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("bid", "click(bid, button, modifiers)", ("click_element", "right_click_element"),
     "held keys: modifiers; a middle click has no equivalent"),
    ("bid", "dblclick(bid, button, modifiers)", ("double_click_element",), "left button only, held keys: modifiers"),
    ("bid", "hover(bid)", ("hover_element",), ""),
    ("bid", "fill(bid, value, enable_autocomplete_menu)", ("write_element",),
     "webagent clicks the field, selects its text and types key by key (a long text inserted)"),
    ("bid", "clear(bid)", ("write_element",), "with an empty content"),
    ("bid", "select_option(bid, options)", ("select_option",),
     "one option; several in a list box: click_element with modifiers"),
    ("bid", "press(bid, key_comb)", ("press_key",), "on the focused element (a click focuses it first)"),
    ("bid", "focus(bid)", (), "a click focuses"),
    ("bid", "drag_and_drop(from_bid, to_bid)", ("drag_element",),
     "BrowserGym moves to the target in one move, webagent in 8"),
    ("bid", "upload_file(bid, file)", ("upload_file",), "webagent: only the files the config allows, by name"),
    ("bid", "scroll(delta_x, delta_y)", ("scroll",), "webagent: a direction, the wheel turned by 0.8 of the viewport"),
    ("coord", "scroll_at(x, y, dx, dy)", ("scroll",),
     "with a point: the wheel turned by 0.8 of the panel under it"),
    ("coord", "mouse_move(x, y)", ("hover_element",), ""),
    ("coord", "mouse_click(x, y, button)", ("click_element", "right_click_element"), ""),
    ("coord", "mouse_dblclick(x, y, button)", ("double_click_element",), ""),
    ("coord", "mouse_down(x, y, button)", (), "a press comes with its release in drag_element"),
    ("coord", "mouse_up(x, y, button)", (), "as mouse_down"),
    ("coord", "mouse_drag_and_drop(from_x, from_y, to_x, to_y)", ("drag_element",), "grounded: x, y, to_x, to_y"),
    ("coord", "mouse_upload_file(x, y, file)", ("upload_file",), ""),
    ("coord", "keyboard_press(key)", ("press_key",), ""),
    ("coord", "keyboard_type(text)", ("write_element",), "webagent types into the field it clicks"),
    ("coord", "keyboard_insert_text(text)", ("write_element",), "as keyboard_type"),
    ("coord", "keyboard_down(key)", (), "keys are held only during a click (modifiers)"),
    ("coord", "keyboard_up(key)", (), "as keyboard_down"),
    ("nav", "goto(url)", ("goto",), ""),
    ("nav", "go_back()", ("go_back",), ""),
    ("nav", "go_forward()", (), ""),
    ("tab", "new_tab()", (), "webagent follows the tabs a page opens"),
    ("tab", "tab_focus(index)", ("switch_tab",), ""),
    ("tab", "tab_close()", ("close_tab",), "BrowserGym closes the current tab, webagent the one at an index"),
    ("chat", "send_msg_to_user(text)", ("answer",), "webagent's answer ends the run and is judged"),
    ("infeas", "report_infeasible(reason)", ("answer",), "no action of its own"),
    ("always", "noop(wait_ms)", ("wait",), "webagent waits at most 10 s"),
    ("none", "check(bid) / uncheck(bid)", ("click_element",), "defined, in no subset"),
)  # fmt: skip

#: webagent's actions and BrowserGym's equivalent ("" for none).
WEBAGENT: tuple[tuple[str, str], ...] = (
    ("click_element", "click / mouse_click"),
    ("write_element", "fill (press_enter: then press)"),
    ("select_option", "select_option"),
    ("upload_file", "upload_file / mouse_upload_file"),
    ("hover_element", "hover / mouse_move"),
    ("double_click_element", "dblclick / mouse_dblclick"),
    ("right_click_element", "click(button='right') / mouse_click(button='right')"),
    ("drag_element", "drag_and_drop / mouse_drag_and_drop"),
    ("scroll", "scroll; over a panel: scroll_at"),
    ("press_key", "press / keyboard_press"),
    ("goto", "goto"),
    ("go_back", "go_back"),
    ("refresh", ""),
    ("wait", "noop"),
    ("switch_tab", "tab_focus"),
    ("close_tab", "tab_close (the current tab only)"),
    ("ask_user", ""),
    ("answer", "send_msg_to_user / report_infeasible"),
)


def action_table() -> str:
    """Both tables as Markdown."""
    lines = [
        f"BrowserGym's high-level actions ({BROWSERGYM_SOURCE}) and webagent's equivalents:",
        "",
        "| BrowserGym subset | BrowserGym action | webagent | note |",
        "|---|---|---|---|",
    ]
    for subset, call, ours, note in BROWSERGYM:
        named = ", ".join(f"`{a}`" for a in ours) or "**none**"
        lines.append(f"| {subset} | `{call}` | {named} | {note} |")
    lines += ["", "webagent's actions and BrowserGym's equivalents:", "", "| webagent | BrowserGym |", "|---|---|"]
    lines += [f"| `{ours}` | {theirs or '**none**'} |" for ours, theirs in WEBAGENT]
    lines += [
        "",
        "Both take several actions in one reply: BrowserGym's HighLevelActionSet(multiaction=True, its default) "
        "runs a reply's calls in order; webagent's [agent] max_actions_per_turn (default 1) runs a list and stops "
        "at the first action that changes the page.",
    ]
    return "\n".join(lines)
