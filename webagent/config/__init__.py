"""Configuration: Pydantic models, loaded from TOML, then environment, then explicit overrides.

Precedence (lowest to highest): defaults < TOML file < ``WEBAGENT_<SECTION>_<FIELD>`` environment
variables < overrides (CLI flags or keyword arguments). Unknown keys are errors that name the key.
"""

from ._agent import AgentSettings
from ._browser import BrowserConfig, Viewport
from ._context import ContextSettings, Geolocation, HTTPCredentials, ProxySettings
from ._fleet import BrowserHost
from ._load import ROLES as ROLES
from ._load import SECRET_ENV_PREFIX as SECRET_ENV_PREFIX
from ._load import SECTIONS as SECTIONS
from ._load import AgentConfig, load_config
from ._roles import PROFILES, LocalizerConfig, PolicyConfig, RoleConfig, ValidatorConfig
from ._roles import Profile as Profile
from ._run import RunSettings

__all__ = [
    "PROFILES",
    "AgentConfig",
    "AgentSettings",
    "BrowserConfig",
    "BrowserHost",
    "ContextSettings",
    "Geolocation",
    "HTTPCredentials",
    "LocalizerConfig",
    "PolicyConfig",
    "ProxySettings",
    "RoleConfig",
    "RunSettings",
    "ValidatorConfig",
    "Viewport",
    "load_config",
]
