"""`python -m trnsim` is the `trnsim` command."""

import sys

from trnsim.cli import main

sys.exit(main())
