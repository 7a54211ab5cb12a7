"""Training data from run directories: one JSONL record per model call (or per step).

The prompts are not stored in a run; they are rebuilt from the step records (their ``context``
holds what the policy was told, ``PolicyState``, and the inputs the other fields lack) with the
same role code that built the requests (the policy's prompt strategy, fed the recorded steps of
its conversation again), so an exported ``messages`` list is what the model was sent, except that each screenshot becomes a
file path relative to the export directory (``images/<sha256>.jpg``, shared by every record that
shows it) and a plain-string ``content`` becomes one text part (one Arrow type for ``datasets``).

A call that needed a repair request is exported with its original messages and the repaired reply
as target (``metadata.repaired``); calls without a usable reply are left out unless asked for.

A call whose role asked its server for tokens (``return_tokens``) carries them (``tokens``: the
prompt's and the target's token ids and the target's logprobs, as the server gave them), so a
trainer need not tokenize the messages again; for a repaired call they are the repair request's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import ValidationError

from ..actions import Answer
from ..batch.results import read_results
from ..errors import InputError
from ..files.disk import make_dir, private_folder, write_atomic
from ..images import Frame, Screenshot
from ..model.client import Message
from ..records import ROLES, ModelCall, RunResult, Step
from ..roles.localizer import LOCALIZER_PROFILES, localizer_messages
from ..roles.policy import speaker_for
from ..roles.prompting import PROMPTS, PromptOptions, answered
from ..roles.validator import continuation_messages, validator_messages
from ..runs.trajectory import read_trajectory
from ..tasks import reference_matches

__all__ = ["ExportOptions", "ExportStats", "RunRef", "export_sft", "find_runs"]

log = structlog.get_logger("webagent.training")

Per = Literal["call", "step"]


@dataclass(frozen=True, slots=True)
class ExportOptions:
    per: Per = "call"
    success_only: bool = False
    roles: frozenset[str] = frozenset(ROLES)
    tasks: frozenset[str] | None = None
    include_failed: bool = False


@dataclass(slots=True)
class ExportStats:
    runs: int = 0
    records: int = 0
    duplicates: int = 0
    images: int = 0
    skipped_runs: list[str] = field(default_factory=list)
    skipped_steps: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "records": self.records,
            "duplicates": self.duplicates,
            "images": self.images,
            "skipped_runs": self.skipped_runs,
            "skipped_steps": self.skipped_steps,
        }


@dataclass(frozen=True, slots=True)
class RunRef:
    """One run directory and what the export tells about it."""

    directory: Path
    task_id: str
    attempt: int | None = None
    references: tuple[str, ...] = ()


def find_runs(inputs: Iterable[str | Path]) -> list[RunRef]:
    """Run directories (``trajectory.jsonl``) and batch directories (``results.jsonl``) to runs."""
    runs: list[RunRef] = []
    for item in inputs:
        path = Path(item)
        if (path / "results.jsonl").is_file():
            try:
                results = read_results(path)
            except ValueError as exc:
                raise InputError(f"{path}/results.jsonl is not a webagent results file: {exc}") from None
            for task in results:
                for rec in task.attempt_records:
                    runs.append(RunRef(path / rec.output_dir, task.id, rec.attempt, tuple(task.reference)))
        elif (path / "trajectory.jsonl").is_file():
            runs.append(RunRef(path, path.name))
        elif not path.is_dir():
            raise InputError(f"{path} does not exist; give run directories or batch output directories")
        else:
            raise InputError(
                f"{path} is neither a run directory (trajectory.jsonl) nor a batch directory (results.jsonl)"
            )
    return runs


@dataclass(frozen=True)
class _StoredShot(Screenshot):
    """A screenshot file of a run, shown in messages as its path in the export."""

    path: str = ""

    def image_part(self, *, uuid: bool = False) -> dict[str, object]:
        return {"type": "image_url", "image_url": {"url": self.path}}


class _Images:
    """Copies screenshots into ``DIR/images`` under their content hash (each file once)."""

    def __init__(self, output: Path, *, private: bool = False) -> None:
        self.output = output
        self.private = private
        self.directory = output / "images"
        self._done: dict[Path, str] = {}
        self.written = 0

    def relative(self, source: Path) -> str:
        if source not in self._done:
            data = source.read_bytes()
            name = f"{hashlib.sha256(data).hexdigest()}{source.suffix}"
            target = self.directory / name
            if not target.exists():
                write_atomic(target, data, private=self.private)  # a killed export: never a truncated image
                self.written += 1
            self._done[source] = f"images/{name}"
        return self._done[source]


class _MissingInput(Exception):
    """A step lacks what its prompt needs (an older run, a missing screenshot)."""


class _Run:
    """Rebuilds the requests of one run's steps."""

    def __init__(self, ref: RunRef, result: RunResult, steps: list[Step], images: _Images) -> None:
        self.ref = ref
        self.result = result
        self.steps = {s.index: s for s in steps}
        self.images = images

    def shots(self, last: int, count: int) -> list[Screenshot]:
        """The screenshots of steps ``last-count+1 .. last`` (the deque the loop sends from)."""
        out: list[Screenshot] = []
        for index in range(max(1, last - count + 1), last + 1):
            step = self.steps.get(index)
            if step is None or step.screenshot is None:
                raise _MissingInput(f"step {index} has no screenshot")
            source = self.ref.directory / step.screenshot
            if not source.is_file():
                raise _MissingInput(f"screenshot {source} is missing")
            w, h = step.image_size
            mime = "image/png" if source.suffix == ".png" else "image/jpeg"
            out.append(_StoredShot("", mime, Frame(w, h, w, h), path=self.images.relative(source)))
        return out

    def messages(self, step: Step, call: ModelCall) -> list[Message]:
        ctx = step.context
        if ctx is None:
            raise _MissingInput("the step has no prompt context (recorded by an older webagent)")
        match call.role:
            case "policy":
                return self.conversation(step)
            case "localizer":
                profile = LOCALIZER_PROFILES.get(ctx.localizer_profile or "")
                if profile is None or step.element is None:
                    raise _MissingInput("the localizer call has no profile or element")
                return localizer_messages(profile, step.element, self.shots(step.index, 1)[0])
            case "validator":
                if not isinstance(step.action, Answer) or ctx.validator_url is None:
                    raise _MissingInput("the validator call has no answer or URL")
                if ctx.validator_context == "conversation":  # the policy's request and reply, then its turn
                    told = answered(speaker_for(ctx), self.conversation(step), ctx.reply, ctx.tool_calls or ())
                    return continuation_messages(
                        told, self.result.goal, step.action.content, ctx.validator_url, ctx.expect
                    )
                images = self.shots(step.index, ctx.validator_screenshots)
                return validator_messages(self.result.goal, step.action.content, ctx.validator_url, images, ctx.expect)

    def conversation(self, last: Step) -> list[Message]:
        """A policy request: the steps its conversation holds fed through the strategy that built it."""
        ctx = last.context
        assert ctx is not None
        if ctx.policy is None or ctx.mode is None:
            raise _MissingInput("the step has no policy context (recorded by an older webagent)")
        strategy = PROMPTS[ctx.mode]
        prompt = strategy(speaker_for(ctx), PromptOptions.from_record(ctx))
        messages: list[Message] = []
        first = strategy.replay_from(last.index, ctx)
        for index in range(first, last.index + 1):
            step = self.steps.get(index)
            told = step.context if step is not None else None
            if told is None or told.policy is None or told.mode != ctx.mode:
                raise _MissingInput(f"step {index} of the policy's conversation is missing or of another one")
            if index > first:
                previous = self.steps[index - 1].context
                assert previous is not None
                prompt.reply(previous.reply, previous.tool_calls or ())
            messages = prompt.observe(told.policy, self.shots(index, 1)[0], new_epoch=told.epoch == index)
        return messages

    def tools(self, step: Step, call: ModelCall) -> list[dict[str, Any]] | None:
        """The tools a policy request offered (native tool calls), as sent (and a validator request
        that continued its conversation, which offered them again)."""
        ctx = step.context
        if ctx is None:
            return None
        if not (call.role == "policy" or (call.role == "validator" and ctx.validator_context == "conversation")):
            return None
        tools: list[dict[str, Any]] | None = speaker_for(ctx).request_fields.get("tools")
        return tools

    def success(self) -> bool:
        return self.result.success

    def metadata(self, step: Step) -> dict[str, Any]:
        refs = list(self.ref.references)
        return {
            "task_id": self.ref.task_id,
            "run": str(self.ref.directory),
            "attempt": self.ref.attempt or 1,
            "step": step.index,
            "success": self.result.success,
            "reference_match": reference_matches(self.result.answer, refs) if refs else None,
            "goal": self.result.goal,
        }


