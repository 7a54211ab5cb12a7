"""Throughput benchmark: the real agent through ``batch`` vs. the bare-browser floor, side by side.

For each N it runs, on the same local page (a counter button: every click costs the same):

1. the floor: a plain Playwright loop over N contexts of one Chromium, each doing S x (screenshot at the
   model's size + click on the button), timed from context creation to context close;
2. the agent: ``BatchRunner`` with N concurrent sessions against the offline model server (a separate
   process, not counted) answering after a fixed latency per call; each task is S steps (S-1 clicks + an
   answer checked by the validator), timed the same way.

The floor is the whole-batch one by default (``--floor whole``, ``wholefloor.py``): a fresh
context per task, the agent's model latency per step, timed from the launch to the last close with
the same process-tree CPU instrument as the agent; ``--floor steady`` is the steady-state loop
above (its middle 80 % of steps), ``--floor steady,whole`` runs both. Against the whole-batch
floor it prints steps/s, CPU per step, DevTools commands (``Runtime.evaluate`` and all) per step of
both sides, and per N the agent's tasks per hour, success rate, model tokens per task and cost per
task at ``--price-per-mtok``.

Against the steady-state floor it prints steps/s of both and their ratio, the ideal steps/s given the model latency, CPU per step,
memory per session (PSS of Chromium + this Python process, divided by N), harness overhead per step
(step wall time minus model wait), tasks lost, and the policy prompt tokens at step 3 and step 30.

With ``--grounding localizer,policy`` (and a ``--policy-family`` that places its own clicks) the agent
runs once per grounding mode at each N, and the wall time per click step (median over the runs'
click steps) of each is printed, with the grounded step's against the three-role step's.

    python benchmarks/throughput.py --sessions 50,100,200,500 --steps 10 --latency 1.0 --floor steady,whole
    python benchmarks/throughput.py --sessions 10,100 --steps 10 --latency 1.0 --token-steps 0 \
        --policy-family holo3.1 --grounding localizer,policy
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from playwright.async_api import async_playwright

from webagent.batch import BatchRunner, read_results
from webagent.browser.launcher import launch_browser
from webagent.config import BrowserConfig
from webagent.families import DEFAULT_PROFILE, FAMILIES
from webagent.tasks import load_tasks
from webagent.testing.offline import offline_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wholefloor import capture_params, count_cdp, whole_figures, whole_floor

BUTTON = (640, 400)
TICK = os.sysconf("SC_CLK_TCK")
IMAGE_TOKENS = (1260 // 28) * (784 // 28)  # one 1260x784 screenshot, 28x28 patches
#: The agent's [policy] family (--policy-family; None: the localizer profile's).
POLICY_FAMILY: list[str | None] = [None]


# -- process accounting (Linux /proc) -------------------------------------------------------------
def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def process_tree(root: int, exclude: set[int]) -> list[int]:
    tree, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        if pid in exclude:
            continue
        out.append(pid)
        todo.extend(tree.get(pid, []))
    return out


#: The kind of a process the monitor leaves out of the figures.
NOT_COUNTED = "profiler"


def _kind(pid: int, root: int) -> str:
    if pid == root:
        return "python"
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").split()
    except OSError:
        return "chromium"
    if comm.startswith("node"):
        return "driver"
    if comm.startswith("python"):  # a batch's worker process (``--workers``)
        return "python"
    if comm == "py-spy":  # benchmarks/stepcpu.py --profile: measuring, not measured
        return NOT_COUNTED
    kind = next((a[7:].decode() for a in cmdline if a.startswith(b"--type=")), "browser")
    return f"chromium {kind}"


def _age_s(pid: int) -> float:
    """Seconds since process ``pid`` started (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / TICK


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


#: Chromium processes whose CPU is also split by thread (one of each per browser: cheap to read).
THREADED = ("chromium browser", "chromium gpu-process")
#: The prefix of a per-thread entry in a split: a part of its process's figure, not added to the total.
THREAD = "thread "
#: The prefix of a count of Chromium processes started (a count per step, not CPU ms, in a split).
STARTED = "processes started per step: "


def thread_cpu_s(pid: int) -> dict[int, tuple[str, float]]:
    """CPU seconds of each of ``pid``'s threads, by thread id, with its name (digits dropped: a
    pool's workers are reported as one entry)."""
    out: dict[int, tuple[str, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            head, _, tail = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rpartition(")")
        except OSError:
            continue
        fields = tail.split()
        out[int(tid)] = (head.split("(", 1)[-1].rstrip("0123456789") or "?", (int(fields[11]) + int(fields[12])) / TICK)
    return out


class Meter:
    """Peak PSS and a time series of CPU seconds of this process and its children (minus excluded trees).

    The sampling runs in a separate monitor process (this script with ``--monitor``), so reading
    /proc costs neither the measured process's CPU nor its event loop's time.
    """

    def __init__(self, exclude: set[int]) -> None:
        self.exclude = exclude
        self.peak_kib = 0
        self.pss: list[tuple[float, int]] = []  # (monotonic time, PSS KiB of the measured processes)
        self.samples: list[tuple[float, float]] = []  # (monotonic time, CPU seconds since start)
        self._splits: list[dict[str, float]] = []  # CPU seconds since start by process kind, per sample

    def __enter__(self) -> Meter:
        args = [sys.executable, __file__, "--monitor", str(os.getpid()), *map(str, self.exclude)]
        self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        self._proc.stdout.readline()  # "ready": the baseline is taken
        return self

    def __exit__(self, *exc: object) -> None:
        out, _ = self._proc.communicate(input="stop\n", timeout=60)
        for line in out.splitlines():
            record = json.loads(line)
            self.samples.append((record["t"], record["cpu"]))
            self.peak_kib = max(self.peak_kib, record["pss_kib"])
            if record["pss_kib"]:  # PSS is read every 5th sample (0 in the others)
                self.pss.append((record["t"], record["pss_kib"]))
            self._splits.append(record["split"])

    def split(self, lo: float | None = None, hi: float | None = None) -> dict[str, float]:
        """CPU seconds by process kind (python, driver (node), chromium): over the whole run, or
        between the samples nearest to times ``lo`` and ``hi``."""
        if lo is None or hi is None:
            return self._splits[-1]
        times = [t for t, _ in self.samples]
        first = min(range(len(times)), key=lambda i: abs(times[i] - lo))
        last = min(range(len(times)), key=lambda i: abs(times[i] - hi))
        a, b = self._splits[first], self._splits[last]
        return {k: b[k] - a.get(k, 0.0) for k in b}

    def cpu_at(self, t: float) -> float:
        """CPU seconds used up to time t (linear between samples)."""
        prev = self.samples[0]
        for cur in self.samples[1:]:
            if cur[0] >= t:
                span = cur[0] - prev[0]
                return prev[1] + (cur[1] - prev[1]) * ((t - prev[0]) / span if span > 0 else 1.0)
            prev = cur
        return prev[1]


def monitor(root: int, exclude: set[int]) -> None:
    """The monitor process: sample until a line arrives on stdin, then print the samples."""
    import select

    exclude = exclude | {os.getpid()}
    start: dict[int, float] = {pid: cpu_s(pid) for pid in process_tree(root, exclude)}
    last: dict[int, float] = dict(start)
    kinds: dict[int, str] = {}
    settled: set[int] = set()  # pids whose kind was read when they were at least a second old
    # (pid, tid) -> CPU seconds when first seen, and last seen (a thread that exits keeps its last
    # figure), and its name
    thread_start: dict[tuple[int, int], float] = {}
    thread_last: dict[tuple[int, int], float] = {}
    thread_name: dict[tuple[int, int], str] = {}
    print("ready", flush=True)
    records = []
    tick = 0
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 0.2)
        pids = process_tree(root, exclude)
        for pid in pids:
            last[pid] = max(last.get(pid, 0.0), cpu_s(pid))
            # Classified once its kind is known: reading cmdlines every sample costs the cores. A child
            # seen right after its fork still has its parent's command line (a GPU or utility process
            # as "browser", a renderer as "zygote"): read again until it is a second old.
            if pid not in settled:
                kinds[pid] = _kind(pid, root)
                if _age_s(pid) >= 1.0:
                    settled.add(pid)
        for pid in pids:
            if kinds.get(pid) in THREADED:  # by thread too (what in the browser process costs)
                for tid, (name, value) in thread_cpu_s(pid).items():
                    key = (pid, tid)
                    thread_last[key] = max(thread_last.get(key, 0.0), value)
                    thread_start.setdefault(key, value if pid in start else 0.0)
                    thread_name[key] = name
        pss = sum(pss_kib(p) for p in pids) if tick % 5 == 0 else 0
        tick += 1
        split: dict[str, float] = {}
        for pid, value in last.items():
            kind = kinds.get(pid, "chromium")
            if kind == NOT_COUNTED:
                continue
            split[kind] = split.get(kind, 0.0) + value - start.get(pid, 0.0)
        cpu = sum(split.values())
        for (pid, tid), value in thread_last.items():
            if kinds.get(pid) not in THREADED:  # read while a new child still had its parent's command line
                continue
            key = f"{THREAD}{kinds[pid].removeprefix('chromium ')}/{thread_name[(pid, tid)]}"
            split[key] = split.get(key, 0.0) + value - thread_start[(pid, tid)]
        for pid, kind in kinds.items():  # processes started so far (as a count / 1000: per step once split)
            if pid not in start and kind.startswith("chromium "):
                key = f"{STARTED}{kind.removeprefix('chromium ')}"
                split[key] = split.get(key, 0.0) + 0.001
        records.append({"t": time.monotonic(), "cpu": cpu, "pss_kib": pss, "split": split})
        if ready:
            break
    for record in records:
        print(json.dumps(record))


def steady(times: list[float], meter: Meter) -> tuple[float, float, dict[str, float]]:
    """Steps/s, CPU ms/step and CPU ms/step by process kind over the middle 80% of steps (launch,
    setup and teardown left out)."""
    times = sorted(times)
    lo, hi = times[len(times) // 10], times[(len(times) * 9) // 10]
    steps = (len(times) * 9) // 10 - len(times) // 10
    if hi <= lo or steps <= 0:
        return float("nan"), float("nan"), {}
    split = {k: round(v / steps * 1000, 3 if k.startswith(STARTED) else 1) for k, v in meter.split(lo, hi).items()}
    return steps / (hi - lo), (meter.cpu_at(hi) - meter.cpu_at(lo)) / steps * 1000, split


# -- the floor ------------------------------------------------------------------------------------
async def floor(
    url: str, n: int, steps: int, exclude: set[int], pause: float = 0.0, burn_ms: float = 0.0
) -> dict[str, Any]:
    """The bare loop; ``pause``: sleep that long per step, where the agent waits on its models;
    ``burn_ms``: spend that much CPU in this process per step (what Python work costs the rest)."""
    config = BrowserConfig(contexts_per_browser=max(n, 1), direct_cdp=False)  # a plain Playwright loop
    params = capture_params(config)
    ends: list[float] = []
    async with async_playwright() as pw:

        async def session() -> None:
            context = await browser.new_context(viewport={"width": 1280, "height": 800}, device_scale_factor=1)
            page = await context.new_page()
            await page.goto(url, timeout=300_000)
            # A page just loaded may have no frame to capture yet ("Unable to capture screenshot").
            await page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            cdp = await context.new_cdp_session(page)
            for i in range(steps):
                await cdp.send("Page.captureScreenshot", params)
                if pause:
                    await asyncio.sleep(pause)
                if i < steps - 1:
                    await page.mouse.click(*BUTTON)
                if burn_ms:
                    until = time.process_time() + burn_ms / 1000
                    while time.process_time() < until:
                        pass
                ends.append(time.monotonic())
            await context.close()

        with Meter(exclude) as meter:  # like the agent's batch: launch, contexts, steps, close
            browser = await launch_browser(pw, config)
            await asyncio.gather(*(session() for _ in range(n)))
            await browser.close()
    rate, cpu, split = steady(ends, meter)
    return {"steps_per_s": rate, "cpu_per_step_ms": cpu, "pss_mib": meter.peak_kib / 1024 / n, "split": split}


# -- the agent ------------------------------------------------------------------------------------
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


async def agent(
    url: str, n: int, steps: int, latency: float, workdir: Path, exclude: set[int], grounding: str | None = None
) -> dict[str, Any]:
    server = OfflineServer(bench_script(steps, latency), workdir)
    try:
        tasks_file = workdir / f"tasks-{n}.jsonl"
        tasks_file.write_text(
            "".join(
                json.dumps(
                    {"id": f"s{i}", "url": url, "goal": f"Click the blue counter button, then answer done ({i})"}
                )
                + "\n"
                for i in range(n)
            )
        )
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
    whole = {"start": start, "end": end, "steps": stats.steps, "tasks": n, "succeeded": succeeded}
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
        "pss_mib": meter.peak_kib / 1024 / n,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", default="1,10,50,100,200", help="comma-separated N values")
    parser.add_argument("--steps", type=int, default=10, help="steps per task (S)")
    parser.add_argument("--latency", type=float, default=1.0, help="model latency per call, seconds")
    parser.add_argument("--token-steps", type=int, default=30, help="steps of the prompt-size run (0: skip)")
    parser.add_argument(
        "--floor-burn-ms",
        type=float,
        default=0.0,
        help="also run the floor spending this much CPU in Python per step, and print it (a calibration: "
        "what a millisecond of harness Python costs the browser at this N)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds per N (floor, agent, floor with waits); the median round is tabled",
    )
    parser.add_argument(
        "--floor",
        default="whole",
        help="comma-separated floors to run at each N: whole (the whole-batch floor: a fresh context per task, "
        "the agent's model latency per step, launch to last close; what the ratios are taken against where it "
        "runs) and steady (the middle 80%% of steps of a loop on contexts opened up front)",
    )
    parser.add_argument(
        "--price-per-mtok",
        type=float,
        default=1.0,
        help="model price in dollars per million tokens (prompt and completion alike), for the cost per task",
    )
    parser.add_argument(
        "--grounding",
        default="",
        help="comma-separated grounding modes to run the agent in at each N (localizer, policy); the first is "
        "the one tabled against the floor, and the wall time per click step of each is printed",
    )
    parser.add_argument(
        "--policy-family",
        choices=list(FAMILIES),
        help="the agent's policy family (what its requests ask of the image processor; the screenshots "
        "and so the browser work are the same); the floor does not change",
    )
    args = parser.parse_args()
    POLICY_FAMILY[0] = args.policy_family
    floors = set(args.floor.split(","))
    if not floors or not floors <= {"steady", "whole"}:
        parser.error(f"--floor: {args.floor!r}: expected steady, whole or steady,whole")
    sessions = [int(x) for x in args.sessions.split(",")]
    rows: list[dict[str, Any]] = []
    sites = subprocess.Popen([sys.executable, "-m", "webagent.testing.sites"], stdout=subprocess.PIPE, text=True)
    assert sites.stdout is not None
    url = sites.stdout.readline().strip().rsplit(" ", 1)[-1] + "/bench/"
    exclude = {sites.pid}  # the site server is not the harness
    try:
        with tempfile.TemporaryDirectory(prefix="webagent-bench-") as tmp:
            rows, tokens = asyncio.run(measure(args, sessions, url, Path(tmp), exclude))
    finally:
        sites.terminate()
        sites.wait(10)
    report(args, rows, tokens)


async def measure(
    args: argparse.Namespace, sessions: list[int], url: str, workdir: Path, exclude: set[int]
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    rows = []
    for n in sessions:
        rounds = [await measure_round(args, n, url, workdir, exclude, r) for r in range(args.repeat)]
        rows.append(median_round(rounds))
    tokens: dict[int, int] = {}
    if args.token_steps:
        t = await agent(url, 1, args.token_steps, 0.0, workdir, exclude)
        tokens = prompt_tokens(t["out"])
    return rows, tokens


async def floor_whole(url: str, n: int, steps: int, pause: float, exclude: set[int]) -> dict[str, Any]:
    """The whole-batch floor (``wholefloor.py``), measured like the agent's batch."""
    with Meter(exclude) as meter, count_cdp() as cdp:
        run = await whole_floor(url, n, steps, pause, meter)
    return {**whole_figures(run, meter), "cdp": cdp.per_step(run["steps"]), "pss_mib": meter.peak_kib / 1024 / n}


async def measure_round(
    args: argparse.Namespace, n: int, url: str, workdir: Path, exclude: set[int], round_: int
) -> dict[str, Any]:
    """One round at N sessions: the steady-state floor (``--floor steady``), the agent, then the
    whole-batch floor (``--floor whole``) and, with latency, the steady floor with the agent's waits."""
    floors = set(args.floor.split(","))
    f = await floor(url, n, args.steps, exclude) if "steady" in floors else None
    if f is not None and args.floor_burn_ms:
        b = await floor(url, n, args.steps, exclude, burn_ms=args.floor_burn_ms)
        print(
            f"N={n:<4} floor + {args.floor_burn_ms:g} ms of Python per step {b['steps_per_s']:6.1f} steps/s "
            f"({b['steps_per_s'] / f['steps_per_s']:.2f} of the floor), cpu/step {b['cpu_per_step_ms']:.0f} ms "
            f"(floor {f['cpu_per_step_ms']:.0f} ms)\n       by process: {b['split']}",
            flush=True,
        )
    (workdir / f"round-{round_}").mkdir(exist_ok=True)
    groundings = [g for g in args.grounding.split(",") if g] or [None]
    a = await agent(url, n, args.steps, args.latency, workdir / f"round-{round_}", exclude, groundings[0])
    clicks = {groundings[0]: a["click_step_s"]}
    for grounding in groundings[1:]:
        other = await agent(url, n, args.steps, args.latency, workdir / f"round-{round_}", exclude, grounding)
        clicks[grounding] = other["click_step_s"]
    if len(clicks) > 1:
        first = clicks[groundings[0]]
        print(
            f"N={n:<4} wall time per click step: "
            + ", ".join(f"{g} {t:.3f} s ({t / first:.2f} of {groundings[0]})" for g, t in clicks.items()),
            flush=True,
        )
    ideal = n / a["model_s_per_step"] if a["model_s_per_step"] > 0 else float("inf")
    row: dict[str, Any] = {"n": n, "steady": f, "agent": a, "ideal": ideal, "waits": None, "whole": None}
    if "whole" in floors:
        # The same model latency per step as the agent waited (mean over its steps, queueing included).
        wf = row["whole"] = await floor_whole(url, n, args.steps, a["model_s_per_step"], exclude)
        aw = a["whole"]
        print(
            f"N={n:<4} whole batch: floor {wf['steps_per_s']:6.1f} steps/s  agent {aw['steps_per_s']:6.1f} steps/s  "
            f"ratio {aw['steps_per_s'] / wf['steps_per_s']:.2f}  cpu/step floor {wf['cpu_per_step_ms']:.0f} ms "
            f"agent {aw['cpu_per_step_ms']:.0f} ms (x{aw['cpu_per_step_ms'] / wf['cpu_per_step_ms']:.2f})  "
            f"PSS/session floor {wf['pss_mib']:.0f} MiB agent {a['pss_mib']:.0f} MiB  "
            f"success {aw['success_rate']:.0%}\n       DevTools commands: floor {wf['cdp']}  agent {a['cdp']}",
            flush=True,
        )
    if f is None:
        return row
    target = min(ideal, f["steps_per_s"])
    # Like for like: the same loop sleeping, per step, as long as the agent waited on its models
    # (the same browser work in the same rhythm, without the harness).
    w = row["waits"] = (
        await floor(url, n, args.steps, exclude, pause=a["model_s_per_step"]) if args.latency > 0 else None
    )
    if w is not None:
        print(
            f"N={n:<4} floor with the agent's model waits {w['steps_per_s']:6.1f} steps/s "
            f"cpu/step {w['cpu_per_step_ms']:.0f} ms; agent/that {a['steps_per_s'] / w['steps_per_s']:.2f}",
            flush=True,
        )
    print(
        f"N={n:<4} steady: floor {f['steps_per_s']:6.1f} steps/s  agent {a['steps_per_s']:6.1f} steps/s  "
        f"ratio {a['steps_per_s'] / f['steps_per_s']:.2f}  ideal {ideal:6.1f}  "
        f"agent/min(ideal,floor) {a['steps_per_s'] / target:.2f}  "
        f"cpu/step floor {f['cpu_per_step_ms']:.0f} ms agent {a['cpu_per_step_ms']:.0f} ms "
        f"(x{a['cpu_per_step_ms'] / f['cpu_per_step_ms']:.2f})  "
        f"PSS/session floor {f['pss_mib']:.0f} MiB agent {a['pss_mib']:.0f} MiB  "
        f"overhead p50 {a['overhead_ms_p50']:.0f} ms  lost {a['lost']}\n"
        f"       CPU ms/step by process (middle 80% of steps): floor {f['split']}  agent {a['split']}",
        flush=True,
    )
    return row


def ratio(row: dict[str, Any]) -> float:
    """Agent/floor steps/s against the round's first floor: the whole-batch one where it ran."""
    if row["whole"] is not None:
        return float(row["agent"]["whole"]["steps_per_s"] / row["whole"]["steps_per_s"])
    return float(row["agent"]["steps_per_s"] / row["steady"]["steps_per_s"])


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose agent/floor steps/s ratio is the median (tasks lost: the worst round's)."""
    ordered = sorted(rounds, key=ratio)
    row = ordered[len(ordered) // 2]
    return {**row, "agent": {**row["agent"], "lost": max(r["agent"]["lost"] for r in rounds)}}


def report(args: argparse.Namespace, rows: list[dict[str, Any]], tokens: dict[int, int]) -> None:
    print()
    print(
        f"model latency {args.latency:g} s per call, {args.steps} steps per task, policy family "
        f"{args.policy_family or 'unset'}, grounding {args.grounding.split(',')[0] or 'the family default'} "
        f"(profile {DEFAULT_PROFILE}: 1260x784 JPEG when the localizer places clicks), "
        f"median of {args.repeat} round(s) per N by agent/floor steps/s, floors: {args.floor}"
    )
    if any(row["whole"] for row in rows):
        report_whole(args, [row for row in rows if row["whole"]])
    if any(row["steady"] for row in rows):
        report_steady([row for row in rows if row["steady"]])
    if tokens:
        last = max(tokens)
        image = {k: min(k, 3) * IMAGE_TOKENS for k in tokens}
        print()
        print(
            f"policy prompt tokens: step 3 = {tokens[3]} ({tokens[3] - image[3]} text + {image[3]} image), "
            f"step {last} = {tokens[last]} ({tokens[last] - image[last]} text + {image[last]} image), "
            f"ratio {tokens[last] / tokens[3]:.3f}"
        )


def report_whole(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Against the whole-batch floor (launch to last close), and what a batch delivers per N."""
    print()
    print(
        "| N | floor steps/s | agent steps/s | agent/floor | CPU/step floor | CPU/step agent | agent/floor CPU "
        "| PSS/session floor | PSS/session agent | Runtime.evaluate/step floor | agent | CDP commands/step floor | agent |"
    )
    print("|---" * 13 + "|")
    for row in rows:
        wf, a = row["whole"], row["agent"]
        aw = a["whole"]
        print(
            f"| {row['n']} | {wf['steps_per_s']:.1f} | {aw['steps_per_s']:.1f} "
            f"| {aw['steps_per_s'] / wf['steps_per_s']:.2f} | {wf['cpu_per_step_ms']:.0f} ms "
            f"| {aw['cpu_per_step_ms']:.0f} ms | {aw['cpu_per_step_ms'] / wf['cpu_per_step_ms']:.2f} "
            f"| {wf['pss_mib']:.0f} MiB | {a['pss_mib']:.0f} MiB | {wf['cdp']['Runtime.evaluate/step']} | {a['cdp']['Runtime.evaluate/step']} "
            f"| {wf['cdp']['CDP commands/step']} | {a['cdp']['CDP commands/step']} |"
        )
    print()
    print(f"per N, the agent's batch (launch to last close; cost at ${args.price_per_mtok:g} per million tokens):")
    print()
    print("| N | tasks/hour | steps/s | success rate | model tokens/task | cost/task | tasks lost |")
    print("|---" * 7 + "|")
    for row in rows:
        a = row["agent"]
        aw = a["whole"]
        cost = a["tokens_per_task"] * args.price_per_mtok / 1e6
        print(
            f"| {row['n']} | {aw['tasks_per_hour']:.0f} | {aw['steps_per_s']:.1f} | {aw['success_rate']:.0%} "
            f"| {a['tokens_per_task']:.0f} | ${cost:.4f} | {a['lost']} |"
        )


def report_steady(rows: list[dict[str, Any]]) -> None:
    """Against the steady-state floor (the middle 80 % of steps)."""
    print()
    waits = any(row["waits"] is not None for row in rows)
    print(
        "| N | floor steps/s | agent steps/s | agent/floor | ideal steps/s | agent/min(ideal,floor) "
        + ("| floor with waits steps/s | agent/(floor with waits) " if waits else "")
        + "| CPU/step floor | CPU/step agent | agent/floor CPU | PSS/session floor | PSS/session agent "
        "| overhead/step p50 | tasks lost |"
    )
    print("|---" * (15 if waits else 13) + "|")
    for row in rows:
        n, f, a, ideal, w = row["n"], row["steady"], row["agent"], row["ideal"], row["waits"]
        target = min(ideal, f["steps_per_s"])
        waited = f"| {w['steps_per_s']:.1f} | {a['steps_per_s'] / w['steps_per_s']:.2f} " if w else ""
        print(
            f"| {n} | {f['steps_per_s']:.1f} | {a['steps_per_s']:.1f} | {a['steps_per_s'] / f['steps_per_s']:.2f} "
            f"| {ideal:.1f} | {a['steps_per_s'] / target:.2f} {waited}| {f['cpu_per_step_ms']:.0f} ms "
            f"| {a['cpu_per_step_ms']:.0f} ms | {a['cpu_per_step_ms'] / f['cpu_per_step_ms']:.2f} "
            f"| {f['pss_mib']:.0f} MiB | {a['pss_mib']:.0f} MiB | {a['overhead_ms_p50']:.0f} ms | {a['lost']} |"
        )


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--monitor":
        monitor(int(sys.argv[2]), {int(x) for x in sys.argv[3:]})
    else:
        main()
