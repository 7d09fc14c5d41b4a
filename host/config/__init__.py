"""The host's configuration: pydantic models, every default and limit in one place.

Each setting has a default here and only here; other modules read the values from a
`Config` instance. `load_config()` builds one from, in rising precedence: the defaults, a TOML
file, environment variables `A2E_HOST_<SECTION>_<FIELD>` and overrides (the CLI flags). A wrong
setting raises `ConfigError`, whose message names the setting and where its value came from.

- `sections.py`: every section's model (`[server]`, `[store]`, `[limits]`, ...) but search;
- `search.py`: `SearchConfig`, the `[search]` section; `history.py`: `[history]`, `[consolidation]`;
- `loading.py`: `Config` (all the sections) and the loading: file, environment, merge, the
  error that names a bad setting's origin, what is secret.

Import from `host.config`; the modules are its layout, not its interface.
"""

from __future__ import annotations

# each module's `__all__` is the package's: a new setting's section is named once, in its module
from host.config import history, loading, search, sections
from host.config.history import *  # noqa: F403
from host.config.loading import *  # noqa: F403
from host.config.search import *  # noqa: F403
from host.config.sections import *  # noqa: F403

__all__ = [*sections.__all__, *search.__all__, *history.__all__, *loading.__all__]
