"""``webagent run`` (and ``demo``): one task, its steps printed as they come."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import assert_never

from ..batch.outputs import BatchOutput
from ..browser.profile import Profile
from ..config import AgentConfig
from ..errors import InputError
from ..guard.secrets import Secrets
from ..inputs import check_text, terminal_json, terminal_text
from ..records import Phase, RunResult, Step
from ..suite.cli import ANY_ORIGIN_HELP, CACHE_HELP
from .commands import EXIT_FAILED, EXIT_OK, ConfigOptions, LoadConfig

__all__ = ["COMMAND", "IMAGE_VARIABLE", "default_output", "exit_status", "run_task", "unkept_output"]

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


def default_output(goal: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", goal.lower()).strip("-")[:40] or "run"
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}"


class RunCommand:
    """``webagent run``: one task."""

    name = "run"
    help = "run one task: open URL and accomplish GOAL"

    def add_arguments(self, parser: argparse.ArgumentParser, config_options: ConfigOptions) -> None:
        parser.description = (
            "Run one web task. Exit code 0 = validated success, 1 = not accomplished, 2 = usage or configuration error."
        )
        parser.add_argument("--url", required=True, help="start page")
        parser.add_argument("--goal", required=True, help="what to accomplish, in plain language")
        parser.add_argument(
            "--output",
            metavar="DIR",
            help="run directory to write, or an fsspec URL: s3://bucket/prefix (default: runs/<time>-<goal>)",
        )
        parser.add_argument(
            "--json", action="store_true", help="print the result (as in result.json) as one JSON object on stdout"
        )
        parser.add_argument(
            "--profile",
            metavar="DIR",
            help="a persistent profile folder (0700): the run starts with its signed-in state and saves the "
            "state back when it succeeds; locked while in use (the localizer's is --localizer-profile)",
        )
        parser.add_argument("--cache", metavar="FILE", help=f"replay cache: {CACHE_HELP}")
        parser.add_argument("--cache-any-origin", action="store_true", help=ANY_ORIGIN_HELP)
        config_options(parser)

    def run(self, args: argparse.Namespace, config: LoadConfig) -> int:
        check_text(args.goal or "", "--goal")
        loaded = config()
        if args.profile and loaded.browser.storage_state is not None:  # refused before any store is reached
            raise InputError("--profile and --storage-state are two ways to start signed in: give one")
        store = BatchOutput(args.output) if args.output else None  # a folder or an fsspec URL (s3://...)
        if store is not None:
            asyncio.run(store.open())  # a URL's store answers, its bucket is there: before the run
        output = store.local if store else default_output(Secrets(loaded.secrets).redact(args.goal))
        if not args.profile:
            result = asyncio.run(run_task(loaded, args.url, args.goal, output, args.quiet, args.cache))
        else:
            profile = Profile(Path(args.profile))
            profile.acquire()  # InputError (exit 2, one line) when it is in use or not private
            try:
                loaded.browser.storage_state = profile.saved()
                result = asyncio.run(
                    run_task(loaded, args.url, args.goal, output, args.quiet, args.cache, save_state=profile.state)
                )
            finally:
                profile.release()
        if store is not None and store.remote:  # the run directory goes up whole, then its staging folder goes
            asyncio.run(store.publish_all())
            store.discard()
        return exit_status(result, args.json)


COMMAND = RunCommand()
