"""The soak's figures and what it prints: per phase, per round, and the table at the end.

``percentile``, ``open_sessions`` and ``pss_per_open_session`` are figures of a phase (step
latency, the sessions open at once, memory per open session); ``print_row`` prints a round's lines
as it ends, ``median_round`` picks the round tabled at each N, ``report`` prints the table and the
``warnings`` (figures to doubt), and ``_plain`` makes the rows JSON-ready (``--json``).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from webagent.families import DEFAULT_PROFILE

__all__ = [
    "_plain",
    "median_round",
    "open_sessions",
    "percentile",
    "print_row",
    "pss_per_open_session",
    "report",
    "warnings",
]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def pss_per_open_session(pss: list[tuple[float, int]], opened: list[tuple[float, int]]) -> dict[str, float]:
    """PSS per session counted over the sessions open at each moment, not all N: with hundreds of
    tasks, sessions open a few at a time per browser and the first close before the last open.
    The peak of open sessions, and PSS per open session at the PSS peak and at the open peak."""
    if not pss or not opened:
        return {"open_peak": float("nan"), "pss_per_open_mib": float("nan"), "pss_at_open_peak_mib": float("nan")}

    def open_at(t: float) -> int:
        return min(opened, key=lambda o: abs(o[0] - t))[1]

    def pss_at(t: float) -> int:
        return min(pss, key=lambda p: abs(p[0] - t))[1]

    t_pss, peak = max(pss, key=lambda p: p[1])
    t_open, most = max(opened, key=lambda o: o[1])
    return {
        "open_peak": float(most),
        "pss_per_open_mib": peak / 1024 / max(open_at(t_pss), 1),
        "pss_at_open_peak_mib": pss_at(t_open) / 1024 / max(most, 1),
    }


def open_sessions(opened: list[tuple[float, int]], ends: list[float]) -> dict[str, float]:
    """The sessions open at once: their peak, and their mean over the middle 80% of the steps (the
    window of steps/s). Fewer open than running means the sessions wait for their turn to open
    (``OPENS_AT_ONCE`` a browser): the rate they open at then bounds the steps/s."""
    if not opened:
        return {"open_peak": float("nan"), "open_mean": float("nan")}
    times = sorted(ends)
    lo, hi = (times[len(times) // 10], times[(len(times) * 9) // 10]) if len(times) >= 10 else (0.0, math.inf)
    inside = [count for when, count in opened if lo <= when <= hi] or [count for _, count in opened]
    return {"open_peak": float(max(count for _, count in opened)), "open_mean": sum(inside) / len(inside)}


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else float("nan")


def print_row(row: dict[str, Any]) -> None:
    n, f, a = row["n"], row.get("floor"), row.get("agent")
    if f:
        print(
            f"N={n:<4} floor: {f['finished']}/{n} sessions finished, {f['hung']} hung, {f['steps']} steps, "
            f"{f['steps_per_s']:.1f} steps/s, CPU/step {f['cpu_per_step_ms']:.0f} ms, PSS/session "
            f"{f['pss_mib']:.0f} MiB, open at once {f['open_mean']:.0f} (peak {f['open_peak']:.0f}), step p50 "
            f"{f['step_p50_s']:.2f} s p90 {f['step_p90_s']:.2f} s\n"
            f"       counts {f['counts']}  capture timeouts after {f['capture_timeouts_after']}  "
            f"failures {f['top_failures']}\n"
            f"       CPU ms/step by process {f['split']}\n       site {f['site']}",
            flush=True,
        )
    if a:
        errors = f" (errors: {a['top_errors']})" if a["top_errors"] else ""
        print(
            f"N={n:<4} agent ({a.get('workers', 1)} worker processes): {a['finished']}/{n} tasks finished ({a['succeeded']} succeeded), {a['hung']} hung, "
            f"stop reasons {a['stop_reasons']}{errors}, {a['steps']} steps, {a['steps_per_s']:.1f} steps/s, CPU/step "
            f"{a['cpu_per_step_ms']:.0f} ms, PSS/session {a['pss_mib']:.0f} MiB (per open session "
            f"{a['pss_per_open_mib']:.0f} MiB at the PSS peak, {a['pss_at_open_peak_mib']:.0f} MiB with "
            f"{a['open_peak']:.0f} open; open at once {a['open_mean']:.0f}), step p50 {a['step_p50_s']:.2f} s "
            f"p90 {a['step_p90_s']:.2f} s, {a['retried']} re-run\n       counts {a['counts']}\n"
            + (f"       killed {a['killed']}\n" if a["killed"] else "")
            + (f"       frozen {a['frozen']}\n" if a["frozen"] else "")
            + f"       errors {a['errors']} (infrastructure {a['infra_errors']}), re-runs {a['rerun_reasons']}, "
            f"infrastructure re-runs {a['infra_reruns']} {a['infra_causes']}\n"
            f"       admission {a['admission']}, browser commands {a['commands']}\n"
            f"       model calls {a['model_calls']}\n"
            + f"       CPU ms/step by process {a['split']}\n       site {a['site']}",
            flush=True,
        )
    if f and a:
        print(
            f"N={n:<4} agent/floor steps/s {_ratio(a['steps_per_s'], f['steps_per_s']):.2f}, "
            f"CPU/step {_ratio(a['cpu_per_step_ms'], f['cpu_per_step_ms']):.2f}",
            flush=True,
        )


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median agent/floor steps/s (hung and unfinished counts: the worst round's)."""

    def key(r: dict[str, Any]) -> float:
        if "floor" in r and "agent" in r:
            value = _ratio(r["agent"]["steps_per_s"], r["floor"]["steps_per_s"])
        else:
            value = r.get("agent", r.get("floor", {})).get("steps_per_s", 0.0)
        return -1.0 if math.isnan(value) else value

    row = sorted(rounds, key=key)[len(rounds) // 2]
    for side in ("floor", "agent"):
        if side in row:
            row = {
                **row,
                side: {
                    **row[side],
                    "hung": max(r[side]["hung"] for r in rounds),
                    "finished": min(r[side]["finished"] for r in rounds),
                },
            }
    return row


def warnings(row: dict[str, Any]) -> list[str]:
    """What makes a row's figures suspect: a floor that failed its screenshots (overloaded: its steps/s
    is then no floor), sessions hung, agent tasks that did not succeed."""
    out = []
    n, f, a = row["n"], row.get("floor") or {}, row.get("agent") or {}
    failed = f.get("counts", {}).get("captures_failed", 0)
    if f and failed > 0.05 * max(f["steps"], 1):
        out.append(
            f"N={n}: the floor got no screenshot at {failed} of {f['steps']} steps (not even after a retry and "
            "a reopened page): "
            "the browser is overloaded and the floor's steps/s is no floor"
        )
    for side, d in (("agent", a), ("floor", f)):
        if d.get("hung"):
            out.append(f"N={n}: {d['hung']} {side} sessions hung")
    if a and a.get("succeeded", 0) < n:
        out.append(f"N={n}: {n - a.get('succeeded', 0)} agent tasks did not succeed: {a.get('stop_reasons')}")
    return out


def _plain(value: Any) -> Any:
    """JSON-ready: NaN as null, tuples as lists."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    print()
    print(
        f"soak: model latency {args.latency:g} s per call, {args.steps} steps per task (slow page and never-answering "
        f"request in every task), profile {DEFAULT_PROFILE} (1260x784 JPEG), median of {args.repeat} round(s) per N"
        + (f", {args.hog} busy processes beside both phases (--hog)" if args.hog else "")
        + (", admission control off" if args.no_admission else "")
    )
    print()
    print(
        "| N | tasks finished | sessions hung (agent / floor) | captures resent / recovered | pages replaced "
        "| floor steps/s | agent steps/s | agent/floor | CPU/step floor | CPU/step agent | agent/floor CPU "
        "| PSS/session floor | PSS/session agent | agent sessions open at peak | PSS/open session agent "
        "| step p50 / p90 floor | step p50 / p90 agent |"
    )
    print("|---" * 17 + "|")
    nan = float("nan")
    for row in rows:
        f = row.get("floor") or {}
        a = row.get("agent") or {}
        ac = a.get("counts", {})
        print(
            f"| {row['n']} | {a.get('finished', '-')}/{row['n']} ({a.get('succeeded', '-')} succeeded) "
            f"| {a.get('hung', '-')} / {f.get('hung', '-')} "
            f"| {ac.get('captures_resent', '-')} / {ac.get('captures_recovered', '-')} "
            f"| {ac.get('pages_replaced', '-')} | {f.get('steps_per_s', nan):.1f} | {a.get('steps_per_s', nan):.1f} "
            f"| {_ratio(a.get('steps_per_s', nan), f.get('steps_per_s', nan)):.2f} "
            f"| {f.get('cpu_per_step_ms', nan):.0f} ms | {a.get('cpu_per_step_ms', nan):.0f} ms "
            f"| {_ratio(a.get('cpu_per_step_ms', nan), f.get('cpu_per_step_ms', nan)):.2f} "
            f"| {f.get('pss_mib', nan):.0f} MiB | {a.get('pss_mib', nan):.0f} MiB "
            f"| {a.get('open_peak', nan):.0f} | {a.get('pss_per_open_mib', nan):.0f} MiB "
            f"| {f.get('step_p50_s', nan):.2f} / {f.get('step_p90_s', nan):.2f} s "
            f"| {a.get('step_p50_s', nan):.2f} / {a.get('step_p90_s', nan):.2f} s |"
        )
    notes = [w for row in rows for w in warnings(row)]
    if notes:
        print()
        for note in notes:
            print(f"WARNING {note}")
