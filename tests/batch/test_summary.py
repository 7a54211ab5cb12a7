"""Batch summaries (percentiles, cost, rates, the printed table) and vLLM server metrics."""

from __future__ import annotations

import io
import json
import re
import time

import pytest
from pydantic import ValidationError
from rich.console import Console

from webagent.batch import AttemptRecord, BatchStats, Rerun, TaskResult, cost_of
from webagent.batch.servermetrics import MetricsSample, parse_prometheus, sample, server_report
from webagent.batch.stats import AdmissionState
from webagent.batch.summary import BatchSummary, percentile, print_summary, summarize
from webagent.config import AgentConfig, RoleConfig
from webagent.records import RoleUsage, Usage

from ..conftest import ServerFactory

# ---------------------------------------------------------------- percentile


def test_percentile_known_values() -> None:
    values = [float(v) for v in range(1, 11)]
    assert percentile(values, 0.5) == pytest.approx(5.5)
    assert percentile(values, 0.9) == pytest.approx(9.1)
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 1.0) == 10.0
    assert percentile(list(reversed(values)), 0.9) == pytest.approx(9.1)  # order does not matter
    assert percentile([3.0], 0.9) == 3.0
    assert percentile([1.0, 3.0], 0.5) == 2.0
    assert percentile([], 0.5) is None


# ---------------------------------------------------------------- cost


def priced_config() -> AgentConfig:
    return AgentConfig.model_validate(
        {
            "policy": {"price_prompt_per_m": 0.20, "price_completion_per_m": 0.80},
            "localizer": {"price_prompt_per_m": 0.10, "price_completion_per_m": 0.40},
            "validator": {"price_prompt_per_m": 1.00, "price_completion_per_m": 2.00},
        }
    )


def usage(policy: tuple[int, int], localizer: tuple[int, int], validator: tuple[int, int]) -> Usage:
    return Usage(
        policy=RoleUsage(calls=1, prompt_tokens=policy[0], completion_tokens=policy[1]),
        localizer=RoleUsage(calls=1, prompt_tokens=localizer[0], completion_tokens=localizer[1]),
        validator=RoleUsage(calls=1, prompt_tokens=validator[0], completion_tokens=validator[1]),
    )


def test_role_cost() -> None:
    role = RoleConfig(price_prompt_per_m=0.20, price_completion_per_m=0.80)
    # 1,234,567 x $0.20/M = $0.2469134; 89,000 x $0.80/M = $0.0712
    assert role.cost(1_234_567, 89_000) == pytest.approx(0.3181134, abs=1e-12)
    assert role.cost(0, 0) == 0.0
    assert RoleConfig().cost(10**9, 10**9) == 0.0  # unpriced roles are free
    with pytest.raises(ValueError):
        RoleConfig(price_prompt_per_m=-1)


def test_cost_of_sums_the_roles() -> None:
    u = usage((1_234_567, 89_000), (500_000, 2_000), (100_000, 10_000))
    # policy 0.2469134 + 0.0712; localizer 0.05 + 0.0008; validator 0.1 + 0.02
    assert cost_of(u, priced_config()) == pytest.approx(0.3181134 + 0.0508 + 0.12, abs=1e-12)
    assert cost_of(Usage(), priced_config()) == 0.0


# ---------------------------------------------------------------- summarize


def result(
    task_id: str,
    *,
    success: bool,
    steps: int,
    attempts: int = 1,
    stop_reason: str = "answered",
    retried: bool = False,
    reference_match: bool | None = None,
    u: Usage | None = None,
) -> TaskResult:
    records = [
        AttemptRecord(
            attempt=k,
            success=success and k == attempts,
            answer="a",
            stop_reason=stop_reason,
            message="",
            steps=steps // attempts,
            duration_s=1.0,
            output_dir=f"runs/{task_id}/attempt-{k}",
        )
        for k in range(1, attempts + 1)
    ]
    return TaskResult(
        id=task_id,
        url="https://example.com",
        goal="g",
        success=success,
        answer="a",
        stop_reason=stop_reason,
        message="",
        attempts=attempts,
        attempt_records=records,
        steps=steps,
        usage=u or Usage(),
        cost_usd=0.0,
        duration_s=1.0,
        retried=retried,
        reference=["a"] if reference_match is not None else [],
        reference_match=reference_match,
    )


