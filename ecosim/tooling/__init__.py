"""The tooling around the library: the ``ecosim`` command (:mod:`ecosim.tooling.cli`) and the
README's generated blocks (:mod:`ecosim.tooling.readme`)."""

__all__: list[str] = []  # the two modules are imported by name, not from here
