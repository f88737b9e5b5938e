"""Pages of the site that are generated at build start, never committed.

* ``api/``: one page per public module (a module of ecosim, no part of its name private, with an
  ``__all__``), documenting every name of its ``__all__``: with autodoc where the name is defined
  there, as a short entry pointing to the definition where the module re-exports it.
* ``results/``: one page per registered figure (``ecosim.figures.figures()``): its caption, the
  committed PNG, the committed table ``figures/NAME.md`` where there is one, the notes of
  ``results_notes/NAME.md`` where there are some, the experiments behind it and the section of
  ``theory.md`` it supports.
* ``_generated/``: the README's generated tables that no figure writes (formats, memory, LM
  presets), from the functions ``ecosim.tooling.readme`` names.
* ``notebooks/``: copies of ``../notebooks/*.ipynb`` (Sphinx reads sources below docs/ only).

Files are rewritten only when their text changes, so an unchanged page is not rebuilt.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import shutil
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent

# The section of docs/theory.md each figure supports, where one does: (label, anchor).
THEORY = {
    "grids": ("§2 Rounding", "2-rounding"),
    "noise_floor": ("§5.2 The quadratic example", "52-the-quadratic-example-closed-forms"),
    "beta_factor": ("§5.2 The quadratic example", "52-the-quadratic-example-closed-forms"),
    "naive_decay": ("§5.2 The quadratic example", "52-the-quadratic-example-closed-forms"),
    "rtn_stall": ("§5.7 The RTN stall", "57-the-rtn-stall"),
    "error_similarity": ("§5.8 Error similarity", "58-error-similarity"),
    "claims": ("§5.9 The claims table", "59-the-claims-table"),
    "relative_error": ("§5.10 Precision against horizon", "510-precision-against-horizon"),
    "precision_horizon": ("§5.10 Precision against horizon", "510-precision-against-horizon"),
    "sr_bits": ("§2.2 Stochastic rounding", "22-stochastic-rounding-sr-the-count-rule-and-keyed-bits"),
    "mlp_curves": ("§4.1 The schemes at a glance", "41-the-schemes-at-a-glance"),
    "mlp_table": ("§4.1 The schemes at a glance", "41-the-schemes-at-a-glance"),
    "adam_vs_sgdm": ("§4.5 AdamW", "45-adamw"),
    "eco_adam_breakdown": ("§4.5 AdamW", "45-adamw"),
    "dqt": ("§4.7 DQT", "47-dqt"),
    "dqt_claims": ("§4.7 DQT", "47-dqt"),
    "dqt_lm": ("§4.7 DQT", "47-dqt"),
    "mantissa_sweep": ("§4.8 Low-precision optimizer states", "48-low-precision-optimizer-states"),
    "compressed_states": ("§4.8 Low-precision optimizer states",
                          "48-low-precision-optimizer-states"),
    "lowmem_pareto": ("§4.8 Low-precision optimizer states", "48-low-precision-optimizer-states"),
    "memory_pareto": ("§6 Memory per parameter", "6-memory-per-parameter"),
    "lm_table": ("§7 The language-model recipe", "7-the-language-model-recipe"),
    "lm_pareto": ("§7 The language-model recipe", "7-the-language-model-recipe"),
    "lm_scaling": ("§7 The language-model recipe", "7-the-language-model-recipe"),
    "lm_switches": ("§7 The language-model recipe", "7-the-language-model-recipe"),
    "lm_moe": ("§7 The language-model recipe", "7-the-language-model-recipe"),
    "lm_finetune": ("§7 The language-model recipe", "7-the-language-model-recipe"),
    "lm_eco_adam": ("§4.5 AdamW", "45-adamw"),
}

# The README's generated blocks that are not a figure's table: (file under _generated/, source)
GENERATED = {
    "formats_table.md": "ecosim.core.catalog.markdown_table()",
    "memory_table.md": "ecosim.memory.markdown_table()",
    "lm_presets.md": "ecosim.torch.model.markdown_table()",
}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def public_modules() -> list[str]:
    """Every public module of ecosim: no private part in its name, and an ``__all__``."""
    import ecosim

    names = ["ecosim"]
    for info in pkgutil.walk_packages(ecosim.__path__, "ecosim."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        names.append(info.name)
    return sorted(n for n in names
                  if getattr(importlib.import_module(n), "__all__", None) is not None)


def public_names(modules: list[str] | None = None) -> dict[str, list[str]]:
    """``{module: its __all__}`` for the public modules."""
    modules = public_modules() if modules is None else modules
    return {m: list(importlib.import_module(m).__all__) for m in modules}


def missing_from(documented: set[str], names: dict[str, list[str]]) -> list[str]:
    """The qualified public names (``module.name``) that ``documented`` lacks."""
    return sorted(f"{m}.{n}" for m, ns in names.items() for n in ns
                  if f"{m}.{n}" not in documented)


def _kind(obj) -> str:
    if inspect.ismodule(obj):
        return "module"
    if inspect.isclass(obj):
        return "class"
    if callable(obj) and (inspect.isfunction(obj) or inspect.isbuiltin(obj)
                          or hasattr(obj, "__wrapped__")):
        return "function"
    return "data"


def _canonical(names: dict[str, list[str]]) -> dict[tuple[str, str], str]:
    """For each (module, name): the qualified name documented in full (itself or its home)."""
    homes: dict[int, str] = {}
    objs = {}
    for m, ns in names.items():
        mod = importlib.import_module(m)
        for n in ns:
            obj = getattr(mod, n)
            objs[(m, n)] = obj
            if _kind(obj) in ("class", "function") and getattr(obj, "__module__", None) == m:
                homes.setdefault(id(obj), f"{m}.{n}")
    out = {}
    for (m, n), obj in objs.items():
        kind = _kind(obj)
        if kind in ("class", "function"):
            home = homes.setdefault(id(obj), f"{m}.{n}")
        else:
            home = f"{m}.{n}"
        out[(m, n)] = home
    return out


def _attribute_docs(module: str) -> set[str]:
    """The module-level names that carry a ``#:`` doc comment in the source."""
    from sphinx.pycode import ModuleAnalyzer

    try:
        docs = ModuleAnalyzer.for_module(module).find_attr_docs()
    except Exception:  # no source (a compiled module): nothing to read
        return set()
    return {name for (scope, name) in docs if scope == ""}


