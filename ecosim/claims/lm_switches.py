"""The paper's two switches on the LM protocol: what each costs, and Table 1 with both on.

The ECO paper's BF16-with-master baseline computes its matmuls in bf16 from FP32 master
weights, and its FP8 methods also round the input of every quantized linear layer to E4M3
(RTN, one absmax scale per token). ``python -m ecosim.torch.lm`` has both as switches
(``--bf16-autocast``, ``--act-fp8``); the ``lm`` experiment runs with both off. A results file
of the same protocol with a switch on (``benchmarks/lm_protocol.py --extra=--act-fp8 ...``) is
judged here against the ``lm`` experiment's own runs:

* :func:`switch_effects`: per method, the paired effect of the switch, ``val_loss(on) -
  val_loss(off)`` for each seed where both trained, as a 95% t-interval;
* :func:`paper_protocol`: the runs with the switches the paper uses (each method's switched
  runs replace its plain ones; methods without switched runs keep theirs), as one group of
  result columns for :func:`~ecosim.claims.lm.lm_cells` and
  :func:`~ecosim.claims.lm.lm_orderings`.

Runs are paired only when they are the same experiment apart from the switches: the same
preset, steps and every other field of :func:`ecosim.experiments.lm.run_setting`. A results
file made under another protocol (the ``lm`` experiment's defaults changed since) is refused
with the field that differs, never compared.
"""
from __future__ import annotations

import json

import numpy as np

from ..experiments.lm import SWITCH_FLAGS, combine_runs
from .lm import lm_outcomes
from .stats import t_interval

__all__ = ["SWITCHES", "setting_without_switches", "switches_of", "check_comparable",
           "switch_effects", "paper_protocol"]

#: The switches a run record can carry (its ``run_setting`` key) and their labels.
SWITCHES = dict(zip(SWITCH_FLAGS, ("bf16 autocast", "E4M3 activations"), strict=True))


def setting_without_switches(setting: str) -> str:
    """A :func:`~ecosim.experiments.lm.run_setting` with the switches removed (canonical JSON).

    >>> setting_without_switches('{"act_fp8": true, "steps": 40}')
    '{"steps": 40}'
    """
    d = json.loads(setting)
    return json.dumps({k: v for k, v in d.items() if k not in SWITCHES}, sort_keys=True,
                      separators=(", ", ": "))


def switches_of(setting: str) -> tuple[str, ...]:
    """The switches on in a run setting (keys of :data:`SWITCHES`, in that order).

    >>> switches_of('{"act_fp8": true, "steps": 40}')
    ('act_fp8',)
    """
    d = json.loads(setting)
    return tuple(k for k in SWITCHES if d.get(k))


def _identity(r, i) -> tuple:
    return str(r["preset"][i]), setting_without_switches(str(r["setting"][i]))


# what check_comparable says to do about a switched results file of another protocol
_REMAKE = "remake the results file with this protocol (benchmarks/lm_protocol.py)"


def check_comparable(off, on, *, switched: bool = True, remedy: str = _REMAKE) -> None:
    """Refuse (ValueError naming the run and the field, ending with ``remedy``) unless every
    run of ``on`` is the protocol of the runs of ``off`` (one preset and setting) apart from
    its switches; with ``switched`` (default) every run of ``on`` must also have a switch on.

    The one check of "same experiment apart from the switches", used by the switches' claims
    and by any figure that pairs runs of two experiments seed by seed (``lm_eco_adam``)."""
    base = {_identity(off, i) for i in range(len(off["method"]))}
    if len(base) != 1:
        raise ValueError(f"the reference runs hold {len(base)} protocols (preset and setting); "
                         "expected one")
    (preset, setting), = base
    ref = json.loads(setting)
    what = "switched run" if switched else "run"
    for i in range(len(on["method"])):
        p, s = _identity(on, i)
        run = f"{what} {on['method'][i]} seed {int(on['seed'][i])}"
        if p != preset:
            raise ValueError(f"{run} is preset {p!r}; the reference runs are {preset!r}")
        if switched and not switches_of(str(on["setting"][i])):
            raise ValueError(f"run {on['method'][i]} seed {int(on['seed'][i])} of the switched "
                             f"runs has no switch on; expected one of {list(SWITCHES)}")
        if s != setting:
            d = json.loads(s)
            key = next((k for k in sorted(set(d) | set(ref)) if d.get(k) != ref.get(k)),
                       "its formatting")
            raise ValueError(f"{run} differs from the reference protocol in {key!r} "
                             f"({d.get(key)!r:.60} vs {ref.get(key)!r:.60}): {remedy}")


