"""Processes under a test's subprocess, read from /proc (Linux): what a test checks is left behind."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["alive", "descendants"]


def _ppids() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return parents


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children, grandchildren, ...)."""
    parents = _ppids()
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        children = [child for child, parent in parents.items() if parent == pid]
        found += children
        todo += children
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
