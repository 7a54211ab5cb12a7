"""The public API: what ``import webagent`` offers."""

from __future__ import annotations

import importlib
import inspect
import tomllib
from pathlib import Path

from pydantic import BaseModel

import webagent

EXPECTED_ALL = [
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

ACTION_CLASSES = [
    "Answer",
    "ClickElement",
    "CloseTab",
    "DoubleClickElement",
    "DragElement",
    "GoBack",
    "Goto",
    "HoverElement",
    "PressKey",
    "Refresh",
    "RightClickElement",
    "Scroll",
    "SelectOption",
    "SwitchTab",
    "Wait",
    "WriteElement",
]


def test_all_is_the_expected_sorted_list() -> None:
    assert webagent.__all__ == EXPECTED_ALL
    assert sorted(webagent.__all__) == webagent.__all__
    assert len(set(webagent.__all__)) == len(webagent.__all__)


def test_every_name_is_importable() -> None:
    module = importlib.import_module("webagent")
    namespace: dict[str, object] = {}
    exec("from webagent import *", namespace)
    for name in EXPECTED_ALL:
        assert getattr(module, name) is not None, name
        assert name in namespace, name


def test_core_names_present() -> None:
    for name in ("Agent", "AgentConfig", "RunResult", "Step", *ACTION_CLASSES):
        assert name in webagent.__all__, name
        assert inspect.isclass(getattr(webagent, name)), name


def test_action_classes_are_the_union_members() -> None:
    from webagent.actions import ACTION_ADAPTER

    tags = set()
    for name in ACTION_CLASSES:
        cls = getattr(webagent, name)
        assert issubclass(cls, BaseModel)
        tags.add(cls.model_fields["action"].default)
        # The exported class is the one the union validates to.
        assert type(ACTION_ADAPTER.validate_python(_minimal(cls))) is cls
    assert len(tags) == 16


def _minimal(cls: type[BaseModel]) -> dict[str, object]:
    data: dict[str, object] = {"action": cls.model_fields["action"].default}
    samples = {"element": "e", "content": "c", "direction": "down", "key": "Enter", "option": "o", "url": "u"}
    samples.update(seconds=1, target="t", index=0)
    for field, info in cls.model_fields.items():
        if field != "action" and info.is_required():
            data[field] = samples[field]
    return data


def test_errors_share_a_base_class() -> None:
    for name in EXPECTED_ALL:
        if name.endswith("Error"):
            assert issubclass(getattr(webagent, name), webagent.WebAgentError), name
    assert issubclass(webagent.NavigationError, webagent.BrowserError)
    assert issubclass(webagent.ModelReplyError, webagent.ModelError)
    assert issubclass(webagent.ModelUnavailableError, webagent.ModelError)


def test_version_matches_pyproject() -> None:
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    assert webagent.__version__ == pyproject["project"]["version"]


def test_load_config_is_the_config_function() -> None:
    from webagent.config import load_config

    assert webagent.load_config is load_config
