"""`python -m vitddp_tools`: the same as the console script vitddp-report."""
import sys

from .report import main

sys.exit(main())
