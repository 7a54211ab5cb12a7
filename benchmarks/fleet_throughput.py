"""Steps/s of one batch on one local browser pool and on a fleet of two local browser hosts.

The issue's floor: "steps/s at 100 sessions spread over 2 local hosts within noise of one local
browser pool". The same batch of agent sessions (``BatchRunner`` against the offline model server,
answering after ``--latency`` seconds a call, on the local counter page of ``throughput.py``: S
steps a task, S-1 clicks and an answer) runs

- ``local``: on the browser pool of this process (``[browser] provider = "local"``: one Chromium
  launched for the batch, as ``webagent batch`` does on one machine);
- ``fleet``: on two browser hosts (``[browser] provider = "hosts"``, two ``[[browser.hosts]]``
  of ``ceil(N / 2)`` sessions each), two Chromium processes this script starts with
  ``--remote-debugging-port`` on 127.0.0.1 (the same binary and flags the local pool launches,
  see ``find_chromium``), started before the batch and ended by PID after it.

The two alternate, ``--rounds`` times (local first in even rounds, the fleet first in odd ones),
so both see the same load. Per run it prints the batch's steps/s over its whole wall time
(``BatchRunner.run``: browser connections, contexts, steps, closes) and over the middle 80 % of
its steps (steady state), the tasks that succeeded, and for the fleet the sessions each host got
(``summary.json``'s ``run.browser_hosts``); then the medians, their ratio fleet/local, each
round's ratio, each mode's spread (max - min over the rounds), and the machine's load before and
after.

    python benchmarks/fleet_throughput.py --sessions 100 --rounds 3 --steps 10 --latency 1.0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's root

from benchmarks.throughput import OfflineServer, bench_script, write_tasks
from webagent.batch import BatchRunner, read_results
from webagent.batch.summary import hosts_summary
from webagent.browser.devtools import free_port
from webagent.browser.launcher import browser_args, find_chromium
from webagent.config import AgentConfig, BrowserConfig, BrowserHost
from webagent.families import DEFAULT_PROFILE
from webagent.tasks import load_tasks
from webagent.testing.offline import offline_config

HOSTS = 2


def end(proc: subprocess.Popen[Any]) -> None:
    """End a process this script started (and its session's helpers, Chromium's), by its PID."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@contextlib.contextmanager
def chromium_hosts(config: BrowserConfig, count: int, workdir: Path) -> Iterator[list[str]]:
    """``count`` Chromium processes with a remote-debugging port on 127.0.0.1 (each in its own
    session, ended by PID on the way out); their http:// endpoints. The binary and flags are the
    ones the local pool launches for the same (unguarded, headless) sessions."""
    binary = find_chromium(config) or "/usr/lib/chromium/chromium"
    procs: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for i in range(count):
            port = free_port()
            args = [
                binary,
                "--headless",
                *browser_args(config.args),
                "--remote-debugging-address=127.0.0.1",
                f"--remote-debugging-port={port}",
                f"--user-data-dir={workdir / f'host-{i}-{time.monotonic_ns()}'}",
                "about:blank",
            ]
            log = (workdir / f"host-{i}.log").open("ab")
            procs.append(subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True))
            log.close()
            urls.append(f"http://127.0.0.1:{port}")
        for url in urls:  # each answers /json/version before the batch starts
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(url + "/json/version", timeout=5):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the Chromium at {url} did not answer within 60 s") from None
                    time.sleep(0.1)
        yield urls
    finally:
        for proc in procs:
            end(proc)


def batch_config(server_url: str, n: int, steps: int, hosts: list[str]) -> AgentConfig:
    """The batch's config, on the local pool (``hosts`` empty) or on the hosts."""
    config = offline_config(server_url, DEFAULT_PROFILE, max_steps=steps + 2)
    config.browser.contexts_per_browser = max(n, 1)
    config.browser.recycle_after = 10_000
    for role in ("policy", "localizer", "validator"):
        config.role(role).timeout_s = 120
    if hosts:
        share = math.ceil(n / len(hosts))
        fleet = {
            "provider": "hosts",
            "hosts": [BrowserHost(url=u, sessions=share, name=f"host-{i}").model_dump() for i, u in enumerate(hosts)],
        }
        config.browser = BrowserConfig.model_validate({**config.browser.model_dump(exclude_unset=True), **fleet})
    return config


