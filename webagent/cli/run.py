"""``webagent run`` (and ``demo``): one task, its steps printed as they come."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import assert_never

from ..config import AgentConfig
from ..inputs import terminal_json, terminal_text
from ..records import Phase, RunResult, Step
from .parser import EXIT_FAILED, EXIT_OK

__all__ = ["IMAGE_VARIABLE", "exit_status", "run_task", "unkept_output"]

#: Set by the Docker image (docker/Dockerfile): runs there are in a container, often a --rm one.
IMAGE_VARIABLE = "WEBAGENT_IMAGE"


async def run_task(
    config: AgentConfig,
    url: str,
    goal: str,
    output: Path,
    quiet: bool,
    cache: str | None,
    *,
    save_state: Path | None = None,
) -> RunResult:
    """One run, its steps printed; ``save_state``: where to write the signed-in state if it succeeds."""
    from ..agent import Agent
    from ..replay import ReplayCache
    from ..runs.display import StepPrinter
    from .handoff import terminal_asker

    printer = StepPrinter(quiet=quiet, max_steps=config.agent.max_steps)
    replay_cache = ReplayCache(cache) if cache else None
    async with Agent(config, ask_user=terminal_asker()) as agent:
        stream = agent.stream(
            url, goal, output_dir=output, cache=replay_cache, save_state=save_state
        )  # bad input: an error here
        printer.start(url, goal, config)
        async for event in stream.events():
            match event:
                case Phase():
                    printer.phase(event, config)
                case Step():
                    printer.step(event)
                case _:
                    assert_never(event)
        assert stream.result is not None
        printer.result(stream.result)
        note = unkept_output(output)
        if note:
            print(terminal_text(f"webagent: {note}"), file=sys.stderr)
        return stream.result


def unkept_output(output: Path) -> str | None:
    """In webagent's image, a run directory on no mounted folder goes with the container (``docker
    run --rm`` deletes it at once): what to mount instead. None elsewhere, or on a mount."""
    if not os.environ.get(IMAGE_VARIABLE):
        return None
    path = output.resolve()
    if any(os.path.ismount(p) for p in (path, *path.parents) if p != Path(p.anchor)):
        return None
    return (
        f"{path} is inside this container, not on a mounted folder: it is gone once the container is. "
        f'Mount one to keep the report, e.g. docker run -v "$PWD/webagent-out:/work" ... '
        "(the image's working directory, where runs/ is written)"
    )


def exit_status(result: RunResult, as_json: bool) -> int:
    """Print the result as JSON if asked (control characters as JSON escapes: ``terminal_json``);
    0 for a validated success, else 1."""
    if as_json:
        print(terminal_json(json.dumps(result.model_dump(mode="json"), ensure_ascii=False)))
    return EXIT_OK if result.success else EXIT_FAILED
