"""Export: the messages rebuilt from a run equal the requests the model server received; filters; dedup."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser

from webagent import Agent
from webagent.errors import InputError
from webagent.records import Step
from webagent.runs.trajectory import read_trajectory
from webagent.testing.chat import is_repair
from webagent.testing.server import FakeModelServer, RecordedRequest
from webagent.training.export import ExportOptions, RunRef, export_sft, find_runs

from ..conftest import load_task_script, make_config

pytestmark = pytest.mark.browser


def read_records(output: Path) -> list[dict[str, Any]]:
    lines = (output / "data.jsonl").read_text(encoding="utf-8").split("\n")
    return [json.loads(line) for line in lines if line]


def as_received(record_messages: list[dict[str, Any]], output: Path) -> list[dict[str, Any]]:
    """Exported messages with each image path replaced by the digest the server records."""
    out = []
    for message in record_messages:
        parts = []
        for part in message["content"]:
            if part["type"] == "image_url":
                digest = hashlib.sha256((output / part["image_url"]["url"]).read_bytes()).hexdigest()
                part = {"type": "image_url", "image_url": {"url": f"sha256:{digest}"}}
            parts.append(part)
        out.append({**message, "content": parts})
    return out


def uniform(request: RecordedRequest) -> list[dict[str, Any]]:
    return [
        {**m, "content": [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"]}
        for m in request.messages
    ]


@pytest.fixture(scope="module")
async def runs(
    browser: Browser, local_tasks: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Three runs against the offline server, with the requests it received.

    catalog-feedback: an answer rejected, then accepted (feedback and notes in later prompts), and
    a malformed policy reply at request 2 (a repair). catalog-price with max_steps=1: a failed run.
    """
    base = tmp_path_factory.mktemp("runs")
    out: dict[str, Any] = {}
    specs = [
        ("feedback", "catalog-feedback", {"faults": [{"role": "policy", "nth": 2, "kind": "malformed"}]}, {}),
        ("price", "catalog-price", {}, {}),
        ("failed", "catalog-price", {}, {"max_steps": 1}),
        ("judged", "catalog-feedback", {}, {}),
    ]
    for name, task_id, extra, settings in specs:
        task = local_tasks[task_id]
        async with FakeModelServer({**load_task_script("local"), **extra}) as server:
            config = make_config(server, **settings)
            if name == "judged":  # Holo3.1 with tool calls, its answers judged in its own conversation
                config = make_config(server, "holo3.1", family="holo3.1")
                config.policy.output = "tools"
                config.policy.base_url = config.validator.base_url = f"{server.url}/v1"
            async with Agent(config, browser=browser) as agent:
                result = await agent.run(task["url"], task["goal"], output_dir=base / name)
            out[name] = (base / name, result, list(server.requests))
    return out


async def test_exported_messages_are_the_requests_sent(runs: dict[str, Any], tmp_path: Path) -> None:
    directory, result, requests = runs["feedback"]
    assert result.success and result.attempts == 2
    stats = export_sft([RunRef(directory, "catalog-feedback")], tmp_path, ExportOptions(include_failed=True))
    records = read_records(tmp_path)
    # 4 steps: write+locate, click+locate (the policy reply repaired), answer+reject, answer+accept
    assert stats.records == len(records) == 8
    # The server got one request per call, plus the repair request of the repaired call.
    repaired = [i for i, r in enumerate(records) if r["metadata"]["repaired"]]
    assert len(repaired) == 1
    sent = [r for r in requests if not is_repair(r.messages)]
    assert len(sent) == len(records) == len(requests) - 1
    for record, request in zip(records, sent, strict=True):
        assert record["role"] == request.role
        assert as_received(record["messages"], tmp_path) == uniform(request)
    # The content the prompts carry: feedback after the rejection, notes, several screenshots.
    policy = [r for r in records if r["role"] == "policy"]
    last = policy[-1]["messages"]  # append-only: the step's own turn last, the replies between turns
    assert "Include the currency symbol" in last[-1]["content"][0]["text"]
    assert any(m["role"] == "assistant" and "note" in json.dumps(m["content"]) for m in last)
    assert max(len(r["images"]) for r in policy) == 4  # one screenshot per turn, 4 steps in one epoch
    # The repaired call's target is the reply that parsed; the run's validated success is in metadata.
    assert json.loads(records[repaired[0]]["target"])["action"]
    assert all(r["metadata"]["success"] is True and r["metadata"]["task_id"] == "catalog-feedback" for r in records)
    assert {r["metadata"]["model"] for r in records} == {"Hcompany/Holo1.5-7B"}
    # Images are files in the export, shared by the records that show them.
    paths = {p for r in records for p in r["images"]}
    assert all((tmp_path / p).is_file() and p.startswith("images/") for p in paths)
    assert stats.images == len(paths) == len(list((tmp_path / "images").iterdir()))


