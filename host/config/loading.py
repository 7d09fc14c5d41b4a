"""The whole `Config` and how it is built: defaults < TOML file < environment < overrides.

`load_config()` merges the layers, validates them and, for a wrong setting, raises
`ConfigError` naming the setting and where its value came from; `env_settings()` reads the
`A2E_HOST_<SECTION>_<FIELD>` variables; `is_secret()` and `mask_value()` say what not to show.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_origin

from pydantic import BaseModel, Field, ValidationError

from host.config.history import ConsolidationConfig, HistoryConfig
from host.config.search import SearchConfig
from host.config.sections import (
    AuthConfig,
    GcConfig,
    LibraryConfig,
    LimitsConfig,
    LogConfig,
    McpConfig,
    RankingConfig,
    RulesConfig,
    ServerConfig,
    StoreConfig,
    UiConfig,
    WatchConfig,
    _Section,
)

__all__ = [
    "ENV_FILE",
    "ENV_PREFIX",
    "SECRET_NAME",
    "Config",
    "ConfigError",
    "env_settings",
    "is_secret",
    "load_config",
    "load_config_with_origins",
    "mask_value",
]


class Config(_Section):
    """The whole configuration of one host."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    ranking: RankingConfig = Field(default_factory=RankingConfig)
    gc: GcConfig = Field(default_factory=GcConfig)
    rules: RulesConfig = Field(default_factory=RulesConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    library: LibraryConfig = Field(default_factory=LibraryConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    ui: UiConfig = Field(default_factory=UiConfig)
    watch: WatchConfig = Field(default_factory=WatchConfig)
    history: HistoryConfig = Field(default_factory=HistoryConfig)
    consolidation: ConsolidationConfig = Field(default_factory=ConsolidationConfig)


ENV_PREFIX = "A2E_HOST_"
ENV_FILE = "A2E_HOST_CONFIG"  # the config file when no --config flag is given

SECRET_NAME = re.compile(r"token|secret|password|passwd|hash|sha256|digest|credential|private|api_key")
_DSN_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@]*:)(?P<pw>[^@]*)(?P<tail>@)")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names each bad setting and its origin."""


def is_secret(section: str, field: str) -> bool:
    """True for a setting whose value must not be shown (tokens, hashes, passwords).

    A field is secret when its name says so or its `json_schema_extra` has `secret: True`.
    """
    model = Config.model_fields.get(section)
    sub = model.annotation if model is not None else None
    info = sub.model_fields.get(field) if isinstance(sub, type) and issubclass(sub, BaseModel) else None
    extra = info.json_schema_extra if info is not None else None
    if isinstance(extra, dict) and extra.get("secret"):
        return True
    return bool(SECRET_NAME.search(field))


def mask_value(value: Any) -> Any:
    """`value` with any password inside a URL (`postgresql://u:pw@h/db`) replaced by `***`."""
    if isinstance(value, str):
        return _DSN_PASSWORD.sub(r"\g<head>***\g<tail>", value)
    return value


def _sections() -> dict[str, type[BaseModel]]:
    out: dict[str, type[BaseModel]] = {}
    for name, info in Config.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            out[name] = info.annotation
    return out


def _env_value(model: type[BaseModel], field: str, raw: str) -> Any:
    """An environment string as the field expects it: JSON for lists and tables."""
    info = model.model_fields[field]
    if get_origin(info.annotation) in (list, dict, tuple, set) or info.annotation in (
        list, dict, tuple, set
    ):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def env_settings(env: Mapping[str, str]) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str], str]]:
    """The settings named by `A2E_HOST_<SECTION>_<FIELD>` variables of `env`, and their origins.

    Raises `ConfigError` for an `A2E_HOST_` variable that names no setting (a typo would
    otherwise be ignored silently).
    """
    sections = sorted(_sections().items(), key=lambda kv: -len(kv[0]))
    data: dict[str, dict[str, Any]] = {}
    origins: dict[tuple[str, str], str] = {}
    unknown: list[str] = []
    for var, raw in env.items():
        if not var.startswith(ENV_PREFIX) or var == ENV_FILE:
            continue
        rest = var[len(ENV_PREFIX):].lower()
        for name, model in sections:
            if rest.startswith(name + "_") and rest[len(name) + 1:] in model.model_fields:
                field = rest[len(name) + 1:]
                data.setdefault(name, {})[field] = _env_value(model, field, raw)
                origins[(name, field)] = f"environment {var}"
                break
        else:
            unknown.append(var)
    if unknown:
        raise ConfigError(
            "invalid configuration: unknown environment variable(s) "
            + ", ".join(sorted(unknown))
            + f" (settings are {ENV_PREFIX}<SECTION>_<FIELD>, e.g. {ENV_PREFIX}SERVER_PORT)"
        )
    return data, origins


def _merge(
    data: dict[str, Any], layer: Mapping[str, Any], origin: str,
    origins: dict[tuple[str, str], str],
) -> None:
    for section, values in layer.items():
        if not isinstance(values, Mapping):
            data[section] = values
            origins[(section, "")] = origin
            continue
        target = data.setdefault(section, {})
        if not isinstance(target, dict):
            data[section] = target = {}
        for field, value in values.items():
            target[field] = value
            origins[(section, field)] = origin


def _explain(err: ValidationError, data: Mapping[str, Any], origins: Mapping[tuple[str, str], str]) -> str:
    lines = ["invalid configuration:"]
    for e in err.errors():
        loc = tuple(str(p) for p in e["loc"])
        name = ".".join(loc) or "(top level)"
        section, field = (loc + ("", ""))[:2]
        origin = origins.get((section, field)) or origins.get((section, ""), "")
        value = e.get("input")
        shown = "" if e["type"] == "missing" or isinstance(value, Mapping) else f" = {value!r}"
        if shown and section and field and is_secret(section, field):
            shown = " = ***"
        where = f" (from {origin})" if origin else ""
        lines.append(f"  {name}{shown}{where}: {e['msg']}")
    return "\n".join(lines)


def load_config(
    path: str | Path | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Build a `Config`: defaults < the TOML file `path` < `env` variables < `overrides`.

    `env` is a mapping like `os.environ` (None reads no variables); `overrides` maps section
    names to dicts of settings (`{"server": {"port": 0}}`), as the CLI flags do.
    Raises `ConfigError` naming each bad setting and its origin (file, variable or flag), or
    for an unreadable or malformed file.
    """
    return load_config_with_origins(path, overrides, env)[0]


def load_config_with_origins(
    path: str | Path | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[Config, dict[tuple[str, str], str]]:
    """As `load_config`, also returning where each non-default setting came from."""
    data: dict[str, Any] = {}
    origins: dict[tuple[str, str], str] = {}
    if path is not None:
        try:
            with open(path, "rb") as fh:
                _merge(data, tomllib.load(fh), f"file {path}", origins)
        except OSError as err:
            raise ConfigError(f"cannot read configuration file {path}: {err.strerror or err}") from err
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"configuration file {path} is not valid TOML: {err}") from err
    if env is not None:
        env_data, env_origins = env_settings(env)
        _merge(data, env_data, "", origins)
        origins.update(env_origins)
    _merge(data, overrides or {}, "command-line flag", origins)
    try:
        return Config.model_validate(data), origins
    except ValidationError as err:
        raise ConfigError(_explain(err, data, origins)) from None