def hand_made() -> tuple[list[TaskResult], BatchStats]:
    results = [
        result(
            "t1", success=True, steps=4, reference_match=True, u=usage((1_000_000, 50_000), (200_000, 1_000), (0, 0))
        ),
        result(
            "t2", success=False, steps=9, attempts=3, reference_match=False, u=usage((234_567, 39_000), (0, 0), (0, 0))
        ),
        result("t3", success=True, steps=2, retried=True, u=usage((0, 0), (300_000, 1_000), (100_000, 10_000))),
        result("t4", success=False, steps=1, stop_reason="error", reference_match=True),
    ]
    stats = BatchStats(total=6, already_done=1)
    stats.finished_now = 3
    stats.steps = 20
    stats.tokens = 5_000
    stats.step_total_s = [float(v) for v in range(1, 11)]
    stats.step_model_s = [0.5] * 10
    stats.step_browser_s = [0.1, 0.2, 0.3]
    stats.started = time.monotonic() - 10.0  # ten seconds of wall time
    return results, stats


def test_summarize() -> None:
    results, stats = hand_made()
    s = summarize(results, stats, priced_config(), attempts=3)
    assert s.tasks == 6 and s.finished == 4 and s.interrupted is False
    assert s.succeeded == 2 and s.success_rate == 0.5
    assert s.pass_at == 3
    assert s.reference.model_dump() == {"scored": 3, "matched": 2, "match_rate": 0.667}
    assert s.steps_per_task == 4.0  # (4 + 9 + 2 + 1) / 4
    assert s.attempts_per_task == 1.5  # (1 + 3 + 1 + 1) / 4
    assert s.errors == 1
    assert s.retried_after_crash == 1
    assert s.stalled == 0
    assert s.as_json()["tokens"] == {
        "policy": {"prompt": 1_234_567, "cached": 0, "completion": 89_000},
        "localizer": {"prompt": 500_000, "cached": 0, "completion": 2_000},
        "validator": {"prompt": 100_000, "cached": 0, "completion": 10_000},
    }
    assert s.cost_usd == {"policy": 0.318113, "localizer": 0.0508, "validator": 0.12, "total": 0.488913}
    run = s.run
    assert run.wall_time_s == pytest.approx(10.0, abs=0.5)
    assert run.tasks_finished == 3 and run.tasks_resumed == 1 and run.steps == 20
    assert run.steps_per_s == pytest.approx(2.0, rel=0.05)
    assert run.model_tokens_per_s == pytest.approx(500.0, rel=0.05)
    assert run.step_latency_s.model_dump() == {
        "p50": 5.5,
        "p90": 9.1,
        "model_p50": 0.5,
        "model_p90": 0.5,
        "browser_p50": 0.2,
        "browser_p90": 0.28,
    }
    assert "server" not in s.as_json() and "admission" not in s.as_json() and "benchmarks" not in s.as_json()


def test_summarize_nothing_finished() -> None:
    stats = BatchStats(total=3, already_done=0)
    s = summarize([], stats, AgentConfig(), attempts=1, interrupted=True, server={"url": "u", "error": "x"})
    assert s.finished == 0 and s.interrupted is True
    assert s.success_rate is None and s.steps_per_task is None and s.attempts_per_task is None
    assert s.reference.model_dump() == {"scored": 0, "matched": 0, "match_rate": None}
    assert s.cost_usd["total"] == 0.0
    assert s.run.step_latency_s.p50 is None
    assert s.as_json()["server"] == {"url": "u", "error": "x"}  # the figures it could not read left out


def render(summary: BatchSummary) -> str:
    buffer = io.StringIO()
    print_summary(summary, Console(file=buffer, width=160, highlight=False, color_system=None))
    return buffer.getvalue()


def test_print_summary() -> None:
    results, stats = hand_made()
    server = {"url": "u", "generation_tokens_per_s": 123.4, "prefix_cache_hit_rate": 0.75}
    text = render(summarize(results, stats, priced_config(), attempts=3, server=server))
    assert "validated success (pass@3)" in text and "50.0%" in text
    assert "4/6" in text
    assert "matches reference answer" in text and "2/3 (66.7%)" in text
    assert "1,234,567 / 89,000" in text  # policy tokens
    assert "$0.4889" in text
    assert "5.5s / 9.1s" in text
    assert "123.4" in text and "75.0%" in text


