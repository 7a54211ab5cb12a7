"""Goals handed to webagent's own roles from the session's page as it stands: ``act`` (a run of the
policy, localizer and validator: its receipt), ``check`` (the validator's verdict), ``extract``
(JSON valid against a schema, or text)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from ..roles.extractor import ExtractionSchema
from .protocol import EXIT_BAD, EXIT_FAILED, EXIT_NO_BROWSER, EXIT_OK, Reply, ShellError
from .sessions import ShellSession

__all__ = ["delegate_act", "delegate_check", "delegate_extract"]


class _Text(BaseModel):
    value: str = Field(description="The data asked for, as shown on the page")


def _goal(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ShellError(EXIT_BAD, f"the {key} is missing")
    return value


async def delegate_act(s: ShellSession, args: dict[str, Any]) -> Reply:
    goal = _goal(args, "goal")
    steps = args.get("max_steps")
    if steps is not None and (not isinstance(steps, int) or steps < 1):
        raise ShellError(EXIT_BAD, "--max-steps must be 1 or more")
    s.follow()
    result = await s.pilot.act(goal, max_steps=steps)
    if not s.session.page.is_closed():
        await s.session.drive(s.pilot.page)
    await s.save_profile()
    data = {
        "success": result.success,
        "answer": result.answer,
        "stop_reason": result.stop_reason,
        "message": result.message,
        "steps": result.steps,
        "final_url": result.final_url,
        "feedback": list(result.feedback),
        "run_dir": result.output_dir,
        "downloads": [d.model_dump(mode="json") for d in result.downloads],
    }
    verdict = "accomplished" if result.success else f"not accomplished ({result.stop_reason})"
    text = (
        f"{verdict} in {result.steps} step(s) at {result.final_url}\nanswer: {result.answer}\n"
        f"{result.message}\nrun: {result.output_dir}"
    )
    code = (
        EXIT_OK
        if result.success
        else EXIT_NO_BROWSER
        if result.stop_reason == "error" and s.session.browser_crashed
        else EXIT_FAILED
    )
    return Reply(code=code, text=s.secrets.redact(text), data=data)


async def delegate_check(s: ShellSession, args: dict[str, Any]) -> Reply:
    statement = _goal(args, "assertion")
    s.follow()
    result = await s.pilot.check(statement)
    run_dir = str(result.run_dir) if result.run_dir is not None else None
    data = {"holds": result.holds, "feedback": result.feedback, "url": result.url, "run_dir": run_dir}
    text = f"{'holds' if result.holds else 'does not hold'}: {result.feedback}"
    return Reply(code=EXIT_OK if result.holds else EXIT_FAILED, text=s.secrets.redact(text), data=data)


async def delegate_extract(s: ShellSession, args: dict[str, Any]) -> Reply:
    question = _goal(args, "question")
    raw = args.get("schema")
    s.follow()
    if raw is None:
        value: Any = (await s.pilot.extract(question, schema=_Text)).value
    else:
        if not isinstance(raw, dict):
            raise ShellError(EXIT_BAD, "the schema must be a JSON object")
        value = await s.pilot.extract_json(question, ExtractionSchema.of_json_schema(raw))
    return Reply(text=s.secrets.redact(json.dumps(value, ensure_ascii=False)), data={"value": value})
