"""``webagent session``: a command's own overhead and the memory of many sessions in one process.

Overhead: the wall time of ``webagent session list`` as a shell runs it (a new Python process: the
client's start, its imports, one socket round to the background process), of the socket round
alone (``webagent.shell.client.call`` from a running process), and of ``snap`` on a small page
(the round plus one page read), each the median of ``--rounds``. Memory: ``--sessions`` sessions
open at once in one background process on the local shop page; the PSS of the process and all its
children (Chromium's) with one session and with all, and per session, to set beside the PSS a
session of ``benchmarks/throughput.py`` (docs/benchmarks.md).

    python benchmarks/shell_overhead.py --rounds 10 --sessions 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from webagent.shell.client import call
from webagent.shell.protocol import Request
from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer
from webagent.testing.threaded import LoopThread

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from procmeter import process_tree, pss_kib  # noqa: E402

from tests.shell.site import shop  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=20)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="wa-bench-", dir="/tmp"))
    os.chmod(directory, 0o700)
    os.environ["WEBAGENT_SHELL_DIR"] = str(directory)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    thread = LoopThread("bench-model")
    server = FakeModelServer({"tasks": []})
    thread.start(server.__aenter__)
    profile = next(iter(PROFILE_MODELS))
    flags = ["--localizer-profile", profile, "--model", PROFILE_MODELS[profile], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", f"{server.url}/{role}/v1"]
    flags += ["--private-network", "allow"]

    def cli(*words: str) -> float:
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "webagent", "session", *words], env=env, capture_output=True, text=True
        )
        if done.returncode not in (0, 3):
            raise SystemExit(f"{words[:2]} failed: {done.stderr}")
        return time.perf_counter() - start

    try:
        with shop() as url:
            cli("--session", "s0", "start", "--url", f"{url}/login", *flags)
            pid = int((directory / "daemon.lock").read_text())
            one = sum(pss_kib(p) for p in process_tree(pid, set()))
            python = statistics.median([cli("list") for _ in range(args.rounds)])
            rounds = []
            for _ in range(args.rounds):
                start = time.perf_counter()
                call(Request(command="list"))
                rounds.append(time.perf_counter() - start)
            snap = statistics.median([cli("--session", "s0", "snap") for _ in range(args.rounds)])
            bare_runs = []
            for _ in range(3):
                start = time.perf_counter()
                subprocess.run([sys.executable, "-c", "import webagent.shell.cli"], env=env, check=True)
                bare_runs.append(time.perf_counter() - start)
            bare = statistics.median(bare_runs)
            for i in range(1, args.sessions):
                cli("--session", f"s{i}", "start", "--url", f"{url}/login", *flags)
            time.sleep(2)
            processes = process_tree(pid, set())
            many = sum(pss_kib(p) for p in processes)
            cli("close", "--all")
    finally:
        thread.stop(lambda: server.__aexit__(None, None, None))
    print(
        f"command overhead, 'webagent session list' from a shell: median {python * 1000:.0f} ms ({args.rounds} rounds)"
    )
    print(f"  of which starting Python and importing the client: ~{bare * 1000:.0f} ms")
    print(f"socket round alone (client.call from a running process): median {statistics.median(rounds) * 1000:.1f} ms")
    print(f"'webagent session snap' on a small page: median {snap * 1000:.0f} ms")
    print(
        f"PSS, background process and its Chromium: 1 session {one / 1024:.0f} MiB; {args.sessions} sessions "
        f"{many / 1024:.0f} MiB in {len(processes)} processes; {many / 1024 / args.sessions:.0f} MiB a session "
        f"({(many - one) / 1024 / max(1, args.sessions - 1):.0f} MiB each past the first)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