def test_print_summary_shows_a_causes_control_characters_and_markup_as_text() -> None:
    """A re-run's cause quotes a browser's error (a page's words): shown, never acted on."""
    results, stats = hand_made()
    summary = summarize(results, stats, priced_config(), attempts=1)
    summary.infra_reruns = 1
    summary.run.infra_rerun_causes = {"crashed at \x1b]0;pwned\x07\u009b2J [bold]x[/bold]": 1}
    buffer = io.StringIO()
    print_summary(summary, Console(file=buffer, width=200, highlight=False, force_terminal=True))
    text = buffer.getvalue()
    assert "\x07" not in text and "\u009b" not in text and "]0;pwned" in text
    assert "\x1b]0;" not in text  # (the table's own colours are escape sequences: this one is not)
    assert r"1 x crashed at \x1b]0;pwned\x07\x9b2J [bold]x[/bold]" in text


def test_print_summary_shows_a_set_up_crashs_cause_as_text() -> None:
    """A set-up crash's cause quotes a browser's error too: the same text, never markup or control."""
    results, stats = hand_made()
    summary = summarize(results, stats, priced_config(), attempts=1)
    summary.setup_crash_reruns = 1
    summary.run.setup_crash_causes = {"gone at \x1b]0;pwned\x07\u009b2J [bold]x[/bold]": 1}
    buffer = io.StringIO()
    print_summary(summary, Console(file=buffer, width=200, highlight=False, force_terminal=True))
    text = buffer.getvalue()
    assert "\x07" not in text and "\u009b" not in text and "\x1b]0;" not in text
    assert r"1 (1 x gone at \x1b]0;pwned\x07\x9b2J [bold]x[/bold])" in text


def test_print_summary_of_an_empty_interrupted_batch() -> None:
    text = render(summarize([], BatchStats(total=2, already_done=0), AgentConfig(), attempts=1, interrupted=True))
    assert "0/2 (interrupted)" in text
    assert "validated success (pass@1)" in text
    assert "matches reference answer" not in text


# ---------------------------------------------------------------- server metrics

PROMETHEUS = """\
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="a",engine="0"} 100
vllm:generation_tokens_total{model_name="b",engine="1"} 50.5

vllm:prompt_tokens_total 1e3
vllm:num_requests_running{model_name="a"} 2
vllm:num_requests_running{model_name="b"} -1
# vllm:prompt_tokens_total 999999
process_start_time_seconds 1.7e+09
"""


def test_parse_prometheus() -> None:
    values = parse_prometheus(PROMETHEUS)
    assert values == {
        "vllm:generation_tokens_total": 150.5,
        "vllm:prompt_tokens_total": 1000.0,
        "vllm:num_requests_running": 1.0,
        "process_start_time_seconds": 1.7e9,
    }
    assert parse_prometheus("") == {}
    assert parse_prometheus("# only\n# comments\n") == {}


CACHE_Q, CACHE_H = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"
GEN, PROMPT = "vllm:generation_tokens_total", "vllm:prompt_tokens_total"


def test_server_report_rates() -> None:
    before = MetricsSample(100.0, {GEN: 1_000, PROMPT: 5_000, CACHE_Q: 4_000, CACHE_H: 1_000})
    after = MetricsSample(110.0, {GEN: 3_000, PROMPT: 15_000, CACHE_Q: 8_000, CACHE_H: 3_000})
    report = server_report(before, after, "http://h/metrics")
    assert report == {
        "url": "http://h/metrics",
        "generation_tokens": 2_000,
        "generation_tokens_per_s": 200.0,
        "prompt_tokens": 10_000,
        "prompt_tokens_per_s": 1_000.0,
        "prefix_cache_hit_rate": 0.5,
        "uncached_prompt_tokens": 2_000,
    }
    # The summary turns the uncached tokens into a figure per step, and prints both.
    results, stats = hand_made()
    summary = summarize(results, stats, priced_config(), attempts=1, server=report)
    assert summary.server is not None and summary.server.uncached_prompt_tokens_per_step == round(2_000 / stats.steps)
    console = Console(record=True, width=160)
    print_summary(summary, console)
    text = console.export_text()
    assert re.search(r"server prefix cache: cached share\W+50\.0%", text)
    assert re.search(rf"server prompt tokens not cached, per step\W+{round(2_000 / stats.steps):,}\b", text)


