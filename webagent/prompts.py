"""Prompt templates: Jinja2 files shipped with the package, rendered with StrictUndefined."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

__all__ = ["prompts_dir", "render", "resource_dir"]


def resource_dir(name: str) -> Path:
    """A data folder shipped with the package (``prompts``).

    In a wheel the folders live inside the package; in a source checkout (editable install)
    they live at the repository root.
    """
    packaged = Path(str(resources.files("webagent"))) / name
    if packaged.is_dir():
        return packaged
    source = Path(__file__).resolve().parent.parent / name
    if source.is_dir():
        return source
    raise FileNotFoundError(f"webagent data folder {name!r} is missing from the installation")


def prompts_dir() -> Path:
    return resource_dir("prompts")


@cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(prompts_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,  # templates ship with the package: no stat() per render
    )


def render(template: str, **context: Any) -> str:
    """Render ``prompts/<template>``; a missing variable is an error, never an empty string."""
    return _env().get_template(template).render(**context).strip()
