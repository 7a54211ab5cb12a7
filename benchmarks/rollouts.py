"""Rollouts per second: webagent's environment vs BrowserGym's on the same MiniWoB++ tasks.

    python benchmarks/rollouts.py --envs 1,8 --episodes 5                    # small (a shared machine)
    python benchmarks/rollouts.py --envs 1,8,32,100 --episodes 10 --openenv-clients 32 --kill 32 \
        --out rollouts.json                                                   # the full run (a quiet machine)

For each number of parallel environments N, both sides run N environments at once, each doing
``--episodes`` episodes of the tasks (click-button, click-link, enter-text, choose-list,
click-checkboxes, in turn), environment k's episode i on BrowserGym's seed k * 1000 + i (webagent
opens the page BrowserGym's task opens for that seed: ``Math.seedrandom`` of
``RandomState(seed).randint(0, 1000000)``), and act out the same scripted plan
(``webagent.testing.miniwob.PLAN``, evaluated in each page: the same clicks and typing on the same
elements; every ``--every-wrong``-th episode a plan that fails the task, so zero rewards are compared
too). Reported per side: episodes/s, steps/s, step and reset p50, PSS per environment (the process
tree's peak PSS / N), episodes lost; and every (task, seed) whose rewards differ between the sides.

BrowserGym runs in its own venv (``benchmarks/.venv-browsergym``: ``python -m venv
benchmarks/.venv-browsergym && benchmarks/.venv-browsergym/bin/pip install browsergym-miniwob
miniwob``; it pins an old Playwright), one process per environment, as BrowserGym is used.
``--openenv-clients M`` also runs M clients of ``webagent env serve`` (openenv-core's WebSocket
client) against the in-process environment at M. ``--kill N``: N environments mid-episode, their
browser killed with SIGKILL: every episode must end truncated with its cause and no reward, and the
next reset must work.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from webagent.config import AgentConfig  # noqa: E402
from webagent.env import WebEnv, shared_agent  # noqa: E402
from webagent.tasks import benchmark_task  # noqa: E402
from webagent.testing.miniwob import PLAN, PLANNED_TASKS, WRONG, env_action  # noqa: E402

VIEWPORT = (500, 320)  # BrowserGym's MiniWoB viewport
BG_PYTHON = ROOT / "benchmarks" / ".venv-browsergym" / "bin" / "python"


def page_seed(seed: int) -> int:
    """The page seed BrowserGym's MiniWoB task uses for ``env.reset(seed=seed)``."""
    return int(np.random.RandomState(seed).randint(0, 1000000))


def pss_kib(root: int) -> int:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
    tree, todo = [root], [root]
    while todo:
        pid = todo.pop()
        kids = [c for c, p in parents.items() if p == pid]
        tree += kids
        todo += kids
    total = 0
    for pid in tree:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    return total


def config() -> AgentConfig:
    cfg = AgentConfig()
    cfg.browser.viewport.width, cfg.browser.viewport.height = VIEWPORT
    return cfg


def summarize(side: str, n: int, records: list[dict[str, Any]], wall_s: float, pss_total_kib: int) -> dict[str, Any]:
    ok = [r for r in records if "error" not in r]
    steps = [s for r in ok for s in r["step_s"]]
    resets = [r["reset_s"] for r in ok]
    return {
        "side": side,
        "envs": n,
        "episodes": len(ok),
        "lost": len(records) - len(ok),
        "errors": sorted({r["error"][:120] for r in records if "error" in r})[:5],
        "wall_s": round(wall_s, 2),
        "episodes_per_s": round(len(ok) / wall_s, 3) if wall_s else None,
        "steps_per_s": round(len(steps) / wall_s, 3) if wall_s else None,
        "step_p50_s": round(statistics.median(steps), 3) if steps else None,
        "reset_p50_s": round(statistics.median(resets), 3) if resets else None,
        "pss_per_env_mib": round(pss_total_kib / 1024 / n, 1),
        "rewards": {f"{r['task']}@{r['seed']}": r["reward"] for r in ok},
    }