def test_server_report_gauge_and_older_names() -> None:
    # Older vLLM: gpu_* counters; no counters at all: the hit-rate gauge of the second sample.
    before = MetricsSample(0.0, {"vllm:gpu_prefix_cache_queries_total": 10, "vllm:gpu_prefix_cache_hits_total": 0})
    after = MetricsSample(2.0, {"vllm:gpu_prefix_cache_queries_total": 30, "vllm:gpu_prefix_cache_hits_total": 5})
    report = server_report(before, after, "u")
    assert report["prefix_cache_hit_rate"] == 0.25
    assert report["generation_tokens"] is None and report["generation_tokens_per_s"] is None
    gauge = server_report(MetricsSample(0.0, {}), MetricsSample(1.0, {"vllm:gpu_prefix_cache_hit_rate": 0.12345}), "u")
    assert gauge["prefix_cache_hit_rate"] == 0.1235
    sglang = server_report(
        MetricsSample(0.0, {"sglang:generation_tokens_total": 0}),
        MetricsSample(4.0, {"sglang:generation_tokens_total": 100, "sglang:cache_hit_rate": 0.5}),
        "u",
    )
    assert sglang["generation_tokens_per_s"] == 25.0 and sglang["prefix_cache_hit_rate"] == 0.5


def test_server_report_missing_samples() -> None:
    some = MetricsSample(1.0, {GEN: 1})
    for before, after in [(None, some), (some, None), (None, None)]:
        report = server_report(before, after, "http://127.0.0.1:9/metrics")
        assert report == {
            "url": "http://127.0.0.1:9/metrics",
            "error": "could not read metrics from http://127.0.0.1:9/metrics",
        }


async def test_sample_from_the_offline_server(model_server: ServerFactory) -> None:
    script = {"tasks": [{"id": "t", "match": "anything", "validator": {"accept": ["yes"]}}]}
    async with model_server(script) as server:
        server.metrics[GEN] = 42
        server.metrics[CACHE_Q] = 10
        got = await sample(server.url + "/metrics")
        dead_port = server.port
    assert got is not None
    assert got.values[GEN] == 42.0 and got.values[CACHE_Q] == 10.0 and got.values[CACHE_H] == 0.0
    assert await sample(f"http://127.0.0.1:{dead_port}/metrics", timeout_s=2) is None
    assert await sample("not a url") is None


def test_print_summary_of_a_resumed_batch_in_which_nothing_ran() -> None:
    results, _ = hand_made()
    stats = BatchStats(total=4, already_done=4)  # everything resumed: no step ran in this invocation
    server = {"url": "http://127.0.0.1:9/metrics", "error": "could not read metrics from http://127.0.0.1:9/metrics"}
    text = render(summarize(results, stats, priced_config(), attempts=3, server=server))
    assert "None" not in text, text
    latency = next(line for line in text.splitlines() if "step latency p50/p90" in line)
    assert latency.replace("step latency p50/p90", "").strip(" │|") == "-", latency
    assert "0 run now, 4 resumed" in text
    assert "could not read metrics" in text

    empty = render(summarize([], BatchStats(total=2, already_done=0), AgentConfig(), attempts=1))
    assert "None" not in empty, empty
    row = next(line for line in empty.splitlines() if "steps / attempts per task" in line)
    assert row.replace("steps / attempts per task", "").strip(" │|") == "- / -", row


def test_summary_counts_crash_reruns_and_stalls() -> None:
    def with_reruns(task_id: str, *reasons: str, stalled: bool = False, retried: bool = True) -> TaskResult:
        r = result(task_id, success=not stalled, steps=3, retried=retried)
        r.attempt_records[0].retried = bool(reasons)
        r.attempt_records[0].stalled = stalled
        r.attempt_records[0].reruns = [
            Rerun(reason=reason, message="m", steps=1, duration_s=1.0)  # type: ignore[arg-type]
            for reason in reasons
        ]
        return r

    results = [
        with_reruns("crash", "browser_crash", "browser_crash"),
        with_reruns("stall", "stalled"),
        with_reruns("both", "browser_crash", "stalled"),
        with_reruns("stalled-twice", "stalled", stalled=True),
        with_reruns("legacy"),  # a line from before re-runs were itemised: retried means a crash
        with_reruns("plain", retried=False),
    ]
    s = summarize(results, BatchStats(total=6, already_done=0), AgentConfig(), attempts=1)
    assert s.retried_after_crash == 3  # crash, both, legacy
    assert s.stalled == 3  # stall, both, stalled-twice
    text = render(s)
    assert "errors (infrastructure) / retried after crash / stalled" in text and "0 (0) / 3 / 3" in text


# ---------------------------------------------------------------- summary.json: its shape, read back

