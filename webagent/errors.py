"""The exception tree of webagent, documented in one place.

::

    WebAgentError                 base class; ``str(err)`` is a one-line message for users
    ├── ConfigError               bad config file, flag or environment variable (CLI exit code 2)
    ├── InputError                bad task input: missing or invalid URL, empty goal (exit code 2)
    ├── BrowserError              the browser could not be launched or driven
    │   ├── NavigationError       the start URL could not be opened (unreachable host, DNS, ...)
    │   ├── BrowserTimeoutError   the browser did not answer within its deadline (setting a session up, a screenshot)  [i]
    │   │   └── BrowserStuckError the browser did not answer opening a context or a tab: the pool retires it  [i]
    │   └── BrowserCrashError     the browser, the page's renderer or its context died under the run (a crash)  [i]
    ├── ModelError                a model endpoint failed
    │   ├── ModelUnavailableError the endpoint kept failing after retries (5xx, 429, timeouts, refused)  [i]
    │   └── ModelReplyError       the reply could not be parsed, even after one repair request
    │       └── ExtractionError   ``Pilot.extract``: the reply does not validate against the schema asked for
    ├── LocalizationError         the localizer's point is outside the screenshot
    ├── ActionError               an action could not be carried out on the page
    ├── SessionError              ``webagent mcp``: no open session has that id, or too many are open
    ├── BudgetExceeded            a run's or a suite's limit on model calls, tokens or dollars is spent
    └── DeadlineExceeded          a whole call of the pytest plugin (``web.act``, ``check``, ...) ran past its deadline

[i]: ``infrastructure`` is true: the machinery under the run failed, not the task (a browser that
stopped answering or is too overloaded to answer in time, a model server that kept failing). Such an
error is never a verdict on the task: a batch re-runs a task that ended with a browser's
(``infra_reruns``), and a resumed batch runs again a task whose line says ``infrastructure``.

Errors that happen inside a step (ModelReplyError, LocalizationError, ActionError) never end a
run: the loop records them and tells the policy in its next observation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

__all__ = [
    "ActionError",
    "BrowserCrashError",
    "BrowserError",
    "BrowserStuckError",
    "BrowserTimeoutError",
    "BudgetExceeded",
    "ConfigError",
    "DeadlineExceeded",
    "ExtractionError",
    "InputError",
    "LocalizationError",
    "ModelError",
    "ModelReplyError",
    "ModelUnavailableError",
    "NavigationError",
    "OptionName",
    "SessionError",
    "WebAgentError",
    "library_option",
]


class WebAgentError(Exception):
    """Base class of every error webagent raises on purpose."""

    #: Not the task's fault: the machinery under the run failed (a browser that did not answer in
    #: time, a model server that kept failing). Never a verdict on the task; a batch runs it again.
    infrastructure: ClassVar[bool] = False


#: How an interface (the CLI, the pytest plugin, ...) names its option for a config key
#: (``"policy.base_url"`` -> ``"--policy-base-url"``); None where it has none.
OptionName = Callable[[str], "str | None"]


def library_option(key: str) -> str:
    """How a library user sets a config key: the ``AgentConfig`` field."""
    return f"AgentConfig.{key}"


class ConfigError(WebAgentError):
    """A configuration value is missing or invalid; the message names it and says how to fix it.

    ``key``: the config key at fault (``"policy.base_url"``), when setting it is the fix; ``ways``:
    how it is set whichever interface the user is in (the config file, the environment).
    ``worded(option)`` adds the option of the user's interface; ``str()`` is the library's wording
    (the ``AgentConfig`` field), and each interface words the error with its own option names.
    """

    def __init__(self, message: str, *, key: str | None = None, ways: Sequence[str] = ()) -> None:
        self.problem = message
        self.key = key
        self.ways = tuple(ways)
        super().__init__(self.worded(library_option))

    def worded(self, option: OptionName) -> str:
        """The one-line message for an interface whose option for a config key is ``option(key)``."""
        named = option(self.key) if self.key is not None else None
        ways = [*self.ways, named] if named else list(self.ways)
        if not ways:
            return self.problem
        listed = " or ".join(ways) if len(ways) <= 2 else f"{', '.join(ways[:-1])}, or {ways[-1]}"
        return f"{self.problem}: set {listed}"


class InputError(WebAgentError):
    """The task input (URL, goal) is invalid."""


class BrowserError(WebAgentError):
    """The browser could not be launched or stopped responding."""


class NavigationError(BrowserError):
    """A URL could not be opened."""


class BrowserTimeoutError(BrowserError):
    """The browser did not answer a command within its deadline, where the run cannot go on without
    it (setting the session up, a screenshot, even after the page was reopened): frozen, or too
    overloaded to answer in time. An infrastructure failure: a batch re-runs the task on a fresh session."""

    infrastructure = True


class BrowserStuckError(BrowserTimeoutError):
    """The browser did not answer opening a context or a tab within its deadline (frozen or far
    overloaded): a pool stops handing it out."""


class BrowserCrashError(BrowserError):
    """What the run needed of the browser is gone: the page's renderer crashed (past what the session
    recovers from by reopening it), or the page, its context or the browser closed under the run
    (``webagent.browser.crashes``). In whatever phase it happens (setting the session up, a step, the
    final screenshot, saving the state), an infrastructure failure, never the task's verdict: a batch
    re-runs the task on a fresh session."""

    infrastructure = True


class ModelError(WebAgentError):
    """A model endpoint failed."""

    def __init__(self, message: str, *, role: str = "") -> None:
        super().__init__(message)
        self.role = role
        #: The ``ModelCall`` record of the failed call (usage, raw replies), when known.
        self.call: Any = None


class ModelUnavailableError(ModelError):
    """The endpoint kept failing after all retries (an infrastructure failure: a resumed batch runs
    the task again)."""

    infrastructure = True


class ModelReplyError(ModelError):
    """The model's reply could not be parsed, even after a repair request."""

    def __init__(self, message: str, *, role: str = "", raw: str = "") -> None:
        super().__init__(message, role=role)
        self.raw = raw


class ExtractionError(ModelReplyError):
    """Data asked of a page (``Pilot.extract``) did not validate against its schema, even after a
    repair request; the message names what was asked for, the schema and the first problems."""


class LocalizationError(WebAgentError):
    """The localizer answered with a point outside the image it was shown."""

    def __init__(self, message: str, *, call: object = None) -> None:
        super().__init__(message)
        #: The localizer's ``ModelCall`` record (charged to the step), when a model placed the point.
        self.call = call


class ActionError(WebAgentError):
    """An action could not be carried out on the page."""


class SessionError(WebAgentError):
    """A kept browser session (``webagent mcp``) that is not open, or one more than the limit."""


class BudgetExceeded(WebAgentError):
    """A hard limit on model calls, tokens or dollars was reached; the run stops with reason ``budget``."""


class DeadlineExceeded(WebAgentError):
    """A whole call (``web.act``, ``web.check``, ... of the pytest plugin) did not end within its deadline:
    a backstop above the run's own limits (``max_time_s``, each browser and model call's deadline)."""