def _api_page(module: str, names: list[str], canonical: dict, modules: set[str]) -> str:
    mod = importlib.import_module(module)
    attr_docs = _attribute_docs(module)
    title = f"``{module}``"
    lines = [title, "=" * len(title), "", f".. automodule:: {module}", "   :no-members:", ""]
    for n in names:
        obj = getattr(mod, n)
        kind = _kind(obj)
        full = f"{module}.{n}"
        home = canonical[(module, n)]
        if kind == "module":
            if obj.__name__ == full:  # a submodule: its own page documents it
                lines += [f"- :py:mod:`{full}`", ""]
            else:
                lines += [f".. py:data:: {n}", f"   :module: {module}", "",
                          f"   The module :py:mod:`{obj.__name__}`.", ""]
        elif home != full:
            directive = {"class": "py:class", "function": "py:function"}[kind]
            # a re-export named like a submodule (ecosim.optim.sgdm) is listed, not indexed
            # again: the name is in the index as that module
            extra = ["   :no-index:"] if full in modules else []
            lines += [f".. {directive}:: {n}", f"   :module: {module}", *extra, "",
                      f"   Re-exported: :py:obj:`{home}`.", ""]
        elif kind == "data" and n not in attr_docs:
            # no doc comment: autodoc would show the docstring of the value's type
            lines += [f".. py:data:: {n}", f"   :module: {module}",
                      f"   :type: {type(obj).__name__}", "",
                      f"   A module constant (``{type(obj).__name__}``); see the source.", ""]
        elif kind == "class":
            lines += [f".. autoclass:: {full}", "   :members:", ""]
        elif kind == "function":
            lines += [f".. autofunction:: {full}", ""]
        else:
            lines += [f".. autodata:: {full}", "   :no-value:", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_api(docs: Path = DOCS) -> list[str]:
    names = public_names()
    canonical = _canonical(names)
    out = docs / "api"
    pages = []
    for m, ns in names.items():
        _write(out / f"{m}.rst", _api_page(m, ns, canonical, set(names)))
        pages.append(m)
    index = ["# API reference", "",
             "Every public module of ecosim and every name of its `__all__`, from the",
             "docstrings (Google style). A name that a module re-exports is documented where",
             "it is defined and linked from the others. `tests/test_docs_site.py` checks that",
             "no public name is missing.", ""]
    packages = [m for m in pages if m.count(".") == 1 and any(p.startswith(m + ".") for p in pages)]
    core = [m for m in pages if m.count(".") <= 1 and m not in packages]
    index += ["## Modules", "", "```{toctree}", ":maxdepth: 1", ""]
    index += [m for m in core] + ["```", ""]
    for pkg in packages:
        sub = [p for p in pages if p.startswith(pkg + ".")]
        index += [f"## `{pkg}`", "", "```{toctree}", ":maxdepth: 1", "", pkg] + sub + ["```", ""]
    _write(out / "index.md", "\n".join(index))
    return pages


def _escape(text: str) -> str:
    return re.sub(r"([*$<>\[\]_])", r"\\\1", text)


def _title(caption: str) -> str:
    first = re.split(r"(?<=[.:])\s", caption, maxsplit=1)[0].rstrip(".:")
    return first if len(first) <= 80 else first[:77].rsplit(" ", 1)[0] + " ..."


def write_results(docs: Path = DOCS) -> list[str]:
    from ecosim.figures import figures

    out = docs / "results"
    pages = []
    experiment_modules = set(public_modules())
    for name, spec in figures().items():
        title = _title(spec.caption)
        heading = f"# `{name}`: {_escape(title)}" if len(title) <= 50 else f"# `{name}`"
        lines = [heading, "", "## What it shows", "", _escape(spec.caption), "",
                 "```{image} ../../figures/" + f"{name}.png", f":alt: figure {name}",
                 ":width: 100%", "```", ""]
        if (ROOT / "figures" / f"{name}.md").exists():
            lines += ["## The numbers", "",
                      f"The table that `make figures` writes as `figures/{name}.md`:", "",
                      "```{include} ../../figures/" + f"{name}.md",
                      ":heading-offset: 2", "```", ""]
        notes = docs / "results_notes" / f"{name}.md"
        if notes.exists():
            lines += ["## What holds and what does not", "",
                      "```{include} ../results_notes/" + f"{name}.md", "```", ""]
        lines += ["## Where it comes from", ""]
        exps = []
        for e in spec.experiments:
            mod = f"ecosim.experiments.{e}"
            exps.append(f"{{py:mod}}`{mod}`" if mod in experiment_modules else f"`{e}`")
        lines += [f"- Experiments: {', '.join(exps)}.",
                  f"- Rebuild it alone: `ecosim figures --only {name} --out figures`.",
                  f"- The registry entry: `ecosim.figures.figures()[\"{name}\"]`."]
        if name.startswith("lm_"):
            lines += ["- The protocol, its costs and what the runs show: "
                      "[Language-model measurements](../benchmarks/lm.md)."]
        if name in THEORY:
            label, anchor = THEORY[name]
            lines += [f"- Theory: [{label}](../theory.md#{anchor})."]
        _write(out / f"{name}.md", "\n".join(lines) + "\n")
        pages.append(name)
    index = ["# Results", "",
             "One page per figure of `make figures`, generated from the committed",
             "`figures/*.png` and `figures/*.md` and the figure's caption in the registry",
             "(`ecosim.figures.figures()`). The theory each one tests is in",
             "[Theory](../theory.md); how each verdict is computed is in",
             "[Verdicts](../verdicts.md).", "", "```{toctree}", ":maxdepth: 1", ""]
    index += pages + ["```", ""]
    _write(out / "index.md", "\n".join(index))
    return pages


def write_generated(docs: Path = DOCS) -> None:
    from ecosim.tooling.readme import blocks

    texts = blocks(ROOT / "figures")
    for fname, source in GENERATED.items():
        text = texts.get(source)
        if text is None:
            raise RuntimeError(f"cannot generate {fname}: {source} needs an optional package")
        _write(docs / "_generated" / fname, text.rstrip() + "\n")


def copy_notebooks(docs: Path = DOCS) -> list[str]:
    out = docs / "notebooks"
    out.mkdir(exist_ok=True)
    names = []
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        target = out / nb.name
        if not target.exists() or target.read_bytes() != nb.read_bytes():
            shutil.copyfile(nb, target)
        names.append(nb.stem)
    return names


def _generate(app) -> None:
    docs = Path(app.srcdir)
    write_generated(docs)
    write_api(docs)
    write_results(docs)
    copy_notebooks(docs)


_BORDER = re.compile(r"^(\s*)=+(?: +=+)+\s*$")


def _realign_tables(lines: list[str]) -> list[str]:
    """Simple tables whose cells run into the next column's margin, re-aligned.

    A cell of a docstring's simple table may be one character wider than its border (docutils
    refuses it); the cells are split on runs of two spaces (or a single space after an inline
    literal) and the borders widened to fit.
    """
    out, i = [], 0
    while i < len(lines):
        m = _BORDER.match(lines[i])
        ends = [j for j in range(i + 1, min(len(lines), i + 200)) if _BORDER.match(lines[j])]
        if not m or not ends:
            out.append(lines[i])
            i += 1
            continue
        last = ends[-1]
        j = last + 1
        while j < len(lines) and _BORDER.match(lines[j]):
            j += 1
        block = lines[i:last + 1]
        ncol = len(block[0].split())
        indent = m.group(1)
        rows = []
        for line in block:
            if _BORDER.match(line):
                rows.append(None)
                continue
            cells = re.split(r"\s{2,}|(?<=``)\s(?=\S)", line.strip(), maxsplit=ncol - 1)
            if len(cells) != ncol:  # not a table this can read: leave it as it is
                rows = None
                break
            rows.append(cells)
        if rows is None:
            out.extend(block)
        else:
            cells = [r for r in rows if r]
            width = [max(len(r[k]) for r in cells) for k in range(ncol)]
            for r in rows:
                if r is None:
                    out.append(indent + "  ".join("=" * w for w in width))
                else:
                    out.append(indent + "  ".join(c.ljust(w) for c, w in zip(r, width)).rstrip())
        i = last + 1
    return out


def _literal_blocks(lines: list[str]) -> list[str]:
    """Indented formulas and command lines after a paragraph become literal blocks.

    ecosim's docstrings show formulas and command lines as plain indented text after a
    paragraph (read as text in a terminal); reStructuredText needs ``::`` for that. A block
    counts when the paragraph before it ends in a colon, or when its own lines are indented
    unevenly (a block quote cannot be). Runs after napoleon, whose sections are fields by then.
    """
    def indent(x):
        return len(x) - len(x.lstrip())

    out = []
    k = 0
    while k < len(lines):
        line = lines[k]
        out.append(line)
        prev = lines[k - 1] if k else ""
        if (line.strip() == "" and prev.strip() and k + 1 < len(lines)
                and lines[k + 1].strip() and indent(lines[k + 1]) > indent(prev)
                and not prev.lstrip().startswith((":", "..", "=", "-", "*"))
                and not prev.rstrip().endswith("::")):
            here = indent(prev)
            block = []
            for x in lines[k + 1:]:
                if x.strip() and indent(x) <= here:
                    break
                block.append(x)
            first = indent(lines[k + 1])
            uneven = any(x.strip() and indent(x) > first for x in block)
            if prev.rstrip().endswith(":"):
                out[-2] = prev.rstrip() + ":"
            elif uneven:
                out[-1:] = ["", " " * here + "::", ""]
        k += 1
    return out


def _fix_docstring(app, what, name, obj, options, lines):
    lines[:] = _literal_blocks(_realign_tables(lines))


def _skip_foreign(app, what, name, obj, skip, options):
    """Skip class attributes that hold another package's functions (``clip = np.clip``)."""
    if what == "class" and callable(obj) and not inspect.isclass(obj):
        owner = getattr(obj, "__module__", None) or ""
        if not owner.startswith("ecosim"):
            return True
    return None


def setup(app):
    app.connect("builder-inited", _generate)
    app.connect("autodoc-skip-member", _skip_foreign)
    app.connect("autodoc-process-docstring", _fix_docstring, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
