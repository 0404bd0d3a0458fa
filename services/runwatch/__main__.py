"""``python -m runwatch`` is the ``runwatch`` command."""

import sys

from runwatch.cli import main

sys.exit(main())
