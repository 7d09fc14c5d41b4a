"""Sub-commands of the `a2e-host` CLI, one module each (see `host.cli.COMMANDS`)."""
