"""Several actions a turn: model requests per task on a form-filling workload, 1 action a turn and N.

The workload is the six-field sign-up form of the local sites (``/hands/signup.html``: first name,
last name, email, phone, city, ZIP code, then the button), filled by the real agent in real
Chromium against the offline model server, which plays the same plan either way: one action a
reply with ``max_actions_per_turn = 1``, up to N a reply with N (``webagent.testing.hands.plan_script``).
Each run must end validated with the form submitted (the page reports it); the benchmark prints,
per contract and per setting, the policy requests per task, all model requests per task (the
localizer's and the validator's too), the steps, and the wall time per task at the given model
latency.

The requests are the agent's, not a model's choice: a real model decides how many actions it
sends. What the figures show is what the loop makes of a model that batches: each list is carried
out whole (no field of a form adds or removes elements), so the requests fall by the batch size.

    python benchmarks/actions_per_turn.py --per-turn 1,4 --latency 0.3 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from playwright.async_api import async_playwright

from webagent import Agent
from webagent.browser.launcher import launch_browser
from webagent.config import BrowserConfig
from webagent.families import DEFAULT_PROFILE, FAMILIES
from webagent.testing.hands import SIGNUP, SIGNUP_PLAN, plan_script
from webagent.testing.offline import offline_config
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

#: The first families of the registry that speak H's JSON ``tool_call`` and native tool calls, grounded.
_H_JSON = next(f.name for f in FAMILIES.values() if f.policy.shape == "tool_call" and f.policy.outputs[0] == "json")
_H_TOOLS = next(f.name for f in FAMILIES.values() if f.policy.point and "tools" in f.policy.outputs)
#: (label, policy family, grounding, output): webagent's JSON with a localizer, H's JSON and native tool calls grounded.
CONTRACTS = [
    ("webagent JSON, localizer", None, "localizer", "json"),
    ("H tool_call JSON, grounded", _H_JSON, "policy", "json"),
    ("H native tool calls, grounded", _H_TOOLS, "policy", "tools"),
]


async def one_run(
    browser: Any, site: SiteServer, family: str | None, grounding: str, output: str, per_turn: int, latency: float
) -> dict[str, float]:
    script = plan_script(
        SIGNUP.goal, SIGNUP_PLAN, SIGNUP.elements, marker=SIGNUP.marker, answer=SIGNUP.answer, per_turn=per_turn
    )
    script["latency_s"] = latency
    site.hand_events.clear()
    async with FakeModelServer(script) as server:
        config = offline_config(
            server.url, DEFAULT_PROFILE, family=family, grounding=grounding, max_actions_per_turn=per_turn
        )
        config.policy.output = output  # type: ignore[assignment]
        async with Agent(config, browser=browser) as agent:
            t0 = time.perf_counter()
            result = await agent.run(SIGNUP.url(site.url), SIGNUP.goal)
            wall = time.perf_counter() - t0
        counts = dict(server.request_counts)
    submitted = any(e.get("page") == "signup" for e in site.hand_events)
    if not (result.success and submitted):
        raise SystemExit(f"a run failed ({family}, {per_turn} a turn): {result.message}")
    return {
        "policy": counts.get("policy", 0),
        "all": sum(counts.values()),
        "steps": result.steps,
        "wall_s": wall,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-turn", default="1,4", help="max_actions_per_turn settings, comma-separated")
    parser.add_argument("--latency", type=float, default=0.3, help="seconds the offline model takes per request")
    parser.add_argument("--runs", type=int, default=3, help="runs per setting (the median wall time is printed)")
    args = parser.parse_args()
    settings = [int(n) for n in args.per_turn.split(",")]
    print(f"six-field sign-up form, model latency {args.latency:g} s, {args.runs} runs per setting (median wall)")
    print(f"{'contract':32} {'a turn':>6} {'policy req':>10} {'all req':>8} {'steps':>6} {'wall s':>7}")
    with SiteServer() as site:
        async with async_playwright() as playwright:
            browser = await launch_browser(playwright, BrowserConfig())
            try:
                for label, family, grounding, output in CONTRACTS:
                    for per_turn in settings:
                        runs = [
                            await one_run(browser, site, family, grounding, output, per_turn, args.latency)
                            for _ in range(args.runs)
                        ]
                        first = runs[0]
                        wall = statistics.median(r["wall_s"] for r in runs)
                        print(
                            f"{label:32} {per_turn:>6} {first['policy']:>10.0f} {first['all']:>8.0f} "
                            f"{first['steps']:>6.0f} {wall:>7.2f}"
                        )
            finally:
                await browser.close()


if __name__ == "__main__":
    asyncio.run(main())
