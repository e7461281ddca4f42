"""``python -m supervisor``: the same as the ``hermesd`` console script."""

import sys

from supervisor.cli import main

sys.exit(main())
