"""Optional parts: a missing extra is a clear error naming the setting and the extra."""

from __future__ import annotations

import sys

import pytest

from host.extras import MissingExtra, require


def test_require_names_the_setting_and_the_extra() -> None:
    """A module that is not installed is a MissingExtra (an ImportError) that says which
    setting wanted it and which extra installs it."""
    with pytest.raises(MissingExtra) as err:
        require("a2e_host_no_such_package", "picows", 'server.transport = "picows"')
    text = str(err.value)
    assert 'server.transport = "picows"' in text and "pip install -e '.[picows]'" in text
    assert isinstance(err.value, ImportError) and err.value.name == "a2e_host_no_such_package"


def test_require_returns_an_installed_module() -> None:
    """An installed module is imported and returned as it is."""
    assert require("json", "none", "json") is sys.modules["json"]

