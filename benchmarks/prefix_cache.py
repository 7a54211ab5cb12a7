"""Prefix-cache benchmark: the prompt tokens a vLLM GPU would prefill per step, per policy family and context.

Runs the real agent through ``BatchRunner`` on 12-step tasks over the local sites (clicks, scrolls,
a search, navigations between three sites, a go-back, then an answer checked by the validator),
N sessions at once, against the offline model server in its own process with its simulated vLLM
prefix cache (16-token chained blocks, images bound to their bytes, LRU; see
docs/offline-server.md). For each policy family (every registered one by default) and each policy
context (``append``, ``window``, ``history-epoch``, ``history-step``: the history context with each
of its pruning conventions) it prints:

- policy tokens per request not served from the cache (the GPU's prefill work per step);
- the policy's cached share, and the largest policy request;
- all roles: the cached share and the uncached prompt tokens per step, from ``/metrics`` exactly
  as ``webagent batch --server-metrics`` reads a real vLLM;
- tasks validated (every one should be).

The model names tell the server each role's family (its image tokens, and the coordinates of a
grounded reply): the policy is the family's first model (the validator is the same model); the
localizer is the family's own when it has a localization contract, else the default profile's.
Each policy speaks its family's contract (reply shape, output, reasoning switches); its clicks are
placed as the family's default grounding says. A family may carry variants: ``@<N>tiles`` sets
``[policy] max_num_tiles`` (12 is vLLM's default when a request does not set it); ``@align<N>``
makes the server simulate a hybrid model's cache in vLLM's ``align`` mode with N-token blocks (one
checkpoint per request; see docs/serving.md); ``@policy`` / ``@localizer`` set ``[agent]
grounding``; ``@tools`` / ``@json`` set ``[policy] output``; ``@conversation`` / ``@separate`` set
``[agent] validator_context``; ``@validator<N>`` sets ``[agent] validator_screenshots``. Every role
is at the server's one URL, as ``webagent run --base-url`` sets them, so the validator (the policy's
model) judges where the family's default says.

Also printed, for the floor of issue 24: model requests per click step (policy and localizer), and
the all-roles uncached tokens per step against one screenshot's tokens plus the text of the turn
each policy request adds (``ratio``).

    python benchmarks/prefix_cache.py --sessions 8 --steps 12 --latency 1.0 \
        --families holo1.5,holo2,holotron,holotron@12tiles,holotron@align672,holo3,holo3@align1056,holo3@align2096
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from webagent.batch import BatchRunner, read_results
from webagent.batch.servermetrics import CACHE_HITS, CACHE_QUERIES, MetricsSample, parse_prometheus
from webagent.config import AgentConfig
from webagent.families import DEFAULT_PROFILE, FAMILIES, PROFILES
from webagent.images import frame_for
from webagent.tasks import load_tasks


def roles_of(family: str) -> tuple[str, str, str]:
    """(policy model, localizer model, localizer profile) of a policy family: its own localizer when
    it has one, else the default profile's."""
    profile = family if family in PROFILES else DEFAULT_PROFILE
    return FAMILIES[family].models[0], FAMILIES[profile].models[0], profile


COUNTER = (640, 400)  # the bench page's button
SEARCH_BOX = (560, 128)  # the catalog's search box


def tour(base: str, steps: int) -> list[dict[str, Any]]:
    """The policy's actions, one per step: every kind of page change, the last step answers."""
    actions: list[dict[str, Any]] = [
        {"action": "click_element", "element": "blue counter button"},
        {"action": "scroll", "direction": "down"},
        {"action": "goto", "url": f"{base}/catalog/"},
        {"action": "write_element", "element": "catalog search box", "content": "widget", "press_enter": True},
        {"action": "scroll", "direction": "down"},
        {"action": "go_back"},
        {"action": "goto", "url": f"{base}/longpage/"},
        {"action": "scroll", "direction": "down"},
        {"action": "scroll", "direction": "down"},
        {"action": "goto", "url": f"{base}/bench/"},
        {"action": "click_element", "element": "blue counter button"},
    ]
    rules: list[dict[str, Any]] = [{"when": {"final": True}, "action": {"action": "answer", "content": "done"}}]
    rules.append({"when": {"step": steps}, "action": {"action": "answer", "content": "done"}})
    for step in range(1, steps):
        rules.append(
            {
                "when": {"step": step},
                "note": f"Step {step} of the tour.",
                "thought": "Carry on with the tour.",
                "action": actions[(step - 1) % len(actions)],
            }
        )
    return rules


