"""``python -m supervisor``: the same as the ``hermesd`` console script."""

import sys

from supervisor.cli.main import main

sys.exit(main())
