"""Fault suite: the bundled local tasks through ``BatchRunner``, clean and then under injected faults.

1. A clean run: ``webagent/testing/data/local.jsonl`` (``--copies`` of each task) against the offline model server
   (``webagent/testing/data/scripts/local.json``) and the local sites, ``--concurrency`` sessions at once.
2. The same batch again, in a fresh output directory, with the model server failing: HTTP 500,
   429 with ``Retry-After``, malformed and schema-violating replies, replies slower than the
   client's timeout and dropped connections, at the rates below (spread evenly over the requests,
   each kind at a phase set by ``--seed``); and Chromium killed once (SIGKILL, the browser process
   this run launched) when about half the clean run's steps are done.

It prints the tasks, the faults injected by kind, the tasks passed (must equal the clean run's),
the results lost (tasks without exactly one line in results.jsonl; must be 0) and the secrets
leaked (must be 0): a canary is the API key of every role (and, where the agent supports
secrets, a secret the form task types), and every byte written under the output directories and
every request body the model server received is searched for it (also URL-, JSON- and
HTML-encoded). The API key itself travels in the Authorization header, where it belongs; it must
appear nowhere else. The exit status is 1 when a figure is off.

    python benchmarks/faults.py --copies 4 --concurrency 5 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import html
import json
import os
import secrets
import signal
import sys
import tempfile
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

from aiohttp import web

from webagent.batch import BatchRunner, BatchStats, read_results
from webagent.config import ROLES, AgentConfig
from webagent.families import DEFAULT_PROFILE
from webagent.tasks import TaskSpec
from webagent.testing.offline import load_local_tasks, offline_config
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer, data_dir

#: Fault kind -> share of the model requests it hits.
FAULT_RATES = {"500": 0.10, "429": 0.05, "malformed": 0.05, "schema": 0.02, "slow": 0.015, "disconnect": 0.01}
TIMEOUT_S = 1.5  # the client's timeout; a "slow" reply comes after SLOW_S
SLOW_S = 2.5
RETRY_AFTER_S = 1
MAX_RETRIES = 6  # P(7 failures in a row) at ~19% per request: ~1e-5 per call
LATENCY_S = {"policy": 0.05, "localizer": 0.02, "validator": 0.02}
SECRET_NAME = "FAULT_CANARY"


# -- the model server, scanning what it receives -----------------------------------------------------
class ScanningServer(FakeModelServer):
    """The offline model server, counting request bodies that hold a canary."""

    def __init__(self, script: dict[str, Any], canaries: list[str]) -> None:
        super().__init__(script, record=False)
        self.patterns = [form.encode() for canary in canaries for form in encodings(canary)]
        self.bodies = 0
        self.leaks = 0

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()  # kept by aiohttp: the server reads the same body again
        self.bodies += 1
        self.leaks += any(p in raw for p in self.patterns)
        return await super()._chat(request)


def encodings(value: str) -> set[str]:
    return {
        value,
        urllib.parse.quote(value, safe=""),
        urllib.parse.quote_plus(value),
        json.dumps(value)[1:-1],
        html.escape(value),
    }


def scan_dir(root: Path, canaries: list[str]) -> list[str]:
    """Files under ``root`` holding a canary in any encoding."""
    patterns = [form.encode() for canary in canaries for form in encodings(canary)]
    return [
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and any(x in p.read_bytes() for x in patterns)
    ]


# -- Chromium -------------------------------------------------------------------------------------------
def _proc_children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def _descendants(root: int) -> list[int]:
    tree, out, todo = _proc_children(), [], list(_proc_children().get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(tree.get(pid, []))
    return out


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def chromium_mains() -> list[int]:
    """Browser processes started by this process (Chromium whose parent is not Chromium)."""
    mine = _descendants(os.getpid())
    chromium = {p for p in mine if b"chrom" in _cmdline(p).split(b"\0", 1)[0]}
    tree = _proc_children()
    parents = {child: parent for parent, kids in tree.items() for child in kids}
    return sorted(p for p in chromium if parents.get(p) not in chromium)


class Killer:
    """Kills the first Chromium this run launched once ``at_steps`` steps are done."""

    def __init__(self, at_steps: int) -> None:
        self.at_steps = at_steps
        self.killed: int | None = None
        self.helpers: list[tuple[int, bytes]] = []
        self.at_done = 0

    def __call__(self, stats: BatchStats) -> None:
        if self.killed is None and stats.steps >= self.at_steps and stats.in_flight:
            mains = chromium_mains()
            if mains:
                pid = mains[0]
                self.helpers = [(p, _cmdline(p)) for p in _descendants(pid)]
                os.kill(pid, signal.SIGKILL)
                self.killed, self.at_done = pid, stats.done

    def cleanup(self) -> None:
        """End helpers of the killed browser still running (the same processes, by command line)."""
        for pid, args in self.helpers:
            if _cmdline(pid) == args:
                with contextlib.suppress(ProcessLookupError):  # it may exit between the check and the kill
                    os.kill(pid, signal.SIGKILL)


# -- one batch --------------------------------------------------------------------------------------------
def build_tasks(site: SiteServer, copies: int) -> list[TaskSpec]:
    local = load_local_tasks(site.url)
    return [
        TaskSpec(id=f"{task_id}-{k}", url=task["url"], goal=task["goal"])
        for k in range(1, copies + 1)
        for task_id, task in local.items()
    ]


def build_script(faults: bool, seed: int, use_secret: bool) -> dict[str, Any]:
    script: dict[str, Any] = json.loads((data_dir() / "scripts" / "local.json").read_text())
    script["latency_s"] = LATENCY_S
    if use_secret:  # the form task types its email address from a secret
        form = next(t for t in script["tasks"] if t["id"] == "form-register")
        for rule in form["policy"]:
            if rule["action"].get("content") == "ada@example.com":
                rule["action"]["content"] = "{{" + SECRET_NAME + "}}"
    if faults:
        script |= {
            "fault_rates": FAULT_RATES,
            "fault_schedule": "even",
            "seed": seed,
            "retry_after_s": RETRY_AFTER_S,
            "slow_s": SLOW_S,
            "fault_repairs": False,  # a scripted policy cannot adapt to a step lost to two bad replies
        }
    return script


def build_config(server: FakeModelServer, api_key: str, secret: str | None) -> AgentConfig:
    config = offline_config(server.url, DEFAULT_PROFILE, max_steps=12)
    for role in ROLES:
        config.role(role).api_key = api_key
        config.role(role).timeout_s = TIMEOUT_S
        config.role(role).max_retries = MAX_RETRIES
    if secret is not None:
        config = config.model_validate({**config.model_dump(), "secrets": {SECRET_NAME: secret}})
    return config


async def run_batch(
    site: SiteServer,
    out: Path,
    args: argparse.Namespace,
    canaries: dict[str, str],
    *,
    faults: bool,
    kill_at_steps: int = 0,
) -> dict[str, Any]:
    use_secret = "secret" in canaries
    server = ScanningServer(build_script(faults, args.seed, use_secret), list(canaries.values()))
    server.start_in_thread()
    killer = Killer(kill_at_steps) if kill_at_steps else None
    tasks = build_tasks(site, args.copies)
    try:
        config = build_config(server, canaries["api_key"], canaries.get("secret"))
        runner = BatchRunner(config, tasks, out, concurrency=args.concurrency, on_update=killer)
        started = time.monotonic()
        stats = await runner.run()
        wall = time.monotonic() - started
    finally:
        server.stop_thread()
        if killer is not None:
            await asyncio.sleep(0.5)  # helpers of the killed browser exit on their own...
            killer.cleanup()  # ... any left are ended here
    rows = read_results(out)
    lines = Counter(r.id for r in rows)
    usage = {
        key: sum(getattr(r.usage.role(role), key) for r in rows for role in ROLES)
        for key in ("retries", "repairs", "failures")
    }
    return {
        "tasks": len(tasks),
        "passed": sum(r.success for r in rows),
        "lost": sum(1 for t in tasks if lines[t.id] != 1),
        "retried_after_crash": sum(r.retried for r in rows),
        "steps": stats.steps,
        "wall_s": round(wall, 1),
        "faults": {k: v for k, v in server.fault_counts.items() if v},
        "model_requests": server.bodies,
        "usage": usage,
        "chromium_killed": killer is not None and killer.killed is not None,
        "killed_after_tasks": killer.at_done if killer else None,
        "leaked_requests": server.leaks,
        "leaked_files": scan_dir(out, list(canaries.values())),
        "failed": sorted(f"{r.id}: {r.message}" for r in rows if not r.success),
    }


async def main_async(args: argparse.Namespace) -> int:
    canaries = {"api_key": "sk-canary-" + secrets.token_hex(12)}
    if "secrets" in AgentConfig.model_fields:  # the agent can type secrets: plant one the form uses
        canaries["secret"] = f"canary-{secrets.token_hex(6)}@example.com"
    root = Path(args.output or tempfile.mkdtemp(prefix="webagent-faults-"))
    with SiteServer() as site:
        clean = await run_batch(site, root / "clean", args, canaries, faults=False)
        faulty = await run_batch(
            site, root / "faults", args, canaries, faults=True, kill_at_steps=max(1, clean["steps"] // 2)
        )
    leaked = (
        clean["leaked_requests"] + faulty["leaked_requests"] + len(clean["leaked_files"]) + len(faulty["leaked_files"])
    )
    report = {
        "clean": clean,
        "faults": faulty,
        "secrets_leaked": leaked,
        "canaries": sorted(canaries),
        "output": str(root),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(clean, faulty, leaked, sorted(canaries), root)
    ok = (
        clean["passed"] == clean["tasks"]  # a suite that fails clean proves nothing of the faults
        and faulty["passed"] == clean["passed"]
        and faulty["lost"] == 0
        and clean["lost"] == 0
        and leaked == 0
        and faulty["chromium_killed"]
    )
    return 0 if ok else 1


def print_report(clean: dict[str, Any], faulty: dict[str, Any], leaked: int, canaries: list[str], root: Path) -> None:
    injected = dict(faulty["faults"])
    injected["chromium kill"] = int(faulty["chromium_killed"])
    print(f"tasks:                 {faulty['tasks']} (local tasks x copies)")
    print(f"model requests:        {faulty['model_requests']} (clean run: {clean['model_requests']})")
    share = {
        k: f" ({v / max(faulty['model_requests'], 1):.1%})" if k in FAULT_RATES else "" for k, v in injected.items()
    }
    print("faults injected:       " + ", ".join(f"{k} {v}{share[k]}" for k, v in injected.items()))
    print(
        "absorbed by the agent: "
        + ", ".join(f"{k} {v}" for k, v in faulty["usage"].items())
        + f", tasks re-run after the browser died {faulty['retried_after_crash']}"
        + f" (killed after {faulty['killed_after_tasks']} tasks had finished)"
    )
    print(f"tasks passed:          {faulty['passed']} (clean run: {clean['passed']})")
    print(f"results lost:          {faulty['lost']} (clean run: {clean['lost']})")
    print(
        f"secrets leaked:        {leaked} (canaries: {', '.join(canaries)}; scanned every output byte and request body)"
    )
    print(f"wall time:             {faulty['wall_s']} s (clean run: {clean['wall_s']} s)")
    for line in faulty["failed"]:
        print(f"  failed: {line}")
    print(f"output:                {root}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=4, help="copies of each local task (default 4)")
    parser.add_argument("--concurrency", type=int, default=5, help="sessions at once (default 5)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the fault draws (default 1)")
    parser.add_argument("--output", help="directory for the two batches (default: a new temporary one)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    sys.exit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
