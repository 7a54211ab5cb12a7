"""webagent: a fast web-navigation agent (Playwright + vision-language models).

from webagent import Agent, AgentConfig
result = await Agent(AgentConfig.load("webagent.toml")).run(url, goal)
"""

from ._version import __version__
from .actions import (
    Action,
    Answer,
    ClickElement,
    GoBack,
    Goto,
    PolicyReply,
    PressKey,
    Refresh,
    Scroll,
    SelectOption,
    Wait,
    WriteElement,
)
from .agent import Agent, RunStream
from .budget import Budget, BudgetLimits
from .config import AgentConfig, load_config
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
from .records import CheckResult, Fingerprint, ModelCall, Point, RoleUsage, RunResult, Step, Timings, Usage, Verdict
from .replay import ReplayCache
from .training.env import Observation, WebEnv

__all__ = [
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
    "ConfigError",
    "ExtractionError",
    "Fingerprint",
    "GoBack",
    "Goto",
    "InputError",
    "LocalizationError",
    "ModelCall",
    "ModelError",
    "ModelReplyError",
    "ModelUnavailableError",
    "NavigationError",
    "Observation",
    "Pilot",
    "Point",
    "PolicyReply",
    "PressKey",
    "Refresh",
    "ReplayCache",
    "RoleUsage",
    "RunResult",
    "RunStream",
    "Scroll",
    "SelectOption",
    "Step",
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