async def run_batch(url: str, n: int, steps: int, latency: float, workdir: Path, mode: str) -> dict[str, Any]:
    """One batch of ``n`` sessions in ``mode`` (local or fleet); its figures."""
    await asyncio.to_thread(workdir.mkdir, parents=True)
    server = OfflineServer(bench_script(steps, latency), workdir)
    try:
        tasks_file = write_tasks(workdir / "tasks.jsonl", url, n)
        base = offline_config(server.url, DEFAULT_PROFILE).browser
        with contextlib.ExitStack() as stack:
            hosts = stack.enter_context(chromium_hosts(base, HOSTS, workdir)) if mode == "fleet" else []
            config = batch_config(server.url, n, steps, hosts)
            ends: list[float] = []
            seen = [0]

            def on_update(stats: Any) -> None:  # after every step and every finished task
                if stats.steps > seen[0]:
                    ends.extend([time.monotonic()] * (stats.steps - seen[0]))
                    seen[0] = stats.steps

            out = workdir / "batch"
            runner = BatchRunner(config, load_tasks(tasks_file, trusted=True), out, concurrency=n, on_update=on_update)
            start = time.monotonic()
            stats = await runner.run()
            wall = time.monotonic() - start
    finally:
        server.stop()
    results = read_results(out)
    ends.sort()
    lo, hi = ends[len(ends) // 10] if ends else 0.0, ends[(len(ends) * 9) // 10] if ends else 0.0
    middle = (len(ends) * 9) // 10 - len(ends) // 10
    return {
        "mode": mode,
        "steps": stats.steps,
        "wall_s": wall,
        "steps_per_s": stats.steps / wall if wall > 0 else float("nan"),
        "steady_steps_per_s": middle / (hi - lo) if hi > lo and middle > 0 else float("nan"),
        "succeeded": sum(r.success for r in results),
        "lines": len(results),
        "hosts": {name: h.sessions or 0 for name, h in hosts_summary(stats).items()},
    }


def load() -> str:
    """The machine's load averages and cores, as the figures are read against them."""
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} (1 min) {five:.1f} (5 min) on {os.cpu_count()} cores"


async def measure(args: argparse.Namespace, url: str, workdir: Path) -> list[dict[str, Any]]:
    runs = []
    for r in range(args.rounds):
        order = ("local", "fleet") if r % 2 == 0 else ("fleet", "local")
        for mode in order:
            row = await run_batch(url, args.sessions, args.steps, args.latency, workdir / f"round-{r}-{mode}", mode)
            row["round"] = r
            runs.append(row)
            print(f"  round {r} {mode}: {row['steps_per_s']:.2f} steps/s ({load()})", file=sys.stderr, flush=True)
    return runs


def report(args: argparse.Namespace, runs: list[dict[str, Any]], before: str, after: str) -> None:
    print(
        f"{args.sessions} sessions, {args.steps} steps a task, model latency {args.latency:g} s, {args.rounds} rounds"
    )
    print(f"before: {before}; after: {after}")
    print()
    print("| round | mode | steps | wall s | steps/s | steady steps/s | succeeded | lines | sessions per host |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in runs:
        hosts = " ".join(f"{k}={v}" for k, v in row["hosts"].items()) or "-"
        print(
            f"| {row['round']} | {row['mode']} | {row['steps']} | {row['wall_s']:.1f} | {row['steps_per_s']:.2f} "
            f"| {row['steady_steps_per_s']:.2f} | {row['succeeded']}/{args.sessions} | {row['lines']} | {hosts} |"
        )
    print()
    local = [r for r in runs if r["mode"] == "local"]
    fleet = [r for r in runs if r["mode"] == "fleet"]
    med = {k: statistics.median(r["steps_per_s"] for r in rs) for k, rs in (("local", local), ("fleet", fleet))}
    steady = {
        k: statistics.median(r["steady_steps_per_s"] for r in rs) for k, rs in (("local", local), ("fleet", fleet))
    }
    spread = {
        k: max(r["steps_per_s"] for r in rs) - min(r["steps_per_s"] for r in rs)
        for k, rs in (("local", local), ("fleet", fleet))
    }
    # each round's fleet/local (the two ran back to back, under nearly the same load)
    paired = [f["steps_per_s"] / x["steps_per_s"] for f, x in zip(fleet, local, strict=True)]
    print(
        "| N | local steps/s | fleet steps/s | fleet/local | steady fleet/local | fleet/local by round "
        "| local spread | fleet spread |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.sessions} | {med['local']:.2f} | {med['fleet']:.2f} | {med['fleet'] / med['local']:.3f} "
        f"| {steady['fleet'] / steady['local']:.3f} | {' '.join(f'{p:.2f}' for p in paired)} "
        f"| {spread['local']:.2f} | {spread['fleet']:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100, help="sessions (tasks, all at once) per batch")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each one local batch and one fleet batch")
    parser.add_argument("--steps", type=int, default=10, help="steps per task")
    parser.add_argument("--latency", type=float, default=1.0, help="model latency per call, seconds")
    args = parser.parse_args()
    if args.sessions < 1 or args.rounds < 1 or args.steps < 1:
        parser.error("--sessions, --rounds and --steps must be at least 1")
    sites = subprocess.Popen(
        [sys.executable, "-m", "webagent.testing.sites"], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert sites.stdout is not None
        url = sites.stdout.readline().strip().rsplit(" ", 1)[-1] + "/bench/"
        before = load()
        with tempfile.TemporaryDirectory(prefix="webagent-fleet-bench-") as tmp:
            runs = asyncio.run(measure(args, url, Path(tmp)))
        after = load()
    finally:
        end(sites)
    report(args, runs, before, after)


if __name__ == "__main__":
    main()