def switch_effects(off, on, *, checked: bool = False) -> list[dict]:
    """The paired effect of the switches on each method of ``on``.

    Args:
        off: the ``lm`` experiment's result columns (switches off).
        on: result columns of the same protocol with switches on
            (:func:`~ecosim.experiments.lm.records_to_results` of a results file).
        checked: the caller has already run :func:`check_comparable` on ``off, on``.

    Returns:
        One dict per (method, switches) of ``on``, in order of appearance: ``method``,
        ``switches`` (tuple of :data:`SWITCHES` keys), ``outcomes_on``/``outcomes_off``
        (counts of trained, stalled, diverged; a switched run's outcome is judged against
        the plain BF16-with-master run of its seed), ``effect`` (:func:`t_interval` of
        ``val_loss(on) - val_loss(off)`` over the seeds where both trained) and ``seeds``.

    Raises:
        ValueError: the switched runs are not the reference protocol apart from switches.
    """
    if not checked:
        check_comparable(off, on)
    both = combine_runs(None, [], [off, on])
    n_off = len(off["method"])
    method = np.asarray(both["method"]).astype(str)
    # stalls of every run judged against the plain BF16-with-master run of its seed
    judged = dict(both, method=np.concatenate([method[:n_off],
                                               np.char.add(method[n_off:], "@on")]))
    oc = lm_outcomes(judged)
    seed = np.asarray(both["seed"]).astype(np.int64)
    val = np.asarray(both["val_loss"], dtype=np.float64)
    sw = [switches_of(str(s)) for s in both["setting"]]
    out = []
    for key in dict.fromkeys((method[i], sw[i]) for i in range(n_off, len(method))):
        m, switches = key
        rows_on = [i for i in range(n_off, len(method)) if (method[i], sw[i]) == key]
        rows_off = [i for i in range(n_off) if method[i] == m and not sw[i]]

        def trained(rows):
            return {int(seed[i]): float(val[i]) for i in rows if oc[i] == "trained"}

        def counts(rows):
            return {k: int(sum(oc[i] == k for i in rows))
                    for k in ("trained", "stalled", "diverged")}
        a, b = trained(rows_on), trained(rows_off)
        seeds = sorted(set(a) & set(b))
        out.append({"method": m, "switches": switches, "outcomes_on": counts(rows_on),
                    "outcomes_off": counts(rows_off),
                    "effect": t_interval(np.array([a[s] - b[s] for s in seeds])),
                    "seeds": seeds})
    return out


def paper_protocol(off, on, *, checked: bool = False) -> dict[str, np.ndarray]:
    """Result columns of Table 1 with the paper's switches: each method's switched runs (from
    ``on``) replace its plain ones (from ``off``); methods ``on`` lacks keep their plain runs.

    The columns' ``setting`` is the switch-free setting (one group for
    :func:`~ecosim.claims.lm.lm_cells`); the switches each method ran with are in the added
    column ``switches`` (``"autocast"``, ``"act_fp8"``, ``"autocast+act_fp8"`` or ``""``).
    ``checked``: the caller has already run :func:`check_comparable` on ``off, on``.

    Raises:
        ValueError: the switched runs are not the reference protocol apart from switches, or
            one method appears in ``on`` with two different sets of switches.
    """
    if not checked:
        check_comparable(off, on)
    on_methods: dict[str, tuple] = {}
    for m, s in zip(np.asarray(on["method"]).astype(str), on["setting"]):
        prev = on_methods.setdefault(m, switches_of(str(s)))
        if prev != switches_of(str(s)):
            raise ValueError(f"method {m} appears with switches {prev} and "
                             f"{switches_of(str(s))}; expected one set per method")
    keep = np.array([str(m) not in on_methods for m in off["method"]], dtype=bool)
    both = combine_runs(None, [], [{k: np.asarray(v)[keep] for k, v in off.items()}, on])
    both["switches"] = np.array(["+".join(switches_of(str(s))) for s in both["setting"]])
    both["setting"] = np.array([setting_without_switches(str(s)) for s in both["setting"]])
    return both
