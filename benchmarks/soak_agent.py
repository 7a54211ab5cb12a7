"""The agent's side of the soak: ``BatchRunner`` with N sessions on the soak site, and what it recorded.

``agent`` runs the plans against the offline model server (its own process, not counted) under
the phase's deadline, with the faults asked for (``soak_faults``), and reads back its figures:
results and stop reasons, re-runs and their causes, admission, browser commands, model call times
(``model_call_times``: the agent's and the server's own split), and the recoveries and events of
its trajectories (``trajectory_counts``, by ``RECOVERY_KINDS`` and ``EVENT_KINDS``: adjust them
when the agent's wording changes); ``last_steps`` says where the hung tasks stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from procmeter import Meter, cpu_s, steady
from soak_faults import fault_events, freeze_chromium, kill_chromium
from soak_hangs import dump_tasks, report_stuck, wait_phase
from soak_report import open_sessions, percentile, pss_per_open_session
from soak_tasks import RESOLVER_RULE, Act, soak_script, task_tag
from throughput_agent import OfflineServer

from webagent.batch import BatchRunner, BatchStats, read_results
from webagent.batch.processes import auto_workers
from webagent.batch.stats import infra_cause
from webagent.families import DEFAULT_PROFILE
from webagent.tasks import load_tasks
from webagent.testing.offline import offline_config

__all__ = [
    "EVENT_KINDS",
    "RECOVERY_KINDS",
    "agent",
    "last_steps",
    "model_call_times",
    "summarize_admission",
    "trajectory_counts",
]

#: Counters read from each trajectory step: name -> test on one recovery line (or, for trajectories
#: without a ``recoveries`` field, one event line). Adjust here when the agent's wording changes.
RECOVERY_KINDS: dict[str, Callable[[str], bool]] = {
    "captures_resent": lambda t: "navigation committed" in t.lower(),
    "captures_recovered": lambda t: (
        "screenshot did not come" in t.lower()
        and any(w in t.lower() for w in ("again", "retaken", "recovered", "new devtools session"))
    ),
    "pages_replaced": lambda t: any(w in t.lower() for w in ("reopened", "replaced")),
}
#: Counters read from every step's events.
EVENT_KINDS: dict[str, Callable[[str], bool]] = {
    "loads_capped": lambda t: "still loading" in t,
    "tabs_followed": lambda t: "new tab opened" in t.lower(),
    "crashes": lambda t: "crash" in t.lower(),
}


def trajectory_counts(out: Path) -> dict[str, int]:
    counts = collections.Counter({k: 0 for k in (*RECOVERY_KINDS, *EVENT_KINDS, "failed_steps")})
    failures: collections.Counter[str] = collections.Counter()
    for path in out.glob("runs/*/attempt-*/trajectory.jsonl"):
        for line in path.read_text(encoding="utf-8").split("\n"):
            if not line.strip():
                continue
            try:
                step = json.loads(line)
            except ValueError:
                continue
            events = [str(e) for e in step.get("events", [])]
            lines = [str(r) for r in step["recoveries"]] if "recoveries" in step else events
            for name, test in RECOVERY_KINDS.items():
                counts[name] += sum(test(t) for t in lines)
            for name, test in EVENT_KINDS.items():
                counts[name] += sum(test(t) for t in events)
            outcome = str(step.get("outcome") or "")
            if outcome.startswith("failed") or step.get("error"):
                counts["failed_steps"] += 1
                failures[(step.get("error") or outcome)[:90]] += 1
    result: dict[str, Any] = dict(counts)
    result["top_failures"] = failures.most_common(3)
    return result


def last_steps(out: Path, ids: set[str]) -> list[str]:
    """For tasks with no result line: how many steps they recorded and the last one."""
    lines = []
    for task in sorted(ids):
        path = out / "runs" / task / "attempt-1" / "trajectory.jsonl"
        steps = [ln for ln in path.read_text().split("\n") if ln.strip()] if path.exists() else []
        if not steps:
            lines.append(f"{task}: no step recorded")
            continue
        last = json.loads(steps[-1])
        action = last.get("action") or {}
        lines.append(
            f"{task}: {len(steps)} steps recorded; the last: {action.get('action')} {action.get('element') or ''} "
            f"at {last.get('url')} -> {str(last.get('outcome'))[:80]}; the next step never ended"
        )
    return lines


async def agent(
    plans: list[list[Act]],
    urls: list[str],
    latency: float,
    workdir: Path,
    exclude: set[int],
    limits: tuple[float, float],
    children: list[subprocess.Popen[str]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    command_timeout_s, kill, guard = args.command_timeout, args.kill, args.guard
    deadline_s = limits[0]
    n, steps = len(plans), len(plans[0]) + 1
    server = OfflineServer(soak_script(plans, latency), workdir)
    children.append(server.proc)
    try:
        tasks_file = workdir / "tasks.jsonl"
        tasks_file.write_text(
            "".join(
                json.dumps(
                    {"id": f"soak-{i:04d}", "url": urls[i], "goal": f"{task_tag(i)} Browse the soak site, then answer."}
                )
                + "\n"
                for i in range(n)
            )
        )
        # The run's own time limit out of reach: a session stuck anywhere shows as hung, not as max_time.
        config = offline_config(
            server.url, DEFAULT_PROFILE, max_steps=steps + 2, max_time_s=max(3600.0, 2 * deadline_s)
        )
        config.browser.contexts_per_browser = max(math.ceil(n / max(args.browsers, 1)), 1)
        config.browser.recycle_after = 10_000
        config.browser.args = [RESOLVER_RULE]
        config.browser.executable_path = args.executable
        if command_timeout_s:
            config.browser.command_timeout_s = command_timeout_s
        if guard == "allow":  # every request judged, the allow-list's proxy net, hardened browsers
            config.browser.allowed_domains = ["127.0.0.1", "localhost"]
        for role in ("policy", "localizer", "validator"):
            config.role(role).timeout_s = 120
        out = workdir / "batch"
        ends: list[float] = []
        seen = [0]
        started = time.monotonic()

        def on_update(stats: Any) -> None:  # called after every step (and every finished task)
            if stats.steps > seen[0]:
                ends.extend([time.monotonic()] * (stats.steps - seen[0]))
                seen[0] = stats.steps

        workers = auto_workers(n) if args.workers == "auto" else int(args.workers)
        runner = BatchRunner(
            config,
            load_tasks(tasks_file, trusted=True),  # the benchmark's own tasks
            out,
            concurrency=n,
            on_update=on_update,
            admission=not args.no_admission,
            workers=workers,
        )
        server_cpu = cpu_s(server.proc.pid)
        stuck: list[tuple[str, int]] = []
        abandoned = False
        opened: list[tuple[float, int]] = []  # (time, sessions open in the agent's browser pool)

        async def count_open() -> None:
            while True:
                if runner.agent is not None or runner.processes is not None:
                    opened.append((time.monotonic(), runner.open_sessions))
                await asyncio.sleep(0.5)

        with Meter(exclude | {server.proc.pid}) as meter:
            counter = asyncio.create_task(count_open(), name="count-open")
            run = asyncio.create_task(runner.run(), name="batch")
            killer = (
                asyncio.create_task(
                    kill_chromium(kill, exclude | {server.proc.pid}, lambda: runner.stats.steps, args.seed),
                    name="kill",
                )
                if kill
                else None
            )
            freezer = (
                asyncio.create_task(freeze_chromium(args, exclude | {server.proc.pid}), name="freeze")
                if args.freeze
                else None
            )
            why = await wait_phase({run}, *limits, lambda: ends[-1] if ends else started)
            if why != "done":
                dump = workdir / "agent-tasks.txt"
                stuck = dump_tasks(dump, lambda _, stack: any("webagent/" in f for f in stack))
                report_stuck("agent", f"{why}: {runner.stats.in_flight} tasks in flight", dump, stuck)
                runner.stop()  # abandons the tasks in flight: no result line
                done, _ = await asyncio.wait({run}, timeout=60)
                if not done:
                    run.cancel()
                    done, _ = await asyncio.wait({run}, timeout=30)
                    abandoned = not done
            stats = runner.stats
            killed = await fault_events(killer)
            frozen = await fault_events(freezer)
            counter.cancel()
        server_cpu = cpu_s(server.proc.pid) - server_cpu
        server_timings = server.stats().get("timings", {})
    finally:
        server.stop()
    results = read_results(out)
    reasons = collections.Counter(r.stop_reason for r in results)
    hung_at = last_steps(out, {f"soak-{i:04d}" for i in range(n)} - {r.id for r in results})
    for line in hung_at[:10]:
        print(f"  hung: {line}", flush=True)
    totals = [t for t in stats.step_total_s if t > 0]
    rate, cpu, split = steady(ends, meter) if len(ends) >= 10 else (float("nan"), float("nan"), {})
    return {
        "sessions": n,
        "workers": workers,
        "finished": len(results),
        "succeeded": sum(r.success for r in results),
        "hung": n - len(results),
        "retried": sum(r.retried for r in results),
        "killed": killed,
        "frozen": frozen,
        "errors": sum(r.stop_reason == "error" for r in results),
        "infra_errors": sum(r.infrastructure for r in results),
        "infra_reruns": sum(r.infra_reruns for r in results),
        "rerun_reasons": dict(
            collections.Counter(x.reason for r in results for a in r.attempt_records for x in a.reruns)
        ),
        "infra_causes": collections.Counter(
            infra_cause(x.message)
            for r in results
            for a in r.attempt_records
            for x in a.reruns
            if x.reason == "infrastructure"
        ).most_common(3),
        "admission": summarize_admission(stats),
        "model_calls": model_call_times(results, server_timings),
        "commands": dict(stats.commands),
        "abandoned": abandoned,
        "stop_reasons": dict(reasons),
        "top_errors": collections.Counter(r.message[:120] for r in results if r.stop_reason == "error").most_common(3),
        "steps": stats.steps,
        "steps_per_s": rate,
        "cpu_per_step_ms": cpu,
        "split": {**split, "model server (not counted)": round(server_cpu / max(stats.steps, 1) * 1000, 1)},
        "pss_mib": meter.peak_kib / 1024 / max(n, 1),
        **pss_per_open_session(meter.pss, opened),
        **open_sessions(opened, ends),
        "step_p50_s": percentile(totals, 0.5),
        "step_p90_s": percentile(totals, 0.9),
        "counts": trajectory_counts(out),
        "stuck": stuck,
        "hung_at": hung_at,
        "out": str(out),
    }


def model_call_times(results: list[Any], server: dict[str, Any]) -> dict[str, Any]:
    """A model call's mean seconds as the agent saw it, by role, beside the offline server's own
    split of it (the body read and reply prepared before its scripted wait, its lateness after):
    what a call costs past ``--latency``, and which side of the wire it is on."""
    times: dict[str, Any] = {}
    for role in ("policy", "localizer", "validator"):
        usages = [r.usage.role(role) for r in results]
        calls = sum(u.calls for u in usages)
        if calls:
            times[f"{role} mean s"] = round(sum(u.latency_s for u in usages) / calls, 3)
    for name, q in server.items():
        times[f"server {name.removesuffix('_s')} mean / p90 s"] = f"{q['mean']:.3f} / {q['p90']:.3f}"
    return times


def summarize_admission(stats: BatchStats) -> dict[str, Any]:
    a = stats.admission
    if a is None:
        return {}
    return {
        "peak_running": a.peak_running,
        "limit": f"{a.lowest}-{a.highest} of {a.ceiling}",
        "decreases": a.decreases,
        "held_back_s": a.held_back_s,
    }