def _uniform(messages: list[Message]) -> list[dict[str, Any]]:
    """Every ``content`` as a list of parts, so Arrow infers one type for the column."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        out.append({**message, "content": parts})
    return out


def _image_paths(messages: list[dict[str, Any]]) -> list[str]:
    return [
        str(p["image_url"]["url"])
        for m in messages
        for p in m["content"]
        if isinstance(p, dict) and p.get("type") == "image_url"
    ]


def _load_run(ref: RunRef, images: _Images) -> _Run | None:
    result_path = ref.directory / "result.json"
    if not result_path.is_file():
        log.warning("export_run_skipped", run=str(ref.directory), reason="no result.json (unfinished run)")
        return None
    try:
        result = RunResult.model_validate_json(result_path.read_text(encoding="utf-8"))
        steps = [Step.model_validate(record) for record in read_trajectory(ref.directory)]
    except (ValidationError, ValueError, OSError) as exc:
        raise InputError(f"{ref.directory} is not a readable webagent run directory: {exc}") from None
    return _Run(ref, result, steps, images)


def _calls(run: _Run, options: ExportOptions, stats: ExportStats) -> Iterator[tuple[Step, list[dict[str, Any]]]]:
    """Per step, its exportable calls as ``{role, model, messages, target, repaired, error}``."""
    for step in run.steps.values():
        calls: list[dict[str, Any]] = []
        for call in step.calls:
            if call.role not in options.roles or not call.raw:
                continue
            if call.error is not None and not options.include_failed:
                continue
            try:
                messages = _uniform(run.messages(step, call))
            except _MissingInput as exc:
                stats.skipped_steps += 1
                log.warning("export_step_skipped", run=str(run.ref.directory), step=step.index, reason=str(exc))
                break
            entry: dict[str, Any] = {
                "role": call.role,
                "model": call.model,
                "messages": messages,
                "target": call.raw[-1],
                "repaired": len(call.raw) > 1,
                "error": call.error,
            }
            tools = run.tools(step, call)
            if tools is not None:  # the tools offered and the calls made: the exact exchange
                entry["tools"] = tools
                entry["target_tool_calls"] = [c.message_part() for c in call.tool_calls]
            if call.tokens:  # the request that gave the target, as the model read and wrote it
                last = call.tokens[-1]
                entry["tokens"] = {
                    "prompt_token_ids": last.prompt_token_ids,
                    "completion_token_ids": last.token_ids,
                    "completion_logprobs": last.logprobs,
                }
            calls.append(entry)
        else:
            if calls:
                yield step, calls


def _records(run: _Run, options: ExportOptions, stats: ExportStats) -> Iterator[dict[str, Any]]:
    for step, calls in _calls(run, options, stats):
        meta = run.metadata(step)
        if options.per == "call":
            for call in calls:
                yield {
                    "role": call["role"],
                    "messages": call["messages"],
                    "target": call["target"],
                    **{key: call[key] for key in ("tools", "target_tool_calls", "tokens") if key in call},
                    "images": _image_paths(call["messages"]),
                    "metadata": {
                        **meta,
                        "model": call["model"],
                        "repaired": call["repaired"],
                        "error": call["error"],
                    },
                }
        else:
            yield {
                "calls": calls,
                "images": list(dict.fromkeys(p for c in calls for p in _image_paths(c["messages"]))),
                "metadata": {
                    **meta,
                    "action": step.action.model_dump(mode="json") if step.action else None,
                    "outcome": step.outcome,
                    **({"actions": [a.model_dump(mode="json") for a in step.actions]} if step.actions else {}),
                },
            }


def _dedup_key(record: dict[str, Any]) -> str:
    calls = record.get("calls") or [record]
    content = [(c["role"], c["messages"], c["target"]) for c in calls]
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def export_sft(runs: Sequence[RunRef], output: str | Path, options: ExportOptions | None = None) -> ExportStats:
    """Write ``OUTPUT/data.jsonl`` and ``OUTPUT/images/`` from ``runs``; returns what was written.
    When a run directory is private (a run that held a secret: ``webagent.files.disk``), so is the export:
    its screenshots are those of the run."""
    options = options or ExportOptions()
    output = Path(output)
    private = any(private_folder(ref.directory) for ref in runs)
    make_dir(output, private=private)
    images = _Images(output, private=private)
    stats = ExportStats()
    seen: set[str] = set()
    lines: list[str] = []
    for ref in runs:
        if options.tasks is not None and ref.task_id not in options.tasks:
            continue
        run = _load_run(ref, images)
        if run is None:
            stats.skipped_runs.append(str(ref.directory))
            continue
        if options.success_only and not run.success():
            continue
        stats.runs += 1
        for record in _records(run, options, stats):
            key = _dedup_key(record)
            if key in seen:
                stats.duplicates += 1
                continue
            seen.add(key)
            lines.append(json.dumps({"id": key[:16], **record}, ensure_ascii=False) + "\n")
    write_atomic(output / "data.jsonl", "".join(lines).encode(), private=private)
    stats.records = len(lines)
    stats.images = images.written
    return stats
