"""A claim as a row of a verdict table, and the markdown table of several.

:class:`Claim` holds what a source predicts, what the runs measured, the verdict and the
criterion that decided it; :func:`markdown` renders claims as the GitHub table the README
quotes. The verdict words are the caller's (``yes``/``holds``, ``partly``, ``no``).
"""
from __future__ import annotations

import dataclasses

__all__ = ["Claim", "markdown", "verdict_of"]


@dataclasses.dataclass
class Claim:
    """One row of the table and the points it contributes to the figure."""

    number: int
    claim: str
    theory: str
    measured: str
    verdict: str          # e.g. "yes", "partly" or "no"
    criterion: str
    # what the figure draws for this claim; each table defines its tuples
    points: list = dataclasses.field(default_factory=list)

    def row(self) -> tuple[str, str, str, str]:
        """The four cells: numbered claim, prediction, measurement, verdict with criterion."""
        return (f"({self.number}) {self.claim}", self.theory, self.measured,
                f"**{self.verdict}**: {self.criterion}")


def verdict_of(passed, yes: str = "yes") -> str:
    """``yes`` when every case passed, ``"partly"`` when some did, ``"no"`` when none did.

    Raises:
        ValueError: no cases. Nothing was judged, and "every case passed" of none would be
            a verdict no data could refute.

    Example:
        >>> verdict_of([True, False]), verdict_of([True], yes="holds")
        ('partly', 'holds')
    """
    passed = [bool(p) for p in passed]
    if not passed:
        raise ValueError("verdict_of needs at least one case; got none (nothing was judged)")
    if all(passed):
        return yes
    return "partly" if any(passed) else "no"


def markdown(items: list[Claim], header: tuple[str, ...], yes: str, note: str = "") -> str:
    """The claims as a GitHub markdown table and a count of the verdicts.

    Args:
        items: the claims, in table order.
        header: the column titles (four).
        yes: the word of a claim that holds (``"yes"`` or ``"holds"``).
        note: appended inside the closing parenthesis of the count line.

    Raises:
        ValueError: a cell holds ``|`` or a newline.
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for c in items:
        cells = c.row()
        for cell in cells:
            if "|" in cell or "\n" in cell:
                raise ValueError(f"claim {c.number}: a cell may not hold '|' or a newline: "
                                 f"{cell!r}")
        lines.append("| " + " | ".join(cells) + " |")
    n = {v: sum(c.verdict == v for c in items) for v in (yes, "partly", "no")}
    lines += ["", f"{n[yes]} of {len(items)} claims hold, {n['partly']} partly, {n['no']} not "
              f"(criteria in the last column{note})."]
    return "\n".join(lines)
