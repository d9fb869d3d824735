"""`python -m kubegpu.testbed up|down|status|ssh` (the same as `kubegpu testbed ...`)."""

import sys

from kubegpu.testbed.cli import main

sys.exit(main())
