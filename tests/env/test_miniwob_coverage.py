"""The MiniWoB++ coverage benchmark's machinery (benchmarks/miniwob_coverage.py): its scripted solvers
play a handful of tasks through WebEnv with webagent's hands only (a click, a drag, a hover, a double
click), a wrong solver is counted as failing, a task without a solver is listed as not covered, and
BrowserGym's action table names webagent's real actions."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from playwright.async_api import Browser

from benchmarks.miniwob_coverage import config, run_tasks, summary
from benchmarks.miniwob_solvers import NOT_COVERED, SOLVERS, Play
from benchmarks.miniwob_solvers.browsergym import BROWSERGYM, WEBAGENT, action_table
from webagent import Agent
from webagent.actions import ACTION_TYPES
from webagent.tasks import MiniWoBTasks

SOLVER_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "miniwob_solvers"

#: (task, seed) -> the hand its solver must use there.
HANDS = {
    ("click-button", 0): "click_element",
    ("drag-box", 0): "drag_element",
    ("click-menu", 1): "hover_element",  # a submenu opens under the pointer
    ("text-editor", 9): "double_click_element",  # a plain word selected by a double click
}


@pytest.mark.browser
@pytest.mark.parametrize(("task", "seed"), list(HANDS))
async def test_a_solver_plays_its_task_with_its_hand(browser: Browser, task: str, seed: int) -> None:
    async with Agent(config(), browser=browser, require=()) as agent:
        (row,) = await run_tasks(agent, [task], [seed], concurrency=1)
    assert (row.covered, row.episodes, row.solved) == (True, 1, 1), row.failures
    assert HANDS[(task, seed)] in row.actions


@pytest.mark.browser
async def test_a_wrong_solver_fails_and_a_task_without_one_is_listed(browser: Browser) -> None:
    async def wrong(p: Play) -> None:  # a letter too many
        await p.write("$('#tt')", str(await p.read("quoted[0]")) + "x")
        await p.click("$('#subbtn')")

    async with Agent(config(), browser=browser, require=()) as agent:
        rows = await run_tasks(agent, ["enter-text", "hover-shape"], [0, 1], 2, solvers={"enter-text": wrong})
    text, hover = rows
    assert (text.covered, text.episodes, text.solved) == (True, 2, 0)
    assert all("reward -1" in f for f in text.failures), text.failures
    assert (hover.covered, hover.episodes) == (False, 0) and "endEpisode" in hover.why
    figures = summary(rows, 2)
    assert figures["covered"] == 1 and figures["solved_every_seed"] == 0
    assert figures["not_covered"] == {"hover-shape": hover.why}


def test_every_task_has_a_solver_or_a_reason() -> None:
    names = set(MiniWoBTasks().names())
    assert set(SOLVERS) | set(NOT_COVERED) == names
    assert not set(SOLVERS) & set(NOT_COVERED)


#: JavaScript that would change the page instead of reading it.
WRITES = re.compile(r"\.(click|focus|blur|submit|select)\(\)|\.(dispatchEvent|scrollTo|scrollBy|setAttribute)\(|"
                    r"\.(value|checked|innerHTML|textContent|scrollTop|scrollLeft)\s*=[^=]")  # fmt: skip


def test_the_solvers_only_read_the_page() -> None:
    """Solvers act through webagent's actions: their JavaScript reads (no clicks, no values set),
    and nothing but the player's read touches the browser."""
    found = []
    for path in sorted(SOLVER_DIR.glob("*.py")):
        text = path.read_text()
        found += [f"{path.name}: {m.group(0)}" for m in WRITES.finditer(text)]
        if path.name != "play.py":
            found += [f"{path.name}: {w}" for w in (".page", "evaluate(", "env.step(") if w in text]
    assert found == []
    assert WRITES.search("$('#x').click()") and WRITES.search("e.value = 'x'")  # the check can fail
    assert not WRITES.search("await p.click(\"$('#x')\")") and not WRITES.search("e.value === 'x'")


def test_browsergym_s_table_names_webagent_s_actions() -> None:
    ours = {typing.get_args(t.model_fields["action"].annotation)[0] for t in ACTION_TYPES}
    assert {name for name, _ in WEBAGENT} == ours
    assert {a for _, _, equivalent, _ in BROWSERGYM for a in equivalent} <= ours
    table = action_table()
    assert "| bid | `drag_and_drop(from_bid, to_bid)` | `drag_element` |" in table
    assert "| `refresh` | **none** |" in table