async def webagent_side(n: int, episodes: int, tasks: list[str], every_wrong: int) -> dict[str, Any]:
    agent = shared_agent(config(), reward="task")
    records: list[dict[str, Any]] = []
    peak = 0

    async def worker(index: int) -> None:
        nonlocal peak
        env = WebEnv(agent=agent, reward="task")
        try:
            for i in range(episodes):
                name, seed = tasks[i % len(tasks)], index * 1000 + i
                record: dict[str, Any] = {"task": name, "seed": seed}
                try:
                    t = time.perf_counter()
                    obs, _ = await env.reset(f"miniwob/{name}", seed=page_seed(seed))
                    record["reset_s"] = time.perf_counter() - t
                    wrong = every_wrong and i % every_wrong == every_wrong - 1
                    assert env.session is not None
                    planned = await env.session.page.evaluate(WRONG if wrong else PLAN)
                    steps, reward = [], 0.0
                    for action in planned:
                        point = obs.screenshot.frame.to_image(action["x"], action["y"])
                        t = time.perf_counter()
                        obs, reward, terminated, truncated, info = await env.step(env_action(action), point=point)
                        steps.append(time.perf_counter() - t)
                        if info.get("failure"):
                            raise RuntimeError(info["failure"])
                        if terminated or truncated:
                            break
                    record.update(reward=reward, step_s=steps)
                except Exception as exc:
                    record["error"] = f"{type(exc).__name__}: {exc}"
                records.append(record)
                peak = max(peak, pss_kib(os.getpid()))
        finally:
            await env.aclose()

    try:
        await agent.browsers.start()
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(n)))
        wall = time.perf_counter() - t0
    finally:
        await agent.aclose()
    return summarize("webagent", n, records, wall, peak)


def browsergym_side(
    n: int, episodes: int, tasks: list[str], every_wrong: int, python: Path, timeout_s: float
) -> dict[str, Any]:
    spec = {
        "envs": n, "episodes": episodes, "tasks": tasks, "plan": PLAN, "wrong": WRONG,
        "every_wrong": every_wrong, "chromium": "/usr/bin/chromium", "timeout_s": timeout_s,
    }  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    done = subprocess.run(
        [str(python), str(ROOT / "benchmarks" / "rollouts_browsergym.py"), f.name],
        capture_output=True, text=True, timeout=timeout_s + 600,
    )  # fmt: skip
    os.unlink(f.name)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    records = [r for r in lines if "task" in r]
    workers = [r for r in lines if r.get("finished")]
    wall = next((r["wall_s"] for r in lines if "wall_s" in r), 0.0)
    out = summarize("browsergym", n, records, wall, sum(w["pss_kib"] for w in workers))
    out["workers_finished"] = len(workers)
    out["lost"] += n * episodes - len(records)
    if done.returncode:
        out["stderr_tail"] = done.stderr[-1500:]
    return out


