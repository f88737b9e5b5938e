"""How values go onto a grid: the :class:`Rounding` record, and the rule of each mode.

A :class:`Rounding` says which mode rounds (one of :data:`MODES`), how many random bits a
stochastic mode reads from each word (``nbits``) and how it counts them (``sr_rule``), and what
a value past the format's range becomes (``saturate``). It is checked once, when it is built;
:func:`ecosim.quantize`, :class:`ecosim.Quantizer`, the torch backend and the optimizers take
it and check nothing of it again.

A mode is one :class:`ModeRule` below. Its rules are functions of arrays and a word shim
(:mod:`ecosim.core.bitops` says what a shim has), so NumPy and torch run the same arithmetic:

- :meth:`ModeRule.addend`: the bits added to a magnitude's bits before the dropped low bits are
  cut (the normal range: a carry out of the dropped bits is the step up);
- :meth:`ModeRule.count`: a count of uniform steps, given as its floor and an exact remainder
  (below a float format's smallest normal);
- :meth:`ModeRule.on_step_one`: magnitudes rounded onto the integers (integer formats);
- :meth:`ModeRule.headroom`: how far, in working-float bits, a magnitude may lie past max and
  still not round past it;
- :attr:`ModeRule.overflow_to_max`: whether a finite value past the range becomes max even
  without ``saturate``.

The kernels' faster paths (NumPy's and torch's) either say which modes they serve or use only
:meth:`ModeRule.addend` and :meth:`ModeRule.headroom` (torch's path on the bits with their
sign); every other mode takes these rules. A new mode is therefore a rule here and its row in
:data:`RULES`, the line of the reference oracle that tests it, and its section in
docs/theory.md.

Example:
    >>> r = Rounding("sr", nbits=8)
    >>> r.stochastic, Rounding("rtn", nbits=8) == Rounding("rtn")
    (True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from .checks import check_bool

__all__ = ["Rounding", "ModeRule", "RULES", "MODES", "SR_RULES"]

#: How SR turns the position ``p`` into a count of rounding-up words (``sr_rule=``): ``"floor"``
#: (the default) counts ``floor(p * 2**nbits)``; ``"nearest"`` counts ``p * 2**nbits`` rounded to
#: nearest, ties to even (docs/theory.md §2.2 gives the bias of each).
SR_RULES = ("floor", "nearest")


class ModeRule:
    """The arithmetic of one rounding mode, for both backends (see the module docstring).

    ``plan`` is the rounding's :class:`ecosim.core.rounding.Plan` (format, working float, ``nbits``,
    ``sr_rule``); ``ops`` the word shim; ``rbits`` the random words (None unless
    :attr:`stochastic`), of which only the low ``plan.nbits`` bits are read.
    """

    name = ""
    #: whether the mode reads random bits (it then needs ``key=`` or ``rbits=``)
    stochastic = False
    #: whether a finite value past max becomes max with ``saturate=False`` too
    overflow_to_max = False

    def headroom(self, sh: int) -> int:
        """How many magnitude bits past max's may round to max when ``sh`` bits are dropped."""
        raise NotImplementedError

    def addend(self, plan, a, r, rbits, ops) -> None:
        """Into ``r``: the bits ``a`` plus what rounds them when ``plan.sh`` low bits are
        dropped (truncating ``r`` afterwards gives the rounded magnitude). ``a`` may hold the
        sign bit: only the bits below it may be read."""
        raise NotImplementedError

    def count(self, plan, fl, rem, d, rbits, ops):
        """The rounded count of steps: int64 ``fl`` is the floor of ``|x| / step`` and ``rem``
        the remainder, exactly ``|x| / step - fl = rem / 2**d`` (``d`` an int64 array; where
        ``d <= 0`` the count is exact and ``rem`` is 0)."""
        raise NotImplementedError

    def on_step_one(self, plan, y, rbits, ops):
        """Non-negative working floats ``y`` (at most ``2**53``, every one finite) rounded onto
        the integers, as floats of ``y``'s dtype (a new array)."""
        raise NotImplementedError


