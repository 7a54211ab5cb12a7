"""MiniWoB++ coverage: every task of the set, played by a privileged scripted policy through WebEnv.

    python benchmarks/miniwob_coverage.py                              # every task, 5 seeds each
    python benchmarks/miniwob_coverage.py --tasks drag-box,hover-shape --seeds 2 --json rows.json

Each task of ``MiniWoBTasks().names()`` runs ``--seeds`` episodes (seeds 0, 1, ...) in ``WebEnv``
with the page's own reward (``reward="task"``: no model server). Its solver
(``benchmarks/miniwob_solvers``) reads the task's DOM to decide, read-only, through the session's
bounded ``evaluate``, and acts only through webagent's action space at points in pixels of the
observation's screenshot, as a grounded model would: ``click_element``, ``write_element``,
``press_key``, ``select_option``, ``scroll`` (over a panel), ``hover_element``,
``double_click_element``, ``drag_element`` and ``wait``. One row per task: solved n/N, the actions
it used, and why an episode failed; tasks with no solver are listed as not covered, with why. The
summary gives the tasks covered, the share of them solved in every episode, and those played with
a drag, a hover or a double click. BrowserGym's high-level action set is printed beside webagent's
(``benchmarks/miniwob_solvers/browsergym.py``, from BrowserGym's own definitions).
``--concurrency`` environments run at once on one shared agent (one browser pool), as the RL
adapters run them; the tasks that copy and paste run one at a time (a browser's contexts share its
clipboard). Results and why each failure happens: docs/benchmarks.md, "MiniWoB++ coverage" (in
full: docs/benchmarks-history.md, 2026-12-05).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.miniwob_solvers import CLIPBOARD, NOT_COVERED, SOLVERS, Ended, Play, Solver, Stuck  # noqa: E402
from benchmarks.miniwob_solvers.browsergym import action_table  # noqa: E402
from webagent.agent import Agent  # noqa: E402
from webagent.config import AgentConfig  # noqa: E402
from webagent.env import WebEnv, shared_agent  # noqa: E402
from webagent.tasks import MiniWoBTasks  # noqa: E402

#: The pointer's hands beyond a click, as the summary names them.
POINTER_HANDS = {"drag_element": "drag", "hover_element": "hover", "double_click_element": "double-click"}
#: Seconds one episode may take before it is counted failed.
EPISODE_TIMEOUT_S = 90.0


@dataclass
class Row:
    """One task's figures."""

    task: str
    covered: bool
    episodes: int = 0
    solved: int = 0
    actions: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    why: str = ""

    @property
    def hands(self) -> list[str]:
        return [POINTER_HANDS[a] for a in POINTER_HANDS if a in self.actions]


def config(max_steps: int = 200) -> AgentConfig:
    cfg = AgentConfig()
    cfg.agent.max_steps = max_steps
    cfg.agent.max_time_s = EPISODE_TIMEOUT_S + 30
    return cfg


async def episode(env: WebEnv, solver: Solver, name: str, seed: int) -> tuple[bool, list[str], str]:
    """One episode of ``name`` played by ``solver``: (solved, the actions used, why it failed)."""
    obs, _ = await env.reset(f"miniwob/{name}", seed=seed)
    play = Play(env, obs)
    why = ""
    try:
        async with asyncio.timeout(EPISODE_TIMEOUT_S):
            await solver(play)
        why = "the solver's actions did not end the episode"
    except Ended:
        pass
    except Stuck as exc:
        why = f"stuck: {exc}"
    except TimeoutError:
        why = f"no end within {EPISODE_TIMEOUT_S:g} s"
    if play.reward is None and not env.done:
        await env.aclose()  # ends the episode (the shared agent is not the environment's)
    solved = play.reward is not None and play.reward > 0
    if not solved and not why:
        raw = play.info.get("task") or {}
        why = play.info.get("failure") or f"the page's reward {raw.get('raw_reward', 0)!s} ({raw.get('reason')})"
    if play.errors:
        why = (why + "; " if why else "") + "step errors: " + " | ".join(play.errors[:3])
    return solved, play.actions, why


