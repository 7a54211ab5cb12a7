"""The one runtime under every entry point: ``Runtime`` (browsers, model endpoints, secrets, the
navigation guard) and ``RunSpec`` (what one run is).

``Agent`` holds a ``Runtime``; ``RunStream`` (``webagent.stream``), ``Pilot`` (``webagent.pilot``),
``WebEnv`` (``webagent.env``), the batch and suite runners and the MCP server's kept sessions open
their runs and sessions through it, each handing down a ``RunSpec``. ``spec.py`` is the spec,
``core.py`` the runtime, ``sessions.py`` its session settings (what each context opens with),
``access.py`` who chose a start URL and what that lets the run reach.
"""

from __future__ import annotations

from .core import Runtime
from .sessions import SessionSettings, checked_sessions, private_outputs
from .spec import RunSpec, TraceMode

__all__ = ["RunSpec", "Runtime", "SessionSettings", "TraceMode", "checked_sessions", "private_outputs"]
