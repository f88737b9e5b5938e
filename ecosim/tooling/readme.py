"""The README's generated blocks: tables and the gallery come from code, never pasted.

A block in README.md looks like::

    <!-- generated: NAME -->
    ...
    <!-- end generated -->

:func:`blocks` returns the current text of every block; :func:`refresh` rewrites them in a
README (``ecosim readme``, run by ``make figures`` after the figures are built). Blocks whose
source is a file written by ``ecosim figures`` (a ``figures/NAME.md`` table) are taken from that
file, so the README quotes exactly what the last build measured.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["blocks", "refresh", "gallery", "peak_memory_table"]

_BLOCK = re.compile(r"(<!-- generated: (?P<name>[^>]+?) -->\n)(?P<body>.*?)(<!-- end generated -->)",
                    re.S)


def gallery() -> str:
    """Markdown gallery of every registered figure: the committed PNG and its caption."""
    from ..figures import figures

    parts = []
    for i, (name, spec) in enumerate(figures().items(), 1):
        parts.append(f"**{i}. `{name}`.** {spec.caption}\n\n![{name}](figures/{name}.png)\n")
    return "\n".join(parts).rstrip()


def peak_memory_table(results: str | Path) -> str:
    """The batch-1 rows of ``benchmarks/peak_memory.py``'s results (its JSON at ``results``):
    bytes per parameter at rest and at a training step's peak, FP32 AdamW against stored FP8
    weights with ECO."""
    import json

    rows = json.loads(Path(results).read_text())["extra"]["rows"]
    by_model: dict[str, dict] = {}
    for r in rows:
        if r["batch"] == 1:
            by_model.setdefault(r["model"], {})["fp32" if r["setup"].startswith("FP32")
                                                 else "eco"] = r
    lines = ["| model (stored layer type) | FP32 AdamW: at rest, peak | FP8 + ECO: at rest, "
             "peak | peak / FP32's |", "|---|---|---|---|"]
    for model, d in by_model.items():
        peak = {k: (r["rest"] + r["grads"] + r["saved"]) / r["n"] for k, r in d.items()}
        rest = {k: r["rest"] / r["n"] for k, r in d.items()}
        lines.append(f"| {model} | {rest['fp32']:.2f}, {peak['fp32']:.2f} | "
                     f"{rest['eco']:.2f}, {peak['eco']:.2f} | {peak['eco'] / peak['fp32']:.3f} |")
    return "\n".join(lines)


def _sources(figures_dir: Path) -> dict:
    from .. import memory
    from ..core.catalog import markdown_table

    src = {
        "ecosim.core.catalog.markdown_table()": markdown_table,
        "ecosim.memory.markdown_table()": memory.markdown_table,
        "ecosim.tooling.readme.gallery()": gallery,
    }
    try:  # the torch backend's presets table (left as it is where torch is not installed)
        from ..torch.model import markdown_table as presets_table
    except ImportError:
        presets_table = None
    src["ecosim.torch.model.markdown_table()"] = presets_table
    peak = figures_dir.parent / "benchmarks" / "results" / "peak_memory.json"
    src["benchmarks/results/peak_memory.json"] = (lambda: peak_memory_table(peak))
    for md in sorted(figures_dir.glob("*.md")):
        src[f"figures/{md.name}"] = (lambda p=md: p.read_text().rstrip())
    return src


def blocks(figures_dir: str | Path = "figures") -> dict[str, str]:
    """The text each known block should have (files under ``figures_dir`` included); None for
    a block whose source needs an optional package that is not installed."""
    return {name: (fn() if fn is not None else None)
            for name, fn in _sources(Path(figures_dir)).items()}


def refresh(readme: str | Path = "README.md", figures_dir: str | Path = "figures", *,
            check: bool = False) -> list[str]:
    """Rewrite the generated blocks of ``readme``; returns the names of blocks that changed.

    Args:
        readme: the README path.
        figures_dir: where ``ecosim figures`` wrote its markdown tables.
        check: only report, do not write.

    Raises:
        ValueError: a block names a source that does not exist.
    """
    path = Path(readme)
    text = path.read_text()
    want = blocks(figures_dir)
    changed = []

    def sub(m: re.Match) -> str:
        name = m.group("name").strip()
        if name not in want:
            raise ValueError(f"README block {name!r} has no source; known: {sorted(want)}")
        if want[name] is None:  # a source that needs an optional package: left unchanged
            return m.group(0)
        body = want[name] + "\n"
        if body != m.group("body"):
            changed.append(name)
        return m.group(1) + body + m.group(4)

    new = _BLOCK.sub(sub, text)
    if changed and not check:
        path.write_text(new)
    return changed
