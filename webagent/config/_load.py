"""``AgentConfig``, every section together, and ``load_config``, which builds one from its sources."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator

from ..errors import ConfigError, OptionName
from ..guard.navigation import parse_rule
from ..guard.secrets import Secrets, check_secret
from ..inputs import MAX_CONFIG_BYTES, MAX_NESTING, check_nesting, read_text
from ..records import ROLES
from ._agent import AgentSettings
from ._base import Section
from ._browser import BrowserConfig
from ._roles import LocalizerConfig, PolicyConfig, RoleConfig, ValidatorConfig
from ._run import RunSettings

if TYPE_CHECKING:
    from ..records import ModelCall

__all__ = ["ROLES", "SECRET_ENV_PREFIX", "SECTIONS", "AgentConfig", "load_config"]

SECTIONS = (*ROLES, "agent", "browser", "run", "secrets")
SECRET_ENV_PREFIX = "WEBAGENT_SECRET_"
#: The keys of a ``[secrets]`` entry written as a table: ``NAME = { value = "...", hosts = [...] }``.
_SECRET_TABLE = ("value", "hosts")


class AgentConfig(Section):
    """Everything an Agent needs: three model roles, the loop's limits, the browser."""

    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    localizer: LocalizerConfig = Field(default_factory=LocalizerConfig)
    validator: ValidatorConfig = Field(default_factory=ValidatorConfig)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    browser: BrowserConfig = Field(default_factory=BrowserConfig)
    run: RunSettings = Field(default_factory=RunSettings)
    secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Values the policy types as {{NAME}} without ever seeing them ([secrets] or WEBAGENT_SECRET_<NAME>)",
    )
    secret_hosts: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Where each secret may be typed: host rules (host, host:port, *.example.com) by secret name "
        "([secrets] NAME = { value = ..., hosts = [...] }, --secret-host NAME=HOST). A secret without: the hosts of "
        "[browser] allowed_domains, else the host of a start URL the operator chose, else nowhere",
    )
    variables: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Values of a suite's ${NAME} variables (webagent test sets them): redacted from everything runs "
        "write and send, shown as ${NAME}",
    )

    @model_validator(mode="before")
    @classmethod
    def _secret_tables(cls, data: Any) -> Any:
        """``[secrets] NAME = { value = "...", hosts = [...] }``: the value to ``secrets``, the hosts to
        ``secret_hosts``."""
        if not isinstance(data, dict) or not isinstance(data.get("secrets"), dict):
            return data
        if not any(isinstance(v, dict) for v in data["secrets"].values()):
            return data
        data = dict(data)
        values, hosts = _split_secrets(data["secrets"])
        given = data.get("secret_hosts") or {}
        twice = sorted(set(hosts) & set(given)) if isinstance(given, dict) else []
        if twice:
            raise ValueError(f"the hosts of secret {twice[0]} are given twice: in its [secrets] table and secret_hosts")
        data["secrets"] = values
        data["secret_hosts"] = {**given, **hosts} if isinstance(given, dict) else given
        return data

    @field_validator("secrets", mode="before")
    @classmethod
    def _secrets(cls, v: Any) -> Any:
        if isinstance(v, dict):
            for name, value in v.items():
                raw = value.get_secret_value() if isinstance(value, SecretStr) else value
                if not isinstance(raw, str):
                    raise ValueError(f"secret {name} must be a string")
                check_secret(str(name), raw)
        return v

    @field_validator("secret_hosts", mode="before")
    @classmethod
    def _secret_hosts(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        rules: dict[str, Any] = {}
        for name, entries in v.items():
            if isinstance(entries, str):
                entries = [entries]
            if isinstance(entries, list):  # entries may also be comma-separated
                entries = [part for item in entries for part in str(item).replace(",", " ").split()]
                if not entries:
                    raise ValueError(f"secret {name}: hosts is empty; name at least one host, or leave hosts out")
                for entry in entries:
                    try:
                        parse_rule(entry)
                    except ValueError as exc:
                        raise ValueError(f"secret {name}: hosts: {exc}") from None
            rules[name] = entries
        return rules

    @model_validator(mode="after")
    def _hosts_of_secrets(self) -> AgentConfig:
        unknown = sorted(set(self.secret_hosts) - set(self.secrets))
        if unknown:
            raise ValueError(
                f"hosts are given for {unknown[0]}, which is not a secret: give its value too ([secrets] "
                f"{unknown[0]} = {{ value = ..., hosts = [...] }}, WEBAGENT_SECRET_{unknown[0]} or --secret)"
            )
        return self

    def secret_set(self) -> Secrets:
        """The config's secrets, each with the hosts it may be typed on, and the suite variables' values
        (redacted as ``${NAME}``)."""
        return Secrets(
            self.secrets,
            hosts=self.secret_hosts,
            variables={name: value.get_secret_value() for name, value in self.variables.items()},
        )

    @model_validator(mode="after")
    def _policy_contract(self) -> AgentConfig:
        """The policy's contract must speak what the settings ask of it."""
        contract = self.policy.contract()
        label = f"{self.policy.family} (policy.family)" if self.policy.family else "a policy without policy.family"
        if self.agent.grounding == "policy" and contract.point is None:
            raise ValueError(
                f"agent.grounding = 'policy' needs a policy that places its own clicks, and {label} does not: "
                "set agent.grounding = 'localizer' (or a policy.family that grounds)"
            )
        if (
            self.agent.validator_context == "conversation"
            and None not in (self.validator.model, self.policy.model)
            and self.validator.model != self.policy.model
        ):
            raise ValueError(
                "agent.validator_context = 'conversation' judges the answer in the policy's own conversation, "
                f"so the validator must be the policy's model ({self.policy.model}), not {self.validator.model}: "
                "set validator.model to it, or agent.validator_context = 'separate'"
            )
        if self.policy.output is not None and self.policy.output not in contract.outputs:
            raise ValueError(
                f"policy.output = {self.policy.output!r} is not a reply format of {label}, "
                f"which replies with {' or '.join(contract.outputs)}"
            )
        return self

    def grounding(self) -> str:
        """Who places the clicks of runs under this config: the policy or the localizer."""
        return self.agent.grounding or self.policy.contract().grounding

    def validator_follows_policy(self) -> bool:
        """Whether the validator is the policy's model at the policy's servers (so a request that
        continues the policy's conversation finds it in their prefix cache)."""
        validator, policy = self.validator, self.policy
        return (
            validator.model is not None
            and validator.model == policy.model
            and (validator.endpoints() == policy.endpoints())
        )

    def validator_context(self) -> str:
        """What the validator judges answers in under this config (``PolicyContract.judged_in``)."""
        return self.policy.contract().judged_in(self.agent.validator_context, self.validator_follows_policy())

    def needed_roles(self) -> tuple[str, ...]:
        """The roles whose models runs under this config call (no localizer when the policy grounds)."""
        return tuple(r for r in ROLES if r != "localizer" or self.grounding() == "localizer")

    def role(self, name: str) -> RoleConfig:
        if name not in ROLES:
            raise KeyError(name)
        role: RoleConfig = getattr(self, name)
        return role

    def price(self, call: ModelCall) -> float:
        """Dollar cost of one model call at the configured per-role prices."""
        return self.role(call.role).cost(call.usage.prompt_tokens, call.usage.completion_tokens)

    def require_endpoints(self, roles: Sequence[str] | None = None) -> None:
        """Raise ConfigError naming the first of ``roles`` (default: the roles runs call,
        ``needed_roles``) without a base_url or model (its key: each interface adds its own option for it)."""
        for name in self.needed_roles() if roles is None else roles:
            role = self.role(name)
            for field in ("base_url", "model"):
                if not getattr(role, field):
                    raise ConfigError(
                        f"no {field.replace('_', ' ')} configured for the {name} model",
                        key=f"{name}.{field}",
                        ways=(f"[{name}] {field} in the config file", f"WEBAGENT_{name.upper()}_{field.upper()}"),
                    )

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        *,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
        option: OptionName | None = None,
    ) -> AgentConfig:
        return load_config(path, env=env, overrides=overrides, option=option)


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    option: OptionName | None = None,
) -> AgentConfig:
    """Build a config from a TOML file, ``WEBAGENT_*`` environment variables and overrides.

    ``overrides`` maps dotted keys (``"policy.model"``, ``"browser.viewport"``) to values; None
    values are ignored. ``env`` defaults to ``os.environ``. ``option``: the interface's name for
    the option that gave an override (a bad value is said to come from it).
    """
    data: dict[str, Any] = {}
    sources: dict[str, str] = {}  # "section.field" -> where its value came from
    file_source = ""
    if path is not None:
        data = _read_toml(Path(path))
        file_source = str(path)
        _check_keys(data, file_source)
        for section, table in data.items():
            sources.update({f"{section}.{field}": file_source for field in table})
        if "secrets" in data:
            try:
                data["secrets"], hosts = _split_secrets(data["secrets"])
            except ValueError as exc:
                raise ConfigError(f"invalid secret (from {file_source}): {exc}", key="secrets") from None
            if hosts:
                data["secret_hosts"] = hosts
                sources.update({f"secret_hosts.{name}": file_source for name in hosts})
    for key, (name, value) in _env_overrides(os.environ if env is None else env).items():
        _set_dotted(data, key, value)
        sources[key] = name
    for key, value in (overrides or {}).items():
        if value is not None:
            _set_dotted(data, key, value)
            sources[key] = (option(key) if option is not None else None) or "overrides"
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"][:2])
        raise ConfigError(_describe_validation(exc, sources, file_source), key=key) from None


