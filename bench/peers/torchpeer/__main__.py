"""`python -m torchpeer` (from bench/peers): the same as bench/peers/torch_sweep.py."""

import sys

from torchpeer.cli import main

sys.exit(main())
