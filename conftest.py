"""Repository-wide pytest configuration: the optional torch backend is collected only when
torch is installed (``make torch``), so ``make test`` works without it."""
import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["ecosim/torch/*"]
