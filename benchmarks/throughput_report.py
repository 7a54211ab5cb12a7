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

__all__ = ["IMAGE_TOKENS", "median_round", "ratio", "report", "report_steady", "report_whole"]

IMAGE_TOKENS = (1260 // 28) * (784 // 28)  # one 1260x784 screenshot, 28x28 patches


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
