"""``webagent run`` (and ``demo``): one task, its steps printed as they come."""

from __future__ import annotations

import json
from pathlib import Path

from ..config import AgentConfig
from ..records import RunResult
from .parser import EXIT_FAILED, EXIT_OK

__all__ = ["exit_status", "run_task"]


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
        stream = agent.stream(url, goal, output_dir=output, cache=replay_cache, save_state=save_state)
        async for step in stream:
            if step.index == 1:  # after the start page opened: bad input stays a one-line error
                printer.start(url, goal, config)
            printer.step(step)
        assert stream.result is not None
        printer.result(stream.result)
        return stream.result


def exit_status(result: RunResult, as_json: bool) -> int:
    """Print the result as JSON if asked; 0 for a validated success, else 1."""
    if as_json:
        print(json.dumps(result.model_dump(mode="json"), ensure_ascii=False))
    return EXIT_OK if result.success else EXIT_FAILED
