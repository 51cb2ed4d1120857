#!/usr/bin/env python3
"""The PyTorch peer of batchsweep (issue 6): builds the same model in PyTorch from a batchsweep model config,
sweeps batch sizes with batchsweep's stopping rule and writes a batchsweep report (schema v1) that
`batchsweep analyze` and `batchsweep compare` read unchanged. See bench/peers/README.md."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from torchpeer.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
