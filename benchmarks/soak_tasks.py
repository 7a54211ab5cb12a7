"""The soak's workload: its site (``soaksite/server.py``, started here) and its tasks.

A task's plan (``plan_for``) is S-1 actions in an order drawn per task (so sessions are not in
lockstep), every plan including the slow page and the never-answering request; ``soak_script`` is
the offline model server's script that makes the agent carry the plans out, then answer
(``ANSWER``, which the validator accepts). ``model_calls`` is what the floor sleeps per step for.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from soaksite.server import ELEMENTS, READY_PREFIX, VIEWPORT

from webagent.families import DEFAULT_PROFILE

__all__ = [
    "ANSWER",
    "BASE",
    "BLOCKS",
    "NO_BACK_AFTER",
    "RESOLVER_RULE",
    "SITE",
    "Act",
    "model_calls",
    "plan_for",
    "policy_action",
    "site_stats",
    "soak_script",
    "start_site",
    "start_url",
    "task_tag",
]

SITE = Path(__file__).resolve().parent / "soaksite" / "server.py"
#: Both browsers resolve the second origin's host to 127.0.0.1 (Chromium would try ::1 first).
RESOLVER_RULE = "--host-resolver-rules=MAP localhost 127.0.0.1"
ANSWER = "soak done"

# -- the tasks --------------------------------------------------------------------------------------
#: An action of a plan: (kind, argument): ("click", element), ("write", element), ("scroll", "down"),
#: ("back", "").
Act = tuple[str, str]
BLOCKS: dict[str, list[Act]] = {
    "slow": [("click", "slow page link")],
    "hang": [("click", "hanging page link")],
    "list": [("click", "long list link"), ("scroll", "down"), ("scroll", "down")],
    "form": [("click", "form page link"), ("write", "form text field")],
    "newtab": [("click", "new tab link")],
    "cross": [("click", "other-origin page link")],
    "back": [("back", "")],
    "images": [("click", "image gallery link")],
    "same": [("click", "same-origin page link")],  # not in BASE: every other link but one is same-origin too
}
#: One of each (11 actions: with the answer, the 12 steps of the default task).
BASE = ["slow", "hang", "list", "form", "newtab", "cross", "back", "images"]
#: What the block before a go_back may not be: none (the start page), a new tab (no history), the slow
#: page (its navigation may still be pending: back would leave the start page), another back.
NO_BACK_AFTER = {None, "newtab", "slow", "back"}


def _cut(blocks: list[str], room: int) -> list[tuple[str, list[Act]]]:
    """The first blocks, up to ``room`` actions (the last one cut short if it does not fit)."""
    out: list[tuple[str, list[Act]]] = []
    for block in blocks:
        if room <= 0:
            break
        out.append((block, BLOCKS[block][:room]))
        room -= len(out[-1][1])
    return out


def plan_for(index: int, actions: int, seed: int = 0) -> tuple[list[Act], int]:
    """The actions of task ``index`` (in an order drawn for it) and its slow page's delay in ms.

    Shuffled copies of ``BASE`` laid end to end, cut at ``actions``; the slow page and the hanging page
    are always in (a short plan makes room for them), and no go_back follows a block in ``NO_BACK_AFTER``."""
    rng = random.Random(seed * 1_000_003 + index)
    slow_ms = rng.randint(2000, 5000)
    must = ("slow", "hang")
    cut: list[tuple[str, list[Act]]] = []
    for _ in range(1000):
        blocks: list[str] = []
        while len(blocks) < actions + len(BASE):
            chunk = BASE[:]
            rng.shuffle(chunk)
            blocks += chunk
        cut = _cut(blocks, actions)
        if any(m not in (name for name, _ in cut) for m in must):  # a short plan: make room for them
            cut = _cut([b for b in blocks if b not in must], actions - len(must))
            for m in must:
                cut.insert(rng.randrange(len(cut) + 1), (m, BLOCKS[m]))
        names = [name for name, _ in cut]
        if all(b != "back" or (names[i - 1] if i else None) not in NO_BACK_AFTER for i, b in enumerate(names)):
            break
    return [act for _, acts in cut for act in acts], slow_ms


def model_calls(act: Act | None) -> int:
    """Model calls the agent makes at a step: policy, + localizer (click, write) or validator (answer)."""
    return 2 if act is None or act[0] in ("click", "write") else 1


def policy_action(act: Act, index: int) -> dict[str, Any]:
    kind, arg = act
    if kind == "click":
        return {"action": "click_element", "element": arg}
    if kind == "write":
        return {"action": "write_element", "element": arg, "content": f"soak {index}", "press_enter": True}
    if kind == "scroll":
        return {"action": "scroll", "direction": arg}
    return {"action": "go_back"}


def task_tag(index: int) -> str:
    return f"[soak-{index:04d}]"


def soak_script(plans: list[list[Act]], latency: float) -> dict[str, Any]:
    answer = {"action": "answer", "content": ANSWER}
    tasks = []
    for i, plan in enumerate(plans):
        rules: list[dict[str, Any]] = [{"when": {"final": True}, "action": answer}]
        rules += [
            {"when": {"step": k}, "thought": f"step {k}: {act[0]} {act[1]}", "action": policy_action(act, i)}
            for k, act in enumerate(plan, start=1)
        ]
        rules.append({"thought": "all done", "action": answer})
        tasks.append({"id": f"soak-{i:04d}", "match": task_tag(i), "policy": rules, "validator": {"accept": [ANSWER]}})
    return {
        "latency_s": latency,
        "viewport": {"width": VIEWPORT[0], "height": VIEWPORT[1]},
        "localizer_profile": DEFAULT_PROFILE,
        "elements": {name: list(point) for name, point in ELEMENTS.items()},
        "tasks": tasks,
    }


def start_url(origin: str, index: int, slow_ms: int) -> str:
    return f"{origin}/p?t=s{index:04d}&n=0&ms={slow_ms}"


# -- the site ---------------------------------------------------------------------------------------
def start_site(children: list[subprocess.Popen[str]]) -> tuple[subprocess.Popen[str], list[str]]:
    site = subprocess.Popen(
        [sys.executable, str(SITE), "--stdin-eof"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    children.append(site)
    assert site.stdout is not None
    line = site.stdout.readline().strip()
    if not line.startswith(READY_PREFIX):
        site.kill()
        raise SystemExit(f"the soak site did not start: {line!r}")
    return site, line.removeprefix(READY_PREFIX).split()


def site_stats(origin: str, reset_peak: bool = False) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(origin + "/_stats" + ("?reset_peak=1" if reset_peak else ""), timeout=10) as reply:
            return dict(json.load(reply))
    except (OSError, ValueError):
        return {}


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    keep = ("hangs_open", "hangs_open_peak")
    return {k: v if k in keep else v - before.get(k, 0) for k, v in after.items()}