#: summary.json of ``every_section()`` as the batch wrote it before it had a model (dict by dict):
#: the model writes the same keys in the same order.
SUMMARY_JSON = {
    "tasks": 6,
    "finished": 4,
    "interrupted": False,
    "succeeded": 2,
    "success_rate": 0.5,
    "pass_at": 3,
    "reference": {"scored": 3, "matched": 2, "match_rate": 0.667},
    "steps_per_task": 4.0,
    "attempts_per_task": 1.5,
    "errors": 1,
    "needs_human": 0,
    "infrastructure_errors": 0,
    "retried_after_crash": 1,
    "setup_crash_reruns": 0,
    "stalled": 0,
    "infra_reruns": 0,
    "tokens": {
        "policy": {"prompt": 1234567, "cached": 0, "completion": 89000},
        "localizer": {"prompt": 500000, "cached": 0, "completion": 2000},
        "validator": {"prompt": 100000, "cached": 0, "completion": 10000},
    },
    "cost_usd": {"policy": 0.318113, "localizer": 0.0508, "validator": 0.12, "total": 0.488913},
    "run": {
        "wall_time_s": 10.0,
        "tasks_finished": 3,
        "tasks_resumed": 1,
        "resumed_failed": 0,
        "resumed_infra_errors_rerun": 0,
        "infra_rerun_causes": {"gone": 2},
        "setup_crash_causes": {"closed": 1},
        "steps": 20,
        "steps_per_s": 2.0,
        "model_tokens_per_s": 500.0,
        "step_latency_s": {
            "p50": 5.5,
            "p90": 9.1,
            "model_p50": 0.5,
            "model_p90": 0.5,
            "browser_p50": 0.2,
            "browser_p90": 0.28,
        },
        "browser_commands": {"answered": 40, "extended": 3, "expired": 1},
    },
    "benchmarks": {"miniwob/click-test": {"tasks": 2, "succeeded": 1, "errors": 1, "success_rate": 0.5}},
    "admission": {
        "ceiling": 500,
        "limit": 11,
        "limit_lowest": 11,
        "limit_highest": 16,
        "peak_running": 9,
        "decreases": 1,
        "held_back_s": 2.5,
        "reason": "r",
    },
    "server": {
        "url": "u",
        "generation_tokens": 2000.0,
        "generation_tokens_per_s": 200.0,
        "prompt_tokens": 10000.0,
        "prompt_tokens_per_s": 1000.0,
        "prefix_cache_hit_rate": 0.5,
        "uncached_prompt_tokens": 2000.0,
        "uncached_prompt_tokens_per_step": 100,
    },
}


def every_section() -> BatchSummary:
    """A summary with every section: references, benchmarks, admission, server, re-run causes."""
    results, stats = hand_made()
    results[0].benchmark = results[3].benchmark = "miniwob/click-test"
    stats.admission = AdmissionState(
        limit=11, ceiling=500, held=3, reason="r", lowest=11, highest=16, peak_running=9, decreases=1, held_back_s=2.5
    )
    stats.commands = {"answered": 40, "extended": 3, "expired": 1}
    stats.infra_causes["gone"] += 2
    stats.setup_causes["closed"] += 1
    server = {
        "url": "u",
        "generation_tokens": 2000.0,
        "generation_tokens_per_s": 200.0,
        "prompt_tokens": 10000.0,
        "prompt_tokens_per_s": 1000.0,
        "prefix_cache_hit_rate": 0.5,
        "uncached_prompt_tokens": 2000.0,
    }
    summary = summarize(results, stats, priced_config(), attempts=3, server=server)
    summary.run.wall_time_s, summary.run.steps_per_s, summary.run.model_tokens_per_s = 10.0, 2.0, 500.0
    return summary


def test_summary_json_keeps_its_shape() -> None:
    written = every_section().text()
    assert json.loads(written) == SUMMARY_JSON
    assert written == json.dumps(SUMMARY_JSON, indent=2) + "\n"  # the order of the keys, the text, too


def test_summary_json_read_back_through_the_model_writes_the_same() -> None:
    for summary in (
        every_section(),
        summarize([], BatchStats(total=2, already_done=0), AgentConfig(), attempts=1, interrupted=True),
        summarize(
            [], BatchStats(total=1, already_done=0), AgentConfig(), attempts=1, server={"url": "u", "error": "x"}
        ),
    ):
        text = summary.text()
        again = BatchSummary.model_validate_json(text)
        assert again == summary and again.text() == text


def test_a_summary_json_with_a_key_it_does_not_know_or_a_wrong_type_is_refused() -> None:
    good = json.loads(every_section().text())
    with pytest.raises(ValidationError, match="surprise"):
        BatchSummary.model_validate({**good, "surprise": 1})
    with pytest.raises(ValidationError, match="finished"):
        BatchSummary.model_validate({**good, "finished": "four"})
