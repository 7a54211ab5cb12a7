"""webagent: a fast web-navigation agent (Playwright + vision-language models).

from webagent import Agent, AgentConfig
result = await Agent(AgentConfig.load("webagent.toml")).run(url, goal)

The names below are imported on first use (PEP 562), so that ``import webagent.<module>`` (the
pytest plugin's entry point, the CLI) does not pay for the whole package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .actions import (
        Action,
        Answer,
        ClickElement,
        CloseTab,
        DoubleClickElement,
        DragElement,
        GoBack,
        Goto,
        HoverElement,
        PolicyReply,
        PressKey,
        Refresh,
        RightClickElement,
        Scroll,
        SelectOption,
        SwitchTab,
        Wait,
        WriteElement,
    )
    from .agent import Agent
    from .budget import Budget, BudgetLimits
    from .config import AgentConfig, load_config
    from .env import Observation, WebEnv
    from .errors import (
        ActionError,
        BrowserError,
        BudgetExceeded,
        ConfigError,
        ExtractionError,
        InputError,
        LocalizationError,
        ModelError,
        ModelReplyError,
        ModelUnavailableError,
        NavigationError,
        WebAgentError,
    )
    from .pilot import Pilot
    from .records import (
        Acted,
        CheckResult,
        DownloadedFile,
        Fingerprint,
        ModelCall,
        Phase,
        Point,
        RoleUsage,
        RunResult,
        Step,
        Tab,
        Timings,
        Usage,
        Verdict,
    )
    from .replay import ReplayCache
    from .stream import RunStream

#: Each public name -> the module it lives in.
_EXPORTS: dict[str, str] = {
    "Acted": "records",
    "Action": "actions",
    "ActionError": "errors",
    "Agent": "agent",
    "AgentConfig": "config",
    "Answer": "actions",
    "BrowserError": "errors",
    "Budget": "budget",
    "BudgetExceeded": "errors",
    "BudgetLimits": "budget",
    "CheckResult": "records",
    "DownloadedFile": "records",
    "ClickElement": "actions",
    "CloseTab": "actions",
    "ConfigError": "errors",
    "DoubleClickElement": "actions",
    "DragElement": "actions",
    "ExtractionError": "errors",
    "Fingerprint": "records",
    "GoBack": "actions",
    "Goto": "actions",
    "HoverElement": "actions",
    "InputError": "errors",
    "LocalizationError": "errors",
    "ModelCall": "records",
    "ModelError": "errors",
    "ModelReplyError": "errors",
    "ModelUnavailableError": "errors",
    "NavigationError": "errors",
    "Observation": "env",
    "Phase": "records",
    "Pilot": "pilot",
    "Point": "records",
    "PolicyReply": "actions",
    "PressKey": "actions",
    "Refresh": "actions",
    "ReplayCache": "replay",
    "RightClickElement": "actions",
    "RoleUsage": "records",
    "RunResult": "records",
    "RunStream": "stream",
    "Scroll": "actions",
    "SelectOption": "actions",
    "Step": "records",
    "SwitchTab": "actions",
    "Tab": "records",
    "Timings": "records",
    "Usage": "records",
    "Verdict": "records",
    "Wait": "actions",
    "WebAgentError": "errors",
    "WebEnv": "env",
    "WriteElement": "actions",
    "load_config": "config",
}

__all__ = [
    "Acted",
    "Action",
    "ActionError",
    "Agent",
    "AgentConfig",
    "Answer",
    "BrowserError",
    "Budget",
    "BudgetExceeded",
    "BudgetLimits",
    "CheckResult",
    "ClickElement",
    "CloseTab",
    "ConfigError",
    "DoubleClickElement",
    "DownloadedFile",
    "DragElement",
    "ExtractionError",
    "Fingerprint",
    "GoBack",
    "Goto",
    "HoverElement",
    "InputError",
    "LocalizationError",
    "ModelCall",
    "ModelError",
    "ModelReplyError",
    "ModelUnavailableError",
    "NavigationError",
    "Observation",
    "Phase",
    "Pilot",
    "Point",
    "PolicyReply",
    "PressKey",
    "Refresh",
    "ReplayCache",
    "RightClickElement",
    "RoleUsage",
    "RunResult",
    "RunStream",
    "Scroll",
    "SelectOption",
    "Step",
    "SwitchTab",
    "Tab",
    "Timings",
    "Usage",
    "Verdict",
    "Wait",
    "WebAgentError",
    "WebEnv",
    "WriteElement",
    "__version__",
    "load_config",
]


def load_environment(**kwargs: Any) -> Any:
    """verifiers' entry point: ``vf.load_environment("webagent", tasks=[...], ...)`` imports this package
    and calls this (``webagent.env.vf.load_environment``; needs the rl extra). Not in ``__all__``."""
    from .env.vf import load_environment as load

    return load(**kwargs)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'webagent' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