async def openenv_side(m: int, episodes: int, tasks: list[str]) -> dict[str, Any]:
    """M openenv-core clients of ``webagent env serve`` (plans computed beforehand, outside the timing)."""
    from playwright.async_api import async_playwright

    from webagent.env.openenv import WebAction, WebagentClient

    pairs = [(tasks[i % len(tasks)], k * 1000 + i) for k in range(m) for i in range(episodes)]
    plans: dict[tuple[str, int], list[dict[str, Any]]] = {}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium")
        context = await browser.new_context(viewport={"width": VIEWPORT[0], "height": VIEWPORT[1]})
        for name, seed in pairs:
            task = benchmark_task(f"miniwob/{name}", page_seed(seed))
            page = await context.new_page()
            await page.goto(task.url)
            await task.start(page)  # type: ignore[arg-type]
            plans[(name, seed)] = await page.evaluate(PLAN)
            await page.close()
        await browser.close()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "webagent.toml"
        cfg.write_text(f"[browser]\nviewport = {{ width = {VIEWPORT[0]}, height = {VIEWPORT[1]} }}\n")
        proc, url = start_server(cfg, m + 4)
        try:
            records: list[dict[str, Any]] = []

            async def client(k: int) -> None:
                async with WebagentClient(base_url=url, message_timeout_s=600) as env:
                    for i in range(episodes):
                        name, seed = tasks[i % len(tasks)], k * 1000 + i
                        record: dict[str, Any] = {"task": name, "seed": seed}
                        try:
                            t = time.perf_counter()
                            result = await env.reset(task=f"miniwob/{name}", seed=page_seed(seed))
                            record["reset_s"] = time.perf_counter() - t
                            w, h = result.observation.image_size
                            steps = []
                            for a in plans[(name, seed)]:
                                point = (a["x"] * w / VIEWPORT[0], a["y"] * h / VIEWPORT[1])
                                t = time.perf_counter()
                                result = await env.step(WebAction(action=env_action(a), point=point))
                                steps.append(time.perf_counter() - t)
                                if result.done:
                                    break
                            record.update(reward=result.reward, step_s=steps)
                        except Exception as exc:
                            record["error"] = f"{type(exc).__name__}: {exc}"
                        records.append(record)

            t0 = time.perf_counter()
            await asyncio.gather(*(client(k) for k in range(m)))
            wall = time.perf_counter() - t0
            peak = pss_kib(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
            if proc.poll() is None:
                proc.kill()
    return summarize("openenv", m, records, wall, peak)


async def kill_check(n: int) -> dict[str, Any]:
    """N environments mid-episode, their browser killed: each must end truncated with a cause, no reward."""
    agent = shared_agent(config(), reward="task")
    envs = [WebEnv(agent=agent, reward="task") for _ in range(n)]
    try:
        await asyncio.gather(*(env.reset("miniwob/click-button", seed=i) for i, env in enumerate(envs)))
        mains = chromium_mains(os.getpid())
        for pid in mains:
            os.kill(pid, signal.SIGKILL)
        results = await asyncio.gather(*(env.step({"action": "scroll", "direction": "down"}) for env in envs))
        truncated = sum(1 for _, _, term, trunc, info in results if trunc and not term and info.get("failure"))
        rewarded = sum(1 for _, _, term, _, _ in results if term)
        obs, _ = await envs[0].reset("miniwob/click-test", seed=1)
        return {"envs": n, "killed": len(mains), "truncated_with_cause": truncated, "rewarded": rewarded,
                "next_reset_ok": bool(obs.goal)}  # fmt: skip
    finally:
        for env in envs:
            await env.aclose()
        await agent.aclose()


def chromium_mains(root: int) -> list[int]:
    """Main Chromium processes below ``root`` (not their renderers and helpers)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            if "chrom" in cmd.split("\0")[0] and "--type=" not in cmd and _below(int(entry), root):
                found.append(int(entry))
    return found


def start_server(cfg: Path, sessions: int) -> tuple[subprocess.Popen[str], str]:
    """``webagent env serve`` on a free port: the process and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "webagent", "env", "serve", "--port", "0", "--config", str(cfg),
         "--max-sessions", str(sessions)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    line = proc.stderr.readline()
    while line and "OpenEnv server on" not in line:
        line = proc.stderr.readline()
    return proc, line.rsplit(" ", 1)[-1].strip()


def _below(pid: int, root: int) -> bool:
    for _ in range(10):
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            return False
        if pid == root:
            return True
        if pid <= 1:
            return False
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="1,8", help="numbers of parallel environments (default 1,8)")
    parser.add_argument("--episodes", type=int, default=5, help="episodes per environment (default 5)")
    parser.add_argument("--tasks", default=",".join(PLANNED_TASKS))
    parser.add_argument("--every-wrong", type=int, default=5, help="every k-th episode plays a failing plan")
    parser.add_argument("--browsergym-python", default=str(BG_PYTHON), help="BrowserGym's venv Python")
    parser.add_argument("--skip-browsergym", action="store_true")
    parser.add_argument(
        "--browsergym-timeout", type=float, default=900.0, metavar="S",
        help="BrowserGym's side ends after S seconds: its unfinished episodes count as lost (default 900)",
    )  # fmt: skip
    parser.add_argument("--openenv-clients", type=int, default=0, metavar="M")
    parser.add_argument("--kill", type=int, default=0, metavar="N", help="the kill -9 check under N environments")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    tasks = args.tasks.split(",")
    report: dict[str, Any] = {"runs": []}
    bg_python = Path(args.browsergym_python)
    for n in (int(v) for v in args.envs.split(",")):
        ours = asyncio.run(webagent_side(n, args.episodes, tasks, args.every_wrong))
        report["runs"].append(ours)
        line = {k: v for k, v in ours.items() if k != "rewards"}
        print(json.dumps(line), flush=True)
        if not args.skip_browsergym and bg_python.exists():
            theirs = browsergym_side(n, args.episodes, tasks, args.every_wrong, bg_python, args.browsergym_timeout)
            report["runs"].append(theirs)
            print(json.dumps({k: v for k, v in theirs.items() if k != "rewards"}), flush=True)
            both = set(ours["rewards"]) & set(theirs["rewards"])
            differ = {k: (ours["rewards"][k], theirs["rewards"][k]) for k in sorted(both)
                      if ours["rewards"][k] != theirs["rewards"][k]}  # fmt: skip
            ratio = {
                "envs": n, "compared": len(both), "rewards_differ": differ,
                "episodes_per_s_ratio": _ratio(ours["episodes_per_s"], theirs["episodes_per_s"]),
                "steps_per_s_ratio": _ratio(ours["steps_per_s"], theirs["steps_per_s"]),
                "pss_ratio": _ratio(ours["pss_per_env_mib"], theirs["pss_per_env_mib"]),
            }  # fmt: skip
            report.setdefault("comparisons", []).append(ratio)
            print(json.dumps(ratio), flush=True)
    if args.openenv_clients:
        m = args.openenv_clients
        served = asyncio.run(openenv_side(m, args.episodes, tasks))
        inproc = next((r for r in report["runs"] if r["side"] == "webagent" and r["envs"] == m), None)
        if inproc is None:
            inproc = asyncio.run(webagent_side(m, args.episodes, tasks, 0))
        served["vs_in_process_steps_per_s"] = _ratio(served["steps_per_s"], inproc["steps_per_s"])
        report["openenv"] = served
        print(json.dumps({k: v for k, v in served.items() if k != "rewards"}), flush=True)
    if args.kill:
        report["kill"] = asyncio.run(kill_check(args.kill))
        print(json.dumps(report["kill"]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


if __name__ == "__main__":
    main()