def _read_toml(path: Path) -> dict[str, Any]:
    text = read_text(path, "config file", limit=MAX_CONFIG_BYTES, error=ConfigError)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config file {path}: nested deeper than {MAX_NESTING} levels (the limit)") from None
    check_nesting(data, f"config file {path}", error=ConfigError)
    return data


def _check_keys(data: Mapping[str, Any], source: str) -> None:
    for key, value in data.items():
        if key not in SECTIONS:
            raise ConfigError(f"unknown section [{key}] in {source}; known sections: {', '.join(SECTIONS)}")
        if not isinstance(value, dict):
            raise ConfigError(f"[{key}] in {source} must be a table")


def _env_overrides(env: Mapping[str, str]) -> dict[str, tuple[str, Any]]:
    """``{"section.field": (variable name, value)}`` for the WEBAGENT_<SECTION>_<FIELD> variables."""
    out: dict[str, tuple[str, Any]] = {}
    for name, value in env.items():
        if not name.startswith("WEBAGENT_"):
            continue
        if name.startswith(SECRET_ENV_PREFIX):
            out[f"secrets.{name[len(SECRET_ENV_PREFIX) :]}"] = (name, value)
            continue
        rest = name[len("WEBAGENT_") :].lower()
        section = next((s for s in SECTIONS if s != "secrets" and rest.startswith(s + "_")), None)
        if section is None:
            continue  # other WEBAGENT_* variables belong to other features
        field = rest[len(section) + 1 :]
        model = AgentConfig.model_fields[section].annotation
        fields = getattr(model, "model_fields", {})
        if field not in fields:
            raise ConfigError(
                f"unknown environment variable {name}: [{section}] has no key {field!r} "
                f"(known: {', '.join(sorted(fields))})"
            )
        out[f"{section}.{field}"] = (name, value.split() if fields[field].annotation == list[str] else value)
    return out


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    section, _, field = key.partition(".")
    if section not in (*SECTIONS, "secret_hosts") or not field:
        raise ConfigError(f"unknown setting {key!r}")
    if section == "secrets" and isinstance(value, dict):  # {"value": ..., "hosts": [...]}
        try:
            values, hosts = _split_secrets({field: value})
        except ValueError as exc:
            raise ConfigError(f"invalid secret: {exc}", key=key) from None
        value = values[field]
        if field in hosts:
            data.setdefault("secret_hosts", {})[field] = hosts[field]
    data.setdefault(section, {})[field] = value


