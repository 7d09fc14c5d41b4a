"""a2e-host: the memory host for A2E agents. `__version__` is the installed release."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("a2e-host")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
