"""``python -m models.flit ...``: see models/flit/cli.py."""

import sys

from .cli import main

sys.exit(main())
