"""The numeric core: number formats, rounding, scaled quantization and random bits.

Everything else in ecosim (the optimizers, the problems, the experiments, the torch backend)
rounds through these modules:

* :mod:`.format_record` (the :class:`~ecosim.core.formats.Format` record), :mod:`.catalog`
  (the named formats, one row each) and :mod:`.formats` (lookups, custom formats, encoding to
  real storage);
* :mod:`.rounding_modes` (the :class:`~ecosim.core.rounding_modes.Rounding` record and one
  rule per mode), :mod:`.bitops` (the rules on the bits), :mod:`.gridrules` (uniform grids:
  subnormals, integer formats), :mod:`.rounding` (``quantize``, the kernel) and
  :mod:`.rounding_codes` (rounding straight to codes);
* :mod:`.scale_rules` (block scales), :mod:`.quantizer` (``Quantizer``) and
  :mod:`.quantizer_rows` (its faster per-row paths);
* :mod:`.rng` (counter-based random bits) and :mod:`.checks` (the shared input checks).

``_reference`` is the slow scalar transcription of the rounding rules the tests compare with.
The modules kept their former names one level up (``ecosim.rounding`` and so on) as
deprecated aliases: see :mod:`ecosim`.
"""

__all__: list[str] = []