class Nearest(ModeRule):
    """``"rtn"``: to the nearest grid value; ties to the neighbour with an even code, or away
    from zero for formats that say so (E8M0)."""

    name = "rtn"

    def headroom(self, sh):
        return (1 << (sh - 1)) - 1 if sh > 0 else 0

    def addend(self, plan, a, r, rbits, ops):
        # half a step; ties to even: half a step minus one, plus the kept part's lowest bit
        sh = plan.sh
        if sh == 0:
            r[...] = a
        elif plan.fmt.ties == "even":
            ops.field(a, sh, 1, r)
            r += a
            r += ops.word((1 << (sh - 1)) - 1, r)
        else:
            ops.add(a, 1 << (sh - 1), r)

    def count(self, plan, fl, rem, d, rbits, ops):
        pos = d > 0
        half = 1 << ops.clip(ops.clip(d, 0, 62) - 1, 0, None)
        if plan.fmt.ties == "even":
            up = pos & ((rem > half) | ((rem == half) & ((fl & 1) == 1)))
        else:
            up = pos & (rem >= half)
        return fl + ops.cast(up, ops.int64)

    def on_step_one(self, plan, y, rbits, ops):
        big = float(2 ** plan.src.mant)
        if max(plan.fmt.int_max, -plan.fmt.int_min) <= big:
            n = y + big  # IEEE addition rounds 0 <= y <= 2**S to an integer, ties to even
            n -= big
            return n
        return ops.xp.round(y)  # half to even


class Stochastic(ModeRule):
    """``"sr"``: with ``p`` the position of ``|x|`` between its neighbours and ``r`` the low
    ``nbits`` of the random word, up iff ``r + t >= 2**nbits``, ``t`` the floor (or with
    ``sr_rule="nearest"`` the nearest, ties to even) of ``p * 2**nbits``."""

    name = "sr"
    stochastic = True

    def headroom(self, sh):
        return 0  # any fraction may round up

    def addend(self, plan, a, r, rbits, ops):
        # With j = nbits - sh >= 0, r + (low << j) >= 2**nbits is exactly (r >> j) + low >=
        # 2**sh, a carry out of the dropped bits (with j < 0, (r << -j) + low >= 2**sh): adding
        # the scaled random word and truncating is the count rule itself, bit for bit.
        # "nearest" with k = sh - nbits > 0 also adds 2**(k-1) - 1 plus bit k of a, the ties-to-
        # even rounding of the low sh bits to their top nbits; the addend stays below 2**sh, so
        # nothing new can round past max.
        sh, nb = plan.sh, plan.nbits
        if nb >= sh:
            ops.field(rbits, nb - sh, sh, r)
        else:
            k = sh - nb
            ops.field(rbits, 0, nb, r)
            r <<= ops.word(k, r)
            if plan.sr_rule == "nearest":
                r += (a >> ops.word(k, a)) & ops.word(1, a)  # bit k of a (below the sign bit)
                r += ops.word((1 << (k - 1)) - 1, r)
        r += a

    def count(self, plan, fl, rem, d, rbits, ops):
        xp, nb = ops.xp, plan.nbits
        # t = floor(rem * 2**nbits / 2**d), with the true d (rem < 2**min(d, 54)).
        k = ops.clip(d - nb, 0, 62)
        if plan.sr_rule == "nearest":
            # rint(rem * 2**nbits / 2**d), ties to even; rem < 2**54, so the sum stays in int64.
            half = (1 << ops.clip(k - 1, 0, None)) - 1
            rounded = (rem + xp.where(k > 0, half + ((rem >> k) & 1), 0)) >> k
        else:
            rounded = rem >> k
        t = xp.where(d >= nb, rounded, rem << ops.clip(nb - d, 0, 62))
        nmask = (1 << nb) - 1
        up = (ops.cast(rbits, ops.int64) & nmask) > (nmask - t)
        return fl + ops.cast(up, ops.int64)

    def on_step_one(self, plan, y, rbits, ops):
        xp = ops.xp
        n = xp.floor(y)
        t = (y - n) * float(2 ** plan.nbits)  # exact
        # floor, < 2**nbits; or ties to even, <= 2**nbits: r > nmask - t still decides
        # r + t >= 2**nbits in int64.
        t = ops.cast(xp.round(t) if plan.sr_rule == "nearest" else xp.floor(t), ops.int64)
        nmask = (1 << plan.nbits) - 1
        n += ops.cast((ops.cast(rbits, ops.int64) & nmask) > (nmask - t), n.dtype)
        return n


