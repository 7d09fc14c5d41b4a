"""The host's configuration: pydantic models, every default and limit in one place.

Each setting has a default here and only here; other modules read the values from a
`Config` instance. `load_config()` builds one from, in rising precedence: the defaults, a TOML
file, environment variables `A2E_HOST_<SECTION>_<FIELD>` and overrides (the CLI flags). A wrong
setting raises `ConfigError`, whose message names the setting and where its value came from.

- `sections.py`: every section's model (`[server]`, `[store]`, `[limits]`, ...) but search;
- `search.py`: `SearchConfig`, the `[search]` section;
- `loading.py`: `Config` (all the sections) and the loading: file, environment, merge, the
  error that names a bad setting's origin, what is secret.

Import from `host.config`; the modules are its layout, not its interface.
"""

from __future__ import annotations

from host.config.loading import (
    ENV_FILE,
    ENV_PREFIX,
    SECRET_NAME,
    Config,
    ConfigError,
    env_settings,
    is_secret,
    load_config,
    load_config_with_origins,
    mask_value,
)
from host.config.search import SearchConfig
from host.config.sections import (
    DEFAULT_RIGHTS,
    MIB,
    RIGHTS,
    AuthConfig,
    GcConfig,
    LibraryConfig,
    LimitsConfig,
    LogConfig,
    McpConfig,
    RankingConfig,
    Right,
    RulesConfig,
    ServerConfig,
    StoreConfig,
    TokenConfig,
    UiConfig,
    WatchConfig,
)

__all__ = [
    "DEFAULT_RIGHTS",
    "ENV_FILE",
    "ENV_PREFIX",
    "MIB",
    "RIGHTS",
    "SECRET_NAME",
    "AuthConfig",
    "Config",
    "ConfigError",
    "GcConfig",
    "LibraryConfig",
    "LimitsConfig",
    "LogConfig",
    "McpConfig",
    "RankingConfig",
    "Right",
    "RulesConfig",
    "SearchConfig",
    "ServerConfig",
    "StoreConfig",
    "TokenConfig",
    "UiConfig",
    "WatchConfig",
    "env_settings",
    "is_secret",
    "load_config",
    "load_config_with_origins",
    "mask_value",
]
