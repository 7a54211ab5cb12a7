"""Steps, checks and extractions on a page the caller drives: ``agent.pilot(page)``.

    pilot = agent.pilot(page, output_dir="runs/checkout", replay=ReplayCache("checkout.cache.json"))
    result = await pilot.act("add the blue widget to the cart and open the cart")   # a RunResult
    check = await pilot.check("the cart shows one blue widget at $12.50")           # a CheckResult
    total = await pilot.extract("the cart total", schema=Money)                     # a Money instance
    png = await pilot.screenshot()

``act`` is a run of the agent (a ``RunStream`` on the agent's ``Runtime``, the same ``Episode``) that starts from
the page as it is: its URL is the start URL, the navigation policy is built from it, nothing is
opened first, and the page is left open. ``check`` is one call to the validator's endpoint,
``extract`` one call to the policy's (``webagent.roles.checker`` and ``webagent.roles.extractor``),
each with a screenshot of the page at the size the validator's screenshots have in a run.

``pilot.py`` is the ``Pilot`` (given the agent's ``Runtime``; it never imports the agent);
``look.py`` takes one look at the page (screenshot, URL, title,
fingerprint) and writes a check's or an extraction's one-step run directory.
"""

from __future__ import annotations

from .pilot import Pilot

__all__ = ["Pilot"]
