"""`python -m poincare_index` runs the demo (same as `poincare-index demo`)."""

import sys

from .cli import main

sys.exit(main(sys.argv[1:]))
