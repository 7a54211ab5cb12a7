"""Processes under a test's subprocess, read from /proc (Linux): what a test checks is left behind."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["alive", "chromium_mains", "cmdline", "descendants"]


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


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def chromium_mains(root: int) -> set[int]:
    """Main Chromium browser processes below ``root`` (not its zygotes, renderers, utilities)."""
    mains = set()
    for pid in descendants(root):
        args = cmdline(pid)
        # Chromium's helpers rewrite their command line into one string: look at all of it.
        if args and "chrom" in Path(args[0].split(" ")[0]).name and "--type=" not in " ".join(args):
            mains.add(pid)
    return mains