def script(base: str, steps: int, latency: float) -> dict[str, Any]:
    return {
        "latency_s": latency,
        "elements": {"blue counter button": list(COUNTER), "catalog search box": list(SEARCH_BOX)},
        "tasks": [
            {"id": "tour", "match": "Take the tour", "policy": tour(base, steps), "validator": {"accept": ["done"]}}
        ],
    }


class OfflineServer:
    """The offline model server in its own process (its CPU is not the agent's)."""

    def __init__(self, script: dict[str, Any], workdir: Path, extra: list[str]) -> None:
        path = workdir / "script.json"
        path.write_text(json.dumps(script))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "webagent.testing.server", "--script", str(path), "--no-record", *extra],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip().rsplit(" ", 1)[-1]

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            body: bytes = response.read()
            return body

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def variant(spec: str) -> tuple[str, dict[str, Any], list[str]]:
    """``family[@<N>tiles][@align<N>][@policy|@localizer][@json|@tools][@conversation|@separate][@validator<N>]``
    -> (family, its settings as dotted config keys, the server's extra flags)."""
    family, *options = spec.split("@")
    settings: dict[str, Any] = {}
    server: list[str] = []
    for option in options:
        if option.endswith("tiles"):
            settings["policy.max_num_tiles"] = int(option.removesuffix("tiles"))
        elif option.startswith("align"):
            server = ["--mamba-align", "--block-size", option.removeprefix("align")]
        elif option in ("policy", "localizer"):
            settings["agent.grounding"] = option
        elif option in ("json", "tools"):
            settings["policy.output"] = option
        elif option in ("conversation", "separate"):
            settings["agent.validator_context"] = option
        elif option.startswith("validator"):
            settings["agent.validator_screenshots"] = int(option.removeprefix("validator"))
        else:
            raise SystemExit(f"unknown variant {option!r} in {spec!r}")
    if family not in FAMILIES:
        raise SystemExit(f"unknown family {family!r}: one of {', '.join(FAMILIES)}")
    return family, settings, server


def agent_settings(context: str, steps: int) -> dict[str, Any]:
    """``[agent]`` for a context spec: a mode, or ``history-<pruning>``."""
    mode, _, pruning = context.partition("-")
    settings: dict[str, Any] = {"max_steps": steps + 2, "context": mode}
    if pruning:
        settings["history_pruning"] = pruning
    return settings


def config_for(server_url: str, family: str, context: str, steps: int, settings: dict[str, Any]) -> AgentConfig:
    """Every role at the server's one URL, as ``webagent run --base-url`` sets them (the server tells
    each request's role by what it asks for): the validator is the policy's model on its server."""
    policy_model, localizer_model, profile = roles_of(family)
    models = {"policy": policy_model, "localizer": localizer_model, "validator": policy_model}
    data: dict[str, Any] = {
        role: {"base_url": f"{server_url}/v1", "model": model, "api_key": "offline", "timeout_s": 120.0}
        for role, model in models.items()
    }
    data["policy"]["family"] = family
    data["localizer"]["profile"] = profile
    data["agent"] = agent_settings(context, steps)
    for key, value in settings.items():
        section, _, field = key.partition(".")
        data[section][field] = value
    return AgentConfig.model_validate(data)


def screenshot_tokens(config: AgentConfig) -> int:
    """What one step's screenshot costs the policy (at the size of the role that places clicks)."""
    family = FAMILIES[config.policy.resolved_family(config.localizer)]
    viewport = config.browser.viewport
    rule = family.rule if config.grounding() == "policy" else config.localizer.resize_rule()
    frame = frame_for(viewport.width, viewport.height, rule)
    return family.image_tokens(frame.image_width, frame.image_height, max_num_tiles=config.policy.max_num_tiles)


