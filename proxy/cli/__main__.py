"""`python -m proxy.cli`: the `context-proxy` command."""

import sys

from proxy.cli.main import main

sys.exit(main())
