"""``python -m ecosim``: the same command as ``ecosim`` (see :mod:`ecosim.tooling.cli`)."""
from .tooling.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
