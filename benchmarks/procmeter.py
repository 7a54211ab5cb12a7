"""The benchmarks' process instrument: CPU and memory of a process tree, read from Linux's /proc.

``Meter`` samples the CPU seconds (by process kind: python, driver (node), chromium by type, and the
browser's and GPU process's threads) and the PSS of this process and its children, minus excluded
trees, in a separate monitor process (this file run with ``--monitor``), so reading /proc costs
neither the measured process's CPU nor its event loop's time. ``steady`` turns a run's step end
times into steps/s and CPU per step over the middle 80 % of steps.

Used by ``throughput.py`` (which re-exports these names), ``soak.py``, ``wholefloor.py``,
``stepcpu.py``, ``pagecost.py`` and ``cdp_paths.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

__all__ = [
    "NOT_COUNTED",
    "STARTED",
    "THREAD",
    "THREADED",
    "TICK",
    "Meter",
    "cpu_s",
    "monitor",
    "process_tree",
    "pss_kib",
    "steady",
    "thread_cpu_s",
]

TICK = os.sysconf("SC_CLK_TCK")


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

    The sampling runs in a separate monitor process (``procmeter.py --monitor``), so reading
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
            entry = f"{THREAD}{kinds[pid].removeprefix('chromium ')}/{thread_name[(pid, tid)]}"
            split[entry] = split.get(entry, 0.0) + value - thread_start[(pid, tid)]
        for pid, kind in kinds.items():  # processes started so far (as a count / 1000: per step once split)
            if pid not in start and kind.startswith("chromium "):
                entry = f"{STARTED}{kind.removeprefix('chromium ')}"
                split[entry] = split.get(entry, 0.0) + 0.001
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


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--monitor":
        monitor(int(sys.argv[2]), {int(x) for x in sys.argv[3:]})
    else:
        sys.exit("usage: procmeter.py --monitor ROOT_PID [EXCLUDED_PID ...] (Meter starts it)")
