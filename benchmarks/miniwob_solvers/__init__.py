"""Scripted solvers of MiniWoB++ tasks for ``benchmarks/miniwob_coverage.py`` (see ``play``)."""

from __future__ import annotations

from . import click, dates, drag, editor, forms, games, pages, shapes, sliders, social, timing, widgets
from .play import Ended, Play, Stuck
from .registry import CLIPBOARD, NOT_COVERED, SOLVERS, Solver

__all__ = ["CLIPBOARD", "NOT_COVERED", "SOLVERS", "Ended", "Play", "Solver", "Stuck", "families"]

#: The modules of solvers, by family of tasks.
families = (click, dates, drag, editor, forms, games, pages, shapes, sliders, social, timing, widgets)

NOT_COVERED["hover-shape"] = (
    "the page never ends its episode: its score is computed every 33 ms but core.endEpisode is never called, "
    "so no reward can be earned"
)
