"""What ``throughput.py`` prints at the end: the tables against each floor, per N.

``median_round`` picks the round tabled at each N (the median agent/floor steps/s); ``report``
prints the header line, the whole-batch floor's tables (``report_whole``: steps/s, CPU, memory and
DevTools commands per step of both sides; tasks per hour, success rate, tokens and cost per task),
the steady-state floor's (``report_steady``) and the policy prompt tokens at step 3 and the last.
"""

from __future__ import annotations

import argparse
from typing import Any

from webagent.families import DEFAULT_PROFILE

__all__ = [
    "FAILED_CELL",
    "IMAGE_TOKENS",
    "median_round",
    "print_whole_side",
    "ratio",
    "report",
    "report_steady",
    "report_whole",
]

#: A table cell of a side that failed (its error is printed where it failed, and at the end).
FAILED_CELL = "failed"

IMAGE_TOKENS = (1260 // 28) * (784 // 28)  # one 1260x784 screenshot, 28x28 patches


def ratio(row: dict[str, Any]) -> float:
    """Agent/floor steps/s against the round's first floor: the whole-batch one where it ran (NaN
    where a side failed)."""
    if row["agent"] is None or (row["whole"] is None and row["steady"] is None):
        return float("nan")
    if row["whole"] is not None:
        return float(row["agent"]["whole"]["steps_per_s"] / row["whole"]["steps_per_s"])
    return float(row["agent"]["steps_per_s"] / row["steady"]["steps_per_s"])


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose agent/floor steps/s ratio is the median, of those where both sides ran
    (else the first round); tasks lost: the worst round's."""
    whole = [r for r in rounds if ratio(r) == ratio(r)] or rounds[:1]
    row = sorted(whole, key=ratio)[len(whole) // 2]
    if row["agent"] is None:
        return row
    lost = max(r["agent"]["lost"] for r in rounds if r["agent"] is not None)
    return {**row, "agent": {**row["agent"], "lost": lost}}


def print_whole_side(n: int, what: str, whole: dict[str, Any], pss_mib: float, cdp: dict[str, float]) -> None:
    """One side's whole-batch figures, printed as soon as it has ended."""
    print(
        f"N={n:<4} whole batch, {what}: {whole['steps_per_s']:6.1f} steps/s  {whole['tasks_per_hour']:.0f} tasks/hour  "
        f"cpu/step {whole['cpu_per_step_ms']:.0f} ms  PSS/session {pss_mib:.0f} MiB  "
        f"success {whole['success_rate']:.0%}  peak sessions {whole['peak_sessions']}  "
        f"commands {whole['deadlines']}\n       DevTools commands: {cdp}\n"
        f"       CPU ms/step by process: {whole['split']}",
        flush=True,
    )


def report(args: argparse.Namespace, rows: list[dict[str, Any]], tokens: dict[int, int]) -> None:
    print()
    print(
        f"model latency {args.latency:g} s per call, {args.steps} steps per task, policy family "
        f"{args.policy_family or 'unset'}, grounding {args.grounding.split(',')[0] or 'the family default'} "
        f"(profile {DEFAULT_PROFILE}: 1260x784 JPEG when the localizer places clicks), "
        f"median of {args.repeat} round(s) per N by agent/floor steps/s, floors: {args.floor}"
    )
    if "whole" in args.floor.split(","):
        report_whole(args, [row for row in rows if row["whole"] or row["agent"]])
    if any(row["steady"] and row["agent"] for row in rows):
        report_steady([row for row in rows if row["steady"] and row["agent"]])
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
        f = _side_cells(wf, wf["pss_mib"] if wf else 0.0)
        g = _side_cells(a["whole"] if a else None, a["pss_mib"] if a else 0.0, a["cdp"] if a else None)
        both = wf is not None and a is not None
        steps = f"{a['whole']['steps_per_s'] / wf['steps_per_s']:.2f}" if both else FAILED_CELL
        cpu = f"{a['whole']['cpu_per_step_ms'] / wf['cpu_per_step_ms']:.2f}" if both else FAILED_CELL
        print(
            f"| {row['n']} | {f[0]} | {g[0]} | {steps} | {f[1]} | {g[1]} | {cpu} | {f[2]} | {g[2]} "
            f"| {f[3]} | {g[3]} | {f[4]} | {g[4]} |"
        )
    print()
    print(f"per N, the agent's batch (launch to last close; cost at ${args.price_per_mtok:g} per million tokens):")
    print()
    print("| N | tasks/hour | steps/s | success rate | model tokens/task | cost/task | tasks lost |")
    print("|---" * 7 + "|")
    for row in rows:
        a = row["agent"]
        if a is None:
            print(f"| {row['n']} |" + f" {FAILED_CELL} |" * 6)
            continue
        aw = a["whole"]
        cost = a["tokens_per_task"] * args.price_per_mtok / 1e6
        print(
            f"| {row['n']} | {aw['tasks_per_hour']:.0f} | {aw['steps_per_s']:.1f} | {aw['success_rate']:.0%} "
            f"| {a['tokens_per_task']:.0f} | ${cost:.4f} | {a['lost']} |"
        )


def _side_cells(whole: dict[str, Any] | None, pss_mib: float, cdp: dict[str, float] | None = None) -> list[str]:
    """One side's cells of the whole-batch table: steps/s, CPU/step, PSS, evaluates and commands a step."""
    if whole is None:
        return [FAILED_CELL] * 5
    cdp = cdp or whole["cdp"]
    return [
        f"{whole['steps_per_s']:.1f}",
        f"{whole['cpu_per_step_ms']:.0f} ms",
        f"{pss_mib:.0f} MiB",
        str(cdp["Runtime.evaluate/step"]),
        str(cdp["CDP commands/step"]),
    ]


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