async def run(
    base: str, spec: str, context: str, sessions: int, steps: int, latency: float, workdir: Path
) -> dict[str, Any]:
    family, settings, extra = variant(spec)
    out = workdir / f"{spec}-{context}"
    out.mkdir()
    server = OfflineServer(script(base, steps, latency), out, extra)
    try:
        tasks_file = out / "tasks.jsonl"
        tasks_file.write_text(
            "".join(
                json.dumps({"id": f"s{i}", "url": f"{base}/bench/", "goal": f"Take the tour ({i})"}) + "\n"
                for i in range(sessions)
            )
        )
        config = config_for(server.url, family, context, steps, settings)
        config.browser.contexts_per_browser = max(sessions, 1)
        before = MetricsSample(0.0, parse_prometheus(server.get("/metrics").decode()))
        stats = await BatchRunner(
            config, load_tasks(tasks_file, trusted=True), out / "batch", concurrency=sessions
        ).run()
        after = MetricsSample(1.0, parse_prometheus(server.get("/metrics").decode()))
        per_role = json.loads(server.get("/_stats"))["tokens"]
        tokens = per_role["policy"]
    finally:
        server.stop()
    results = read_results(out / "batch")
    queries = (after.get(CACHE_QUERIES) or 0.0) - (before.get(CACHE_QUERIES) or 0.0)
    hits = (after.get(CACHE_HITS) or 0.0) - (before.get(CACHE_HITS) or 0.0)
    requests = max(tokens["requests"], 1)
    clicks, click_requests = click_steps(out / "batch")
    reference = screenshot_tokens(config) + tokens["turn_tokens"] / requests
    uncached_per_step = (queries - hits) / max(stats.steps, 1)
    return {
        "family": spec,
        "context": context,
        "validated": f"{sum(r.success for r in results)}/{sessions}",
        "steps": stats.steps,
        "policy_requests": tokens["requests"],
        "policy_uncached_per_request": round((tokens["prompt_tokens"] - tokens["cached_tokens"]) / requests),
        "policy_prompt_per_request": round(tokens["prompt_tokens"] / requests),
        "policy_cached_share": round(tokens["cached_tokens"] / max(tokens["prompt_tokens"], 1), 3),
        "largest_policy_request": tokens["max_prompt_tokens"],
        "all_roles_cached_share": round(hits / queries, 3) if queries else None,
        "all_roles_uncached_per_step": round(uncached_per_step),
        "grounding": config.grounding(),
        "validator_context": config.validator_context(),
        "validator_uncached_per_task": round(
            (per_role["validator"]["prompt_tokens"] - per_role["validator"]["cached_tokens"]) / max(sessions, 1)
        ),
        "requests_per_click_step": round(click_requests / clicks, 2) if clicks else None,
        "reference_per_step": round(reference),
        "ratio": round(uncached_per_step / reference, 3),
    }


def click_steps(batch: Path) -> tuple[int, int]:
    """(steps whose action was a click, a write or a select; the policy and localizer requests
    those steps made), over every run of the batch."""
    steps = requests = 0
    for trajectory in batch.rglob("trajectory.jsonl"):
        for line in trajectory.read_text().splitlines():
            step = json.loads(line)
            if (step.get("action") or {}).get("action") in ("click_element", "write_element", "select_option"):
                steps += 1
                calls = step.get("calls") or []
                requests += sum(c["usage"]["calls"] for c in calls if c["role"] in ("policy", "localizer"))
    return steps, requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=8, help="sessions at once")
    parser.add_argument("--steps", type=int, default=12, help="steps per task (the last one answers)")
    parser.add_argument("--latency", type=float, default=1.0, help="model latency per call, seconds")
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated policy families")
    parser.add_argument(
        "--contexts",
        default="append,window,history-epoch,history-step",
        help="comma-separated policy contexts (history-<epoch|step>: the history context and its pruning)",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines too")
    args = parser.parse_args()
    sites = subprocess.Popen([sys.executable, "-m", "webagent.testing.sites"], stdout=subprocess.PIPE, text=True)
    assert sites.stdout is not None
    base = sites.stdout.readline().strip().rsplit(" ", 1)[-1]
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="webagent-prefix-") as tmp:
            for family in args.families.split(","):
                for context in args.contexts.split(","):
                    row = asyncio.run(run(base, family, context, args.sessions, args.steps, args.latency, Path(tmp)))
                    rows.append(row)
                    if args.json:
                        print(json.dumps(row), flush=True)
    finally:
        sites.terminate()
        sites.wait(10)
    print(
        f"\n{args.sessions} sessions x {args.steps}-step tasks, {args.latency:g} s model latency; "
        "simulated vLLM prefix cache (16-token blocks unless @align<N>)\n"
    )
    head = (
        "| policy family | context | grounding | validator judges in | validated "
        "| policy tokens/request not cached | policy prompt/request "
        "| policy cached share | largest policy request | validator tokens/task not cached "
        "| all roles cached share | all roles uncached/step "
        "| requests/click step | screenshot + turn/step | ratio |"
    )
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for r in rows:
        print(
            f"| {r['family']} | {r['context']} | {r['grounding']} | {r['validator_context']} | {r['validated']} "
            f"| {r['policy_uncached_per_request']:,} "
            f"| {r['policy_prompt_per_request']:,} | {r['policy_cached_share']:.1%} | {r['largest_policy_request']:,} "
            f"| {r['validator_uncached_per_task']:,} "
            f"| {r['all_roles_cached_share']:.1%} | {r['all_roles_uncached_per_step']:,} "
            f"| {r['requests_per_click_step']} | {r['reference_per_step']:,} | {r['ratio']:.2f} |"
        )


if __name__ == "__main__":
    main()
