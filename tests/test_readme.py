"""The README stays a front page (at most 200 lines; the details live in docs/), and every file it
links to exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_is_short_and_its_links_hold() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert "docs/sessions.md" in links and "docs/tracing.md" in links
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert missing == []
