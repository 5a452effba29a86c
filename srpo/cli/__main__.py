"""`python -m srpo.cli ...`: the `srpo` command (what torchrun and accelerate launch)."""

import sys

from srpo.cli import main

sys.exit(main())