def _split_secrets(entries: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``[secrets]`` entries (a value, or a table of ``value`` and ``hosts``) as the values and the
    hosts by name; ValueError (never quoting a value) for a table that is not one."""
    values: dict[str, Any] = {}
    hosts: dict[str, Any] = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            values[name] = entry
            continue
        unknown = sorted(set(entry) - set(_SECRET_TABLE))
        if unknown:
            raise ValueError(f"secret {name}: unknown key {unknown[0]!r} (a table takes value and hosts)")
        if "value" not in entry:
            raise ValueError(f'secret {name}: the table has no value (NAME = {{ value = "...", hosts = [...] }})')
        values[name] = entry["value"]
        if "hosts" in entry:
            hosts[name] = entry["hosts"]
    return values, hosts


def _describe_validation(exc: ValidationError, sources: Mapping[str, str], file_source: str) -> str:
    err = exc.errors()[0]
    if not err["loc"]:  # a check across sections: its message names the keys
        return "invalid config: " + err["msg"].removeprefix("Value error, ")
    loc = ".".join(str(p) for p in err["loc"])
    source = sources.get(".".join(str(p) for p in err["loc"][:2]), file_source)
    where = f" (from {source})" if source else ""
    if err["type"] == "extra_forbidden":
        return f"unknown config key {loc!r}{where}"
    msg = err["msg"].removeprefix("Value error, ")
    if err["loc"][0] in ("secrets", "variables"):  # never quote a secret's value
        return f"invalid {'secret' if err['loc'][0] == 'secrets' else 'suite variable'}{where}: {msg}"
    if err["loc"][0] == "secret_hosts":
        return f"invalid secret hosts{where}: {msg}"
    if len(err["loc"]) > 1 and err["loc"][1] in ("proxy", "http_credentials"):  # they may hold a password
        return f"invalid value for {loc}{where}: {msg}"
    got = f" (got {err.get('input')!r})" if "got" not in msg else ""
    return f"invalid value for {loc}{where}: {msg}{got}"