async def test_a_validator_that_judged_in_the_policy_s_conversation_is_exported_as_it_was_asked(
    runs: dict[str, Any], tmp_path: Path
) -> None:
    directory, result, requests = runs["judged"]
    assert result.success and result.attempts == 2
    export_sft([RunRef(directory, "catalog-feedback")], tmp_path, ExportOptions(include_failed=True))
    records = read_records(tmp_path)
    assert len(records) == len(requests)
    for record, request in zip(records, requests, strict=True):
        assert record["role"] == request.role
        assert as_received(record["messages"], tmp_path) == uniform(request)
        assert record["tools"] == request.extra.get("tools")
    judged = [r for r in records if r["role"] == "validator"]
    assert len(judged) == 2 and all(len(r["messages"]) > 2 and r["images"] for r in judged)


async def test_a_role_that_returns_tokens_keeps_them_in_its_steps_and_its_records(
    browser: Browser, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    """[policy] return_tokens: the offline server gives each policy request's tokens as vLLM does; the
    steps keep them (one per reply, the repair's too) and the export carries the target's."""
    task = local_tasks["catalog-feedback"]
    script = {**load_task_script("local"), "faults": [{"role": "policy", "nth": 2, "kind": "malformed"}]}
    async with FakeModelServer(script) as server:
        config = make_config(server)
        config.policy.return_tokens = True
        async with Agent(config, browser=browser) as agent:
            result = await agent.run(task["url"], task["goal"], output_dir=tmp_path / "run")
        requests = [r for r in server.requests if r.role == "policy"]
    assert result.success
    steps = [Step.model_validate(s) for s in read_trajectory(tmp_path / "run")]
    calls = [c for s in steps for c in s.calls]
    policy = [c for c in calls if c.role == "policy"]
    assert all(c.tokens is not None and len(c.tokens) == len(c.raw) for c in policy)
    assert [len(c.tokens or []) for c in policy] == [1, 2, 1, 1]  # the repaired call: the repair's tokens too
    assert all(c.tokens is None for c in calls if c.role != "policy")  # only the role that asked
    export_sft([RunRef(tmp_path / "run", "catalog-feedback")], tmp_path / "sft")
    records = read_records(tmp_path / "sft")
    exported = [r["tokens"] for r in records if r["role"] == "policy"]
    assert all("tokens" not in r for r in records if r["role"] != "policy")
    answered = [r for r in requests if r.fault != "malformed"]  # the requests whose reply is a target
    assert [len(t["prompt_token_ids"]) for t in exported] == [r.prompt_tokens for r in answered]
    assert all(len(t["completion_token_ids"]) == len(t["completion_logprobs"]) > 0 for t in exported)
    last = policy[-1].tokens
    assert last is not None and exported[-1]["completion_token_ids"] == last[-1].token_ids


async def test_role_task_and_success_filters(runs: dict[str, Any], tmp_path: Path) -> None:
    refs = [RunRef(runs[name][0], task) for name, task in [("feedback", "fb"), ("price", "pr"), ("failed", "pr")]]
    assert not runs["failed"][1].success
    export_sft(refs, tmp_path / "all")
    everything = read_records(tmp_path / "all")
    assert {r["metadata"]["success"] for r in everything} == {True, False}
    export_sft(refs, tmp_path / "ok", ExportOptions(success_only=True))
    ok = read_records(tmp_path / "ok")
    assert ok and all(r["metadata"]["success"] for r in ok) and len(ok) < len(everything)
    export_sft(refs, tmp_path / "loc", ExportOptions(roles=frozenset({"localizer"})))
    loc = read_records(tmp_path / "loc")
    assert loc and {r["role"] for r in loc} == {"localizer"}
    assert all(len(r["messages"]) == 1 and len(r["images"]) == 1 for r in loc)
    export_sft(refs, tmp_path / "fb", ExportOptions(tasks=frozenset({"fb"})))
    assert {r["metadata"]["task_id"] for r in read_records(tmp_path / "fb")} == {"fb"}
    # The unusable (malformed, then repaired) call is in; failed calls are left out by default.
    assert all(r["metadata"]["error"] is None for r in everything)


async def test_identical_steps_are_written_once(runs: dict[str, Any], tmp_path: Path) -> None:
    directory = runs["price"][0]
    once = export_sft([RunRef(directory, "t")], tmp_path / "once")
    twice = export_sft([RunRef(directory, "t"), RunRef(directory, "t")], tmp_path / "twice")
    assert once.duplicates == 0 and twice.duplicates == once.records == twice.records
    assert read_records(tmp_path / "once") == read_records(tmp_path / "twice")
    ids = [r["id"] for r in read_records(tmp_path / "once")]
    assert len(set(ids)) == len(ids)


async def test_per_step_records_group_the_calls_of_a_step(runs: dict[str, Any], tmp_path: Path) -> None:
    directory, result, _ = runs["price"]
    export_sft([RunRef(directory, "t")], tmp_path, ExportOptions(per="step"))
    records = read_records(tmp_path)
    assert [r["metadata"]["step"] for r in records] == list(range(1, result.steps + 1))
    assert [[c["role"] for c in r["calls"]] for r in records] == [
        ["policy", "localizer"],
        ["policy", "localizer"],
        ["policy", "validator"],
    ]
    assert records[0]["metadata"]["action"]["action"] == "write_element"


async def test_dataset_loads_with_hugging_face_datasets(runs: dict[str, Any], tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    refs = [RunRef(runs[name][0], name) for name in ("feedback", "price", "failed")]
    stats = export_sft(refs, tmp_path)
    data = datasets.load_dataset("json", data_files=str(tmp_path / "data.jsonl"), split="train")
    assert len(data) == stats.records
    row = data[0]
    assert row["role"] == "policy" and row["messages"][0]["role"] == "system"
    assert row["messages"][1]["content"][1]["image_url"]["url"] == row["images"][0]
    assert isinstance(row["target"], str) and row["metadata"]["step"] == 1


def test_older_runs_without_prompt_context_are_skipped(runs: dict[str, Any], tmp_path: Path) -> None:
    source = runs["price"][0]
    old = tmp_path / "old"
    old.mkdir()
    for item in source.iterdir():
        (old / item.name).write_bytes(item.read_bytes())
    lines = (old / "trajectory.jsonl").read_text().splitlines()
    stripped = [json.dumps({k: v for k, v in json.loads(line).items() if k != "context"}) for line in lines]
    (old / "trajectory.jsonl").write_text("\n".join(stripped) + "\n")
    stats = export_sft([RunRef(old, "t")], tmp_path / "out")
    assert stats.records == 0 and stats.skipped_steps == 3


def test_find_runs_rejects_what_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        find_runs([tmp_path / "nope"])
    with pytest.raises(InputError, match="neither a run directory"):
        find_runs([tmp_path])


def test_unfinished_runs_are_skipped(runs: dict[str, Any], tmp_path: Path) -> None:
    source = runs["price"][0]
    for item in source.iterdir():
        if item.name != "result.json":
            (tmp_path / item.name).write_bytes(item.read_bytes())
    stats = export_sft(find_runs([tmp_path]), tmp_path / "out")
    assert stats.records == 0 and stats.skipped_runs == [str(tmp_path)]
