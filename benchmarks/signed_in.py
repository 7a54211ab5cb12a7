"""A suite of checks on a site behind a login (password + 2FA), without and with a saved signed-in state.

1. the suite runs signed out: every check is sent to the sign-in page and signs in first (user
   name, ``{{PASSWORD}}``, the 2FA code ``{{OTP}}``), then reads its item's status;
2. ``Agent.run(..., save_state=FILE)`` signs in once and saves the state (what ``webagent auth save`` does);
3. the suite runs again with ``[browser] storage_state = FILE``: each check starts signed in.

It prints, for both suite runs: checks passed, model calls (and per role), steps, sign-in page
requests the site saw, wall time; and the share of model calls the saved state spared.
The offline model server plays the models (no latency unless ``--latency``).

    python benchmarks/signed_in.py --checks 20 --concurrency 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog

from webagent import Agent
from webagent.config import ROLES, AgentConfig
from webagent.families import DEFAULT_PROFILE
from webagent.suite.model import load_suite
from webagent.suite.runner import run_suite
from webagent.testing.offline import offline_config
from webagent.testing.server import FakeModelServer
from webagent.testing.teamscripts import SIGN_IN_GOAL, item_suite, team_script
from webagent.testing.teamsite import OTP_CODE, PASSWORD, TeamSite


def _config(server: FakeModelServer, site: TeamSite, state: Path | None = None) -> AgentConfig:
    config = offline_config(server.url, DEFAULT_PROFILE)
    config.secrets = {"PASSWORD": PASSWORD, "OTP": OTP_CODE}  # type: ignore[assignment]
    # The suite file is data: its checks' secrets are typed only on the hosts allowed for them.
    config.secret_hosts = {name: [f"{site.host}:{site.port}"] for name in config.secrets}
    if state is not None:
        config.browser.storage_state = state
    return config


async def _suite(
    config: AgentConfig, suite_file: Path, output: Path, site: TeamSite, concurrency: int
) -> dict[str, Any]:
    before = len(site.requests)
    t0 = time.perf_counter()
    summary, items, _ = await run_suite(config, load_suite(suite_file), output, concurrency=concurrency)
    wall = time.perf_counter() - t0
    calls = {role: sum(o.result.usage.role(role).calls for o in items if o.result) for role in ROLES}
    return {
        "checks": summary["checks"],
        "passed": summary["passed"],
        "model_calls": summary["model_calls"],
        "calls": calls,
        "steps": summary["steps"],
        "sign_in_requests": sum(1 for r in site.requests[before:] if r.path.startswith(("/login", "/2fa"))),
        "wall_s": round(wall, 2),
    }


async def main(checks: int, concurrency: int, latency: float) -> dict[str, Any]:
    with TeamSite() as site, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        suite_file = folder / "suite.jsonl"
        suite_file.write_text("".join(json.dumps(c) + "\n" for c in item_suite(site.url, checks)))
        script = {**team_script(checks), "latency_s": latency}
        async with FakeModelServer(script) as server:
            signed_out = await _suite(_config(server, site), suite_file, folder / "out-1", site, concurrency)
            state = folder / "state.json"
            async with Agent(_config(server, site)) as agent:
                saved = await agent.run(f"{site.url}/app/", SIGN_IN_GOAL, save_state=state)
            if not saved.success or not state.exists():
                raise SystemExit(f"signing in failed: {saved.stop_reason}: {saved.message}")
            signed_in = await _suite(_config(server, site, state), suite_file, folder / "out-2", site, concurrency)
        mode = oct(os.stat(state).st_mode & 0o777)  # before the folder goes
    spared = 1 - signed_in["model_calls"] / signed_out["model_calls"] if signed_out["model_calls"] else 0.0
    return {
        "signed_out": signed_out,
        "sign_in_once": {"model_calls": sum(saved.usage.role(r).calls for r in ROLES), "steps": saved.steps},
        "signed_in": signed_in,
        "calls_spared": round(spared, 3),
        "state_mode": mode,
    }


def _print(figures: dict[str, Any]) -> None:
    for name in ("signed_out", "signed_in"):
        run = figures[name]
        per_role = ", ".join(f"{role} {n}" for role, n in run["calls"].items())
        print(
            f"{name:>10}: {run['passed']}/{run['checks']} passed, {run['model_calls']} model calls ({per_role}), "
            f"{run['steps']} steps, {run['sign_in_requests']} sign-in page requests, {run['wall_s']} s"
        )
    once = figures["sign_in_once"]
    print(f"  sign-in once (auth save): {once['model_calls']} model calls, {once['steps']} steps")
    print(f"  the saved state spared {figures['calls_spared']:.0%} of the suite's model calls")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n\n")[0])
    parser.add_argument("--checks", type=int, default=20, help="checks in the suite (at most 20 items on the site)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds the fake models take per call")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    result = asyncio.run(main(args.checks, args.concurrency, args.latency))
    if args.json:
        print(json.dumps(result))
    else:
        _print(result)
    sys.exit(0)