async def run_tasks(
    agent: Agent,
    names: list[str],
    seeds: list[int],
    concurrency: int,
    solvers: Mapping[str, Solver] = SOLVERS,
) -> list[Row]:
    """Every (task, seed) of the covered tasks over ``concurrency`` environments on ``agent``; a row
    per task, in the order of ``names`` (a task without a solver: not covered, with why)."""
    rows = {n: Row(n, covered=n in solvers, why=NOT_COVERED.get(n, "" if n in solvers else "no solver")) for n in names}
    jobs: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
    for name in names:
        if name in solvers:
            for seed in seeds:
                jobs.put_nowait((name, seed))

    clipboard = asyncio.Lock()  # the browser's clipboard is one for all its contexts

    async def worker() -> None:
        env = WebEnv(agent=agent, reward="task")
        try:
            while not jobs.empty():
                name, seed = jobs.get_nowait()
                row = rows[name]
                try:
                    async with clipboard if name in CLIPBOARD else contextlib.nullcontext():
                        solved, actions, why = await episode(env, solvers[name], name, seed)
                except Exception as exc:  # a start that failed: the episode counts as not solved
                    solved, actions, why = False, [], f"{type(exc).__name__}: {exc}"
                row.episodes += 1
                row.solved += solved
                row.actions = sorted(set(row.actions) | set(actions))
                if why and not solved:
                    row.failures.append(f"seed {seed}: {why[:300]}")
        finally:
            await env.aclose()

    await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    return [rows[n] for n in names]


def summary(rows: list[Row], seeds: int) -> dict[str, Any]:
    covered = [r for r in rows if r.covered]
    full = [r for r in covered if r.episodes == seeds and r.solved == seeds]
    return {
        "tasks": len(rows),
        "covered": len(covered),
        "solved_every_seed": len(full),
        "share_solved_every_seed": round(len(full) / len(covered), 4) if covered else 0.0,
        "episodes": sum(r.episodes for r in covered),
        "episodes_solved": sum(r.solved for r in covered),
        "pointer_hands": {r.task: r.hands for r in covered if r.hands},
        "not_covered": {r.task: r.why for r in rows if not r.covered},
        "not_solved_every_seed": {r.task: f"{r.solved}/{r.episodes}" for r in covered if r not in full},
    }


def print_report(rows: list[Row], seeds: int, figures: dict[str, Any], wall_s: float) -> None:
    width = max(len(r.task) for r in rows)
    for r in rows:
        if r.covered:
            print(f"{r.task:<{width}}  {r.solved}/{r.episodes}  {', '.join(r.actions)}")
            for failure in r.failures[:seeds]:
                print(f"{'':<{width}}    {failure}")
        else:
            print(f"{r.task:<{width}}  not covered: {r.why}")
    print()
    print(
        f"tasks {figures['tasks']}, covered {figures['covered']}, solved {seeds}/{seeds}: "
        f"{figures['solved_every_seed']} ({figures['share_solved_every_seed']:.1%} of the covered); "
        f"episodes {figures['episodes_solved']}/{figures['episodes']} in {wall_s:.0f} s"
    )
    for hand in POINTER_HANDS.values():
        tasks = [t for t, hands in figures["pointer_hands"].items() if hand in hands]
        print(f"covered tasks played with a {hand}: {', '.join(tasks) or 'none'}")
    print()
    print(action_table())


async def main(args: argparse.Namespace) -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    names = MiniWoBTasks().names()
    if args.tasks:
        wanted = [t.strip().removeprefix("miniwob/") for t in args.tasks.split(",") if t.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            print(f"no MiniWoB++ task named {', '.join(unknown)}", file=sys.stderr)
            return 2
        names = wanted
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    agent = shared_agent(config(), reward="task")
    t0 = time.perf_counter()
    try:
        await agent.browsers.start()
        rows = await run_tasks(agent, names, seeds, args.concurrency)
    finally:
        await agent.aclose()
    wall = time.perf_counter() - t0
    figures = summary(rows, len(seeds))
    print_report(rows, len(seeds), figures, wall)
    if args.json:
        out = {"seeds": seeds, "summary": figures, "rows": [{**asdict(r), "hands": r.hands} for r in rows]}
        await asyncio.to_thread(Path(args.json).write_text, json.dumps(out, indent=1) + "\n")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", help="comma-separated task names (default: every task of the set)")
    parser.add_argument("--seeds", type=int, default=5, help="episodes per task (seeds FIRST, FIRST+1, ...)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=3, help="environments at once on the shared agent")
    parser.add_argument("--json", metavar="OUT", help="write the rows and the summary as JSON")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.concurrency < 1:
        parser.error("--seeds and --concurrency must be at least 1")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
