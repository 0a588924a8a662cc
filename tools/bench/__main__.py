"""`python -m tools.bench COMMAND`: the research bench, from a checkout."""

import sys

from tools.bench.cli import main

sys.exit(main())
