"""What a node's browser actor costs beside its Chromium (``webagent batch --ray``, ``batch/nodebrowser.py``).

A node's actors share one Chromium only where that saves memory: each Chromium not launched saves
~61 MiB with a few sessions open (``benchmarks/node_pool.py``), and the actor that launches the
shared one is a Ray worker process (with webagent imported) and a Playwright driver of its own.
This starts a local Ray instance, one ``NodeBrowser`` actor, launches its Chromium, and prints the
PSS of the actor's process, of its Playwright driver, and of its Chromium (idle), in MiB.
``nodebrowser.NODE_ACTOR_MIB`` is the first two added up. PSS is load-independent; no timing is taken.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled python benchmarks/node_actor.py --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import ray
from procmeter import process_tree, pss_kib  # benchmarks/, beside this script

from webagent.batch.nodebrowser import NodeBrowser
from webagent.batch.worker import config_payload
from webagent.config import AgentConfig


def _program(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    return ""


def measure() -> tuple[int, int, int]:
    """PSS (KiB) of one node browser actor's process, its Playwright driver, its Chromium."""
    handle = ray.remote(num_cpus=0)(NodeBrowser).remote(config_payload(AgentConfig()), False)
    try:
        _, error = ray.get(handle.start.remote())
        if error is not None:
            raise SystemExit(error)
        time.sleep(3.0)  # the Chromium's helpers started
        pid = ray.get(handle.pid.remote())
        below = process_tree(pid, set())[1:]
        chromium = sum(pss_kib(p) for p in below if "chrom" in Path(_program(p)).name)
        driver = sum(pss_kib(p) for p in below if "chrom" not in Path(_program(p)).name)
        return pss_kib(pid), driver, chromium
    finally:
        with contextlib.suppress(Exception):
            ray.get(handle.aclose.remote(), timeout=30)
        ray.kill(handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        rounds = [measure() for _ in range(args.rounds)]
    finally:
        ray.shutdown()
    for name, i in (("actor process", 0), ("its Playwright driver", 1), ("its Chromium, idle", 2)):
        values = [r[i] / 1024 for r in rounds]
        print(f"{name:24} {statistics.median(values):6.0f} MiB  ({', '.join(f'{v:.0f}' for v in values)})")
    beside = [(r[0] + r[1]) / 1024 for r in rounds]
    print(f"{'beside its Chromium':24} {statistics.median(beside):6.0f} MiB")


if __name__ == "__main__":
    main()
