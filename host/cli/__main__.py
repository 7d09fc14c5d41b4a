"""`python -m host.cli`: the `a2e-host` command."""

import sys

from host.cli.main import main

sys.exit(main())
