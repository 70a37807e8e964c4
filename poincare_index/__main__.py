"""`python -m poincare_index ...` is the `poincare-index` command (`demo`, `info`, `inspect`)."""

import sys

from .cli import main

sys.exit(main(sys.argv[1:]))