class TowardZero(ModeRule):
    """``"rtz"``: to the grid value nearest zero (truncation: IEEE 754's roundTowardZero, as
    accumulators and some hardware round). A finite value past the range becomes max even with
    ``saturate=False`` (IEEE 754, clause 7.4); an infinity stays one where the format has it."""

    name = "rtz"
    overflow_to_max = True

    def headroom(self, sh):
        return (1 << sh) - 1  # everything below the next binade's value truncates to max

    def addend(self, plan, a, r, rbits, ops):
        r[...] = a

    def count(self, plan, fl, rem, d, rbits, ops):
        return fl

    def on_step_one(self, plan, y, rbits, ops):
        return ops.xp.floor(y)


#: The modes, by name: every rounding ecosim runs.
RULES: dict[str, ModeRule] = {rule.name: rule for rule in (Nearest(), Stochastic(), TowardZero())}
#: The names of the modes (``mode=``).
MODES = tuple(RULES)


@dataclass(frozen=True)
class Rounding:
    """One rounding, checked: what :func:`ecosim.quantize` is told besides the format.

    Args:
        mode: one of :data:`MODES`: ``"rtn"`` (to nearest), ``"sr"`` (stochastic), ``"rtz"``
            (toward zero).
        nbits: how many low bits of each random word a stochastic mode reads (1..32).
        sr_rule: how a stochastic mode counts rounding-up words (:data:`SR_RULES`).
        saturate: True: values past the range (and infinities) become +-max. False: the
            format's own rules (see :func:`ecosim.quantize`).

    A mode that reads no random bits keeps ``nbits=32`` and ``sr_rule="floor"`` whatever was
    given (after checking it), so two roundings that round alike compare equal.

    Raises:
        ValueError: an unknown mode or SR rule, or ``nbits`` not an int in 1..32.
        TypeError: ``saturate`` not a bool.
    """

    mode: str = "rtn"
    nbits: int = 32
    sr_rule: str = "floor"
    saturate: bool = True

    def __post_init__(self):
        if not isinstance(self.mode, str) or self.mode not in RULES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        nbits = self.nbits
        if not isinstance(nbits, int) or isinstance(nbits, bool) or not 1 <= nbits <= 32:
            raise ValueError(f"nbits must be an int in 1..32, got {nbits!r}")
        if not isinstance(self.sr_rule, str) or self.sr_rule not in SR_RULES:
            raise ValueError(f"sr_rule must be one of {SR_RULES}, got {self.sr_rule!r}")
        # normalised once here, as a record is built: a frozen value, not a cache
        object.__setattr__(self, "saturate", check_bool(self.saturate, "saturate"))
        if not RULES[self.mode].stochastic:
            object.__setattr__(self, "nbits", 32)
            object.__setattr__(self, "sr_rule", "floor")

    @classmethod
    def of(cls, mode, nbits: int = 32, sr_rule: str = "floor",
           saturate: bool = True) -> Rounding:
        """``mode`` itself when it is a :class:`Rounding` (the other arguments then at their
        defaults), else the record of the four arguments."""
        if isinstance(mode, Rounding):
            if (nbits, sr_rule) != (32, "floor") or saturate is not True:
                raise ValueError("a Rounding carries nbits, sr_rule and saturate: give them "
                                 "to Rounding(...), not beside it")
            return mode
        return cls(mode, nbits, sr_rule, saturate)

    @property
    def rule(self) -> ModeRule:
        """The mode's arithmetic."""
        return RULES[self.mode]

    @property
    def stochastic(self) -> bool:
        """Whether this rounding reads random bits (needs ``key=`` or ``rbits=``)."""
        return RULES[self.mode].stochastic
