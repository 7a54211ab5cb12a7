"""BrowserGym's side of benchmarks/rollouts.py, run by the BrowserGym venv's Python (browsergym-miniwob
pins an old Playwright: never the project's venv). Not part of webagent: it imports only BrowserGym.

    python rollouts_browsergym.py SPEC.json   # {"envs", "episodes", "tasks", "plan", "wrong", "every_wrong", "chromium"}

Runs ``envs`` worker processes, each one BrowserGym MiniWoB environment doing ``episodes`` episodes
(task i % len(tasks), seed = worker * 1000 + i: the same pairs as webagent's side), acting out the
scripted plan (the JavaScript ``plan`` evaluated in the task's page: the same clicks and typing as
webagent's side), and prints one JSON line per episode (task, seed, reward, reset_s, step_s list) and,
per worker, its process tree's PSS.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path


def serve_miniwob() -> str:
    import miniwob

    root = Path(miniwob.__file__).resolve().parent / "html"

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/miniwob/"


def pss_kib(root: int) -> int:
    """PSS of ``root`` and its descendants (KiB)."""
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
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def action_code(planned: dict, scale: float) -> str:
    """BrowserGym's action for a planned one; its points are in pixels of its screenshot (``scale`` x CSS)."""
    kind, x, y = planned["kind"], planned["x"] * scale, planned["y"] * scale
    if kind == "click":
        return f"mouse_click({x:.1f}, {y:.1f})"
    if kind == "type":
        return f"mouse_click({x:.1f}, {y:.1f})\nkeyboard_type({json.dumps(planned['text'])})"
    if kind == "select":
        return f"select_option({json.dumps(planned['bid'])}, {json.dumps(planned['text'])})"
    raise ValueError(kind)


def worker(index: int, spec: dict, out: multiprocessing.Queue) -> None:
    os.setsid()  # its own process group: its browsers and driver end with it (killpg) past the deadline
    import browsergym.miniwob  # noqa: F401  (registers the tasks)
    import gymnasium as gym
    from browsergym.core.action.highlevel import HighLevelActionSet

    actions = HighLevelActionSet(subsets=["coord", "bid"], multiaction=True)
    peak = 0
    envs: dict[str, gym.Env] = {}
    try:
        for i in range(spec["episodes"]):
            name = spec["tasks"][i % len(spec["tasks"])]
            seed = index * 1000 + i
            env = envs.get(name)
            if env is None:
                env = envs[name] = gym.make(
                    f"browsergym/miniwob.{name}",
                    headless=True,
                    pw_chromium_kwargs={"executable_path": spec["chromium"]},
                    action_mapping=actions.to_python_code,
                )
            record: dict = {"task": name, "seed": seed, "worker": index}
            try:
                t = time.perf_counter()
                env.reset(seed=seed)
                record["reset_s"] = time.perf_counter() - t
                page = env.unwrapped.page
                plan = (
                    spec["wrong"]
                    if spec["every_wrong"] and i % spec["every_wrong"] == spec["every_wrong"] - 1
                    else spec["plan"]
                )
                planned = page.evaluate(plan)
                scale = float(getattr(page, "_bgym_scale_factor", 1.0))
                record["wrong"] = plan is spec["wrong"]
                steps, reward, done = [], 0.0, False
                for action in planned:
                    t = time.perf_counter()
                    _, reward, done, truncated, _ = env.step(action_code(action, scale))
                    steps.append(time.perf_counter() - t)
                    if done or truncated:
                        break
                record.update(reward=float(reward), terminated=bool(done), step_s=steps)
            except Exception as exc:  # an episode BrowserGym could not run: counted, not a reward
                record["error"] = f"{type(exc).__name__}: {exc}"
            peak = max(peak, pss_kib(os.getpid()))
            out.put(record)
    finally:
        for env in envs.values():
            with contextlib.suppress(Exception):
                env.close()
        out.put({"worker": index, "pss_kib": peak, "finished": True})


def use_system_chromium(chromium: str) -> None:
    """BrowserGym launches a second Chromium for its chat window without the launch options given to
    it: point Playwright's browser folder at one whose expected Chromium is the system's (no download)."""
    import playwright

    spec = json.loads((Path(playwright.__file__).parent / "driver" / "package" / "browsers.json").read_text())
    revision = next(b["revision"] for b in spec["browsers"] if b["name"] == "chromium")
    folder = Path(sys.prefix) / "ms-playwright"
    target = folder / f"chromium-{revision}" / "chrome-linux" / "chrome"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(chromium)
    os.environ["PLAYWRIGHT_BROWSERS_PATH"] = str(folder)


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    use_system_chromium(spec["chromium"])
    os.environ["MINIWOB_URL"] = serve_miniwob()
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue = ctx.Queue()
    t0 = time.perf_counter()
    procs = [ctx.Process(target=worker, args=(i, spec, out)) for i in range(spec["envs"])]
    for p in procs:
        p.start()
    finished, deadline = 0, time.monotonic() + spec.get("timeout_s", 3600)
    while finished < len(procs) and time.monotonic() < deadline:
        try:
            record = out.get(timeout=5)
        except Exception:
            if not any(p.is_alive() for p in procs):
                break
            continue
        if record.get("finished"):
            finished += 1
        print(json.dumps(record), flush=True)
    print(json.dumps({"wall_s": time.perf_counter() - t0, "workers_finished": finished}), flush=True)
    grace = time.monotonic() + 10
    for p in procs:
        p.join(timeout=max(0.0, grace - time.monotonic()))
    for p in procs:
        if p.is_alive() and p.pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)  # the worker, its Playwright driver and its Chromiums


if __name__ == "__main__":
    main()
