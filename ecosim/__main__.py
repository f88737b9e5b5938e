"""``python -m ecosim``: the same command as ``ecosim`` (see :mod:`ecosim.cli`)."""
from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
