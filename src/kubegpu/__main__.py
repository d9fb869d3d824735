"""`python -m kubegpu` is the `kubegpu` command."""

import sys

from kubegpu.cli import main

sys.exit(main())
