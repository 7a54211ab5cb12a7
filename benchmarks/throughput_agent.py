"""The agent's side of ``throughput.py``: ``BatchRunner`` with N sessions on the counter page.

``agent`` runs N tasks of S steps (S-1 clicks on the counter button, then an answer the validator
accepts) against the offline model server (``OfflineServer``: its own process and session, not
counted) answering after a fixed latency per call, and measures the batch with ``procmeter.Meter``:
steps/s and CPU per step over the middle 80 % of steps, the whole batch from launch to last close
(``wholefloor.whole_figures``), DevTools commands per step, memory per session and the harness's
overhead per step. ``prompt_tokens`` and ``click_step_seconds`` read its trajectories.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from procmeter import Meter, cpu_s, steady
from wholefloor import BUTTON, count_cdp, deadlines, whole_figures

from webagent.batch import BatchRunner, read_results
from webagent.families import DEFAULT_PROFILE
from webagent.tasks import load_tasks
from webagent.testing.offline import offline_config

__all__ = [
    "POLICY_FAMILY",
    "OfflineServer",
    "agent",
    "bench_script",
    "click_step_seconds",
    "prompt_tokens",
    "write_tasks",
]

#: The agent's [policy] family (--policy-family; None: the localizer profile's).
POLICY_FAMILY: list[str | None] = [None]


def bench_script(steps: int, latency: float) -> dict[str, Any]:
    return {
        "latency_s": latency,
        "elements": {"blue counter button": list(BUTTON)},
        "tasks": [
            {
                "id": "bench",
                "match": "Click the blue counter button",
                "policy": [
                    {"when": {"final": True}, "action": {"action": "answer", "content": "done"}},
                    {"when": {"step": steps}, "action": {"action": "answer", "content": "done"}},
                    {
                        "note": "The counter goes up by one per click; keep clicking.",
                        "thought": "Click the button again.",
                        "action": {"action": "click_element", "element": "blue counter button"},
                    },
                ],
                "validator": {"accept": ["done"]},
            }
        ],
    }


class OfflineServer:
    """The offline model server in its own process, so its CPU is not the harness's, and in its own
    session: it stands for a model server on another machine, so where the kernel shares the CPU
    out by session first (``/proc/sys/kernel/sched_autogroup_enabled``) it must not take its share
    from the benchmark's session, which holds the agent, its Playwright driver and any ``--hog``
    (the bare loop it is compared with runs no model server there)."""

    def __init__(self, script: dict[str, Any], workdir: Path) -> None:
        path = workdir / "script.json"
        path.write_text(json.dumps(script))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "webagent.testing.server", "--script", str(path), "--no-record"],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip().rsplit(" ", 1)[-1]

    def stats(self) -> dict[str, Any]:
        """The server's ``/_stats`` (requests, tokens, and its own answer times); {} if it does not answer."""
        try:
            with urllib.request.urlopen(self.url + "/_stats", timeout=10) as response:
                stats: dict[str, Any] = json.loads(response.read())
                return stats
        except (OSError, ValueError):
            return {}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def write_tasks(path: Path, url: str, n: int) -> Path:
    """The benchmark's task file: ``n`` counter tasks on ``url``."""
    goal = "Click the blue counter button, then answer done ({})"
    path.write_text("".join(json.dumps({"id": f"s{i}", "url": url, "goal": goal.format(i)}) + "\n" for i in range(n)))
    return path


async def agent(
    url: str, n: int, steps: int, latency: float, workdir: Path, exclude: set[int], grounding: str | None = None
) -> dict[str, Any]:
    server = OfflineServer(bench_script(steps, latency), workdir)
    try:
        tasks_file = write_tasks(workdir / f"tasks-{n}.jsonl", url, n)
        config = offline_config(server.url, DEFAULT_PROFILE, family=POLICY_FAMILY[0], max_steps=steps + 2)
        config.agent.grounding = grounding  # type: ignore[assignment]
        config.browser.contexts_per_browser = max(n, 1)
        config.browser.recycle_after = 10_000
        for role in ("policy", "localizer", "validator"):
            config.role(role).timeout_s = 120
        out = workdir / f"batch-{n}-{steps}-{latency}-{grounding or 'default'}"
        ends: list[float] = []
        seen = [0]

        def on_update(stats: Any) -> None:  # called after every step (and every finished task)
            if stats.steps > seen[0]:
                ends.extend([time.monotonic()] * (stats.steps - seen[0]))
                seen[0] = stats.steps

        runner = BatchRunner(config, load_tasks(tasks_file, trusted=True), out, concurrency=n, on_update=on_update)
        server_cpu = cpu_s(server.proc.pid)
        with Meter(exclude | {server.proc.pid}) as meter, count_cdp() as cdp:
            start = time.monotonic()  # the whole batch: launch, contexts, steps, closes
            stats = await runner.run()
            end = time.monotonic()
        server_cpu = cpu_s(server.proc.pid) - server_cpu
    finally:
        server.stop()
    results = read_results(out)
    overhead = [t - m for t, m in zip(stats.step_total_s, stats.step_model_s, strict=True)]
    model = statistics.mean(stats.step_model_s) if stats.step_model_s else 0.0
    rate, cpu, split = steady(ends, meter)
    succeeded = sum(r.success for r in results)
    whole = {
        "start": start,
        "end": end,
        "steps": stats.steps,
        "tasks": n,
        "succeeded": succeeded,
        "deadlines": deadlines(runner.load),
        "peak_sessions": runner.admission.peak_running,
    }
    return {
        "whole": whole_figures(whole, meter),
        "cdp": cdp.per_step(stats.steps),
        "tokens_per_task": stats.tokens / max(n, 1),
        "split": {
            **split,
            "model server (not counted)": round(server_cpu / max(stats.steps, 1) * 1000, 1),
        },
        "steps": stats.steps,
        "steps_per_s": rate,
        "cpu_per_step_ms": cpu,
        # per session open at once: admission may hold fewer than n open (at 500, on 2 cores)
        "pss_mib": meter.peak_kib / 1024 / max(runner.admission.peak_running or n, 1),
        "overhead_ms_p50": statistics.median(overhead) * 1000 if overhead else 0.0,
        "model_s_per_step": model,
        "lost": n - sum(1 for r in results if r.stop_reason != "error"),  # no line, or an error line
        "succeeded": succeeded,
        "click_step_s": click_step_seconds(out),
        "out": out,
    }


def click_step_seconds(out: Path) -> float:
    """The median wall time of the runs' click steps (observe to the click done)."""
    times = [
        step["timings"]["total_s"]
        for trajectory in out.rglob("trajectory.jsonl")
        for step in map(json.loads, trajectory.read_text().splitlines())
        if (step.get("action") or {}).get("action") == "click_element" and not step.get("error")
    ]
    return statistics.median(times) if times else float("nan")


def prompt_tokens(out: Path) -> dict[int, int]:
    """Policy prompt tokens per step of the first task's trajectory."""
    tokens: dict[int, int] = {}
    run = next(out.glob("runs/*/attempt-1"))
    for line in (run / "trajectory.jsonl").read_text().splitlines():
        step = json.loads(line)
        for call in step["calls"]:
            if call["role"] == "policy":
                tokens[step["index"]] = call["usage"]["prompt_tokens"]
    return tokens
