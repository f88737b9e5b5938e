"""``python -m ecosim.torch.lm``: see :func:`ecosim.torch.lm.cli.main`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
