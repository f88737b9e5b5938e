"""ECO optimizers as ``torch.optim.Optimizer`` subclasses, mirroring :mod:`ecosim.optim`.

:class:`ECOSGD` mirrors :func:`ecosim.optim.sgdm` (EMA or heavy-ball momentum, Nesterov) and
:class:`ECOAdamW` mirrors :func:`ecosim.optim.adamw`, each with the schemes ``"master"``,
``"naive"``, ``"eco"``, ``"eco_exact"`` and ``"kahan"`` (and AdamW's ``"eco_wd"`` and
``"eco_momentum_exact"``, and its ``schedule_guard``: the scheme records of
:mod:`ecosim.optim.schemes` marked for torch), per-parameter weight quantizers and
low-precision states (``states=``). The update rules, the order of the float operations and
the SR keys are the NumPy reference's (see the module docstrings of :mod:`ecosim.optim.sgdm`,
:mod:`ecosim.optim.adamw` and :mod:`ecosim.optim.base`), so on the CPU, in float32, the stored
weights and the states equal the NumPy optimizer's bit for bit:

* a parameter's weights are either a float32/float64 tensor holding the dequantized stored
  weights (the constructor writes ``q(p)`` into it, SR key ``fold_in(key, "init", name)``), or
  real low-precision codes held by a :class:`ecosim.torch.nn.QuantizedLinear` (its
  :class:`~ecosim.torch.nn.GradSlot` is the parameter; the optimizer reads the weights from the
  codes and stores ``encode(theta_tilde)`` back; see :mod:`ecosim.torch.nn` for the protocol of
  the first write). Both give the same trajectory;
* step ``t`` (a global counter, as NumPy's ``state.step``) writes ``q(theta_tilde)`` with SR key
  ``fold_in(key, t, name)``; a low-precision buffer ``b`` (``"g"``, ``"m"``, ``"v"``,
  ``"master"``) is rounded with ``fold_in(key, t, name, b)``, ``m`` again after ECO's injection
  with ``fold_in(key, t, name, "m_inject")``, the Kahan buffer with ``fold_in(key, t, name,
  "c")`` (at construction: ``fold_in(key, "init", name, "c")``, ``fold_in(key, "init", name,
  "master")``, and exact ECO's ``m_0`` with ``fold_in(key, 0, name, "init_m")``); ``name``
  comes from ``model.named_parameters()`` pairs, is ``"0", "1", ...`` (counting over all
  groups) for plain tensors, and is the store's name for stored weights;
* a parameter without a weight quantizer (``weights=None`` or a dict entry None) is updated in
  full precision by the same rule (NumPy's ``"fp"`` for that parameter): the embeddings and
  norms of a model whose linear layers alone are stored; a bfloat16/float16 parameter has no
  full precision to keep, so it is a weight on its own dtype's grid (RTN, fixed scale 1)
  under the optimizer's scheme, its update computed in float32;
* scalars are Python floats applied to the tensors exactly where NumPy applies them (a
  ``torch.add(a, b, alpha=c)`` may fuse into one rounding where NumPy rounds twice, so the
  code spells out every product);
* AdamW's square root of a float32 ``v`` is taken in float64 and rounded back on the CPU
  (torch's vectorized CPU ``sqrt`` is not correctly rounded: with its AVX512 kernels it is off
  by one ulp on ~0.7% of float32 and float64 inputs; CUDA's ``sqrt`` is IEEE). float64
  parameters therefore follow NumPy within an ulp of ``d`` in AdamW, not bit for bit; SGD is
  bit-exact in both dtypes.

Where rounding happens, per step: the gradient (``states["g"]``, on entry), the moments after
their update (``states["m"]``, ``states["v"]``), the master copy (``states["master"]``), the
weight write ``q(theta_tilde)``, ``m`` after ECO's injection, and Kahan's ``c``. Every other
value is float32 (float64) arithmetic.

Storage: low-precision states are held as codes in their torch dtype (``bfloat16`` for
``"bf16"``, ``float8_e4m3fn`` codes plus row scales in ``state["m_scales"]`` for ``"e4m3"``,
packed uint8 for 4-bit formats), so ``nbytes`` (and :func:`ecosim.torch.memory.measured_memory`)
shows the saving; :meth:`~ECOAdamW.state_values` returns their values. :meth:`state_dict`
exports them as same-size integers (``Optimizer.load_state_dict`` casts floating states to the
parameter's dtype) and :meth:`load_state_dict` restores them, so checkpoints resume bit for
bit.

Sharded parameters (FSDP2): a parameter may be a DTensor sharded on dim 0 (``Shard(0)`` on a
1-D mesh, what ``torch.distributed.fsdp.fully_shard`` makes; other placements are refused).
Each process updates its own rows (``torch.chunk``'s split: ``ceil(n0 / W)`` rows per process,
FSDP's padding never seen) and keeps their states, and the result equals the unsharded
optimizer's bit for bit: the math is element-wise; row-wise and per-group scales see whole
rows (scales whose blocks would span processes, tensor-wise or column-wise or one row of a
1-D tensor, are refused: they would need a reduction across processes; fixed scales are
fine), and SR draws element ``i`` of the whole tensor from counter ``i`` wherever it lives
(the shard's keys carry its global starting element as the counter, ``key=(k, offset)`` of
:func:`ecosim.torch.quantize`). Packed (4-bit and narrower) state formats are refused.
:meth:`~ECOAdamW.state_dict` returns the states of such parameters as DTensors of the same
placement, :meth:`~ECOAdamW.full_state_dict` gathers them into whole tensors (a collective),
and :meth:`~ECOAdamW.load_state_dict` takes either, or this process's rows.
:meth:`~ECOAdamW.encoded` and :meth:`~ECOAdamW.state_values` give this process's rows.

Learning rates are read from ``group["lr"]`` at every step, so torch LR schedulers work.
``eco_exact`` for SGD needs ``lr(t+1)`` at step ``t``: it is ``group["next_lr"]`` when set,
else ``group["lr"]`` (a constant learning rate). AdamW's ``schedule_guard`` needs the later
rates ``lr(t + 1 .. t + H)``, which a ``torch.optim.lr_scheduler`` cannot be asked for: it
takes them from ``lr_schedule=`` (``t -> lr``, the rate the scheduler will set at step ``t``)
and refuses to step when ``group["lr"]`` is not ``lr_schedule(t)`` (see :class:`ECOAdamW`).

Momentum coefficients are read from ``group["momentum"]`` and ``group["betas"]`` at every step
too, so schedulers that cycle them (``OneCycleLR``'s ``cycle_momentum``) work. ECO's
injection at step ``t`` gives the rounding error back through the next step's momentum
update, so its coefficient ``(1/lr)(1 - 1/beta)`` (AdamW: times ``(1 - b1^n) d``) wants the
next step's ``beta`` as it wants the next step's ``lr``; it takes this step's, the same
``beta`` this step's momentum update and bias correction use (as NumPy does when its ``b1``
changes between steps), an error first order in the change of ``beta`` per step, as for
``lr``. SGD's ``eco_exact``, which claims the master trajectory exactly, refuses to step when
``group["momentum"]`` changed since its last injection (it cannot know the next ``beta``).

Speed. The cost of a step is the weight write: the bit-exact integer rounding (and, for SR,
the counter-based random bits) of :mod:`ecosim.torch.rounding`. On one CPU thread (4.2M
parameters in 16 tensors of 512 x 512, row-wise E4M3) ECO and master AdamW steps cost the
same, about 4x (RTN) and 6x (SR) a float32 ``torch.optim.AdamW`` step, and the weight
quantizer alone is about two thirds (RTN) and three quarters (SR) of it; codes instead of
float32 parameters add 5-8% (decode before, encode after). The optimizer's own work bounds
its temporaries: the weights are read and written one parameter at a time (a pass over all
parameters at once would
materialise the decoded float32 weights of the whole model, the copy that ECO exists to
avoid). For small tensors the cost is per call, not per element, so AdamW with float
moments batches consecutive parameters of a group up to 2^18 elements: ``torch._foreach``
moment updates, ``d`` and ``(lr/bc1) m/d`` on the concatenated moments, ECO's injection
after the writes (``ECOAdamW._step_group``). Each element sees the same IEEE operations in
the same order, so the bits do not change (on the CPU ``_foreach`` runs the same kernels
tensor by tensor); on a language model's 14 quantized matrices of ~3.5k weights this cuts
the step by about a tenth. The NaN/inf check of the gradients is one ``aminmax`` per
gradient (min and max propagate NaN and show inf) and one device sync per group.
``ECOAdamW(compile=True)`` fuses the element-wise moment math (see :class:`ECOAdamW`).

Not mirrored: scheme ``"fp"`` (use ``torch.optim``), zero learning rates for SGD's ``eco_exact``
(NumPy's pending error; refused here; AdamW's ``eco_momentum_exact`` keeps it pending, per
parameter, in ``state["pending"]``), DQT's ``prev_scale``, ``init_weights``; the diagnostics
are :meth:`~ECOAdamW.diagnostics` (``diagnostics=True``), not a step's return value.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import torch

from ..core.checks import check_bool, check_positive
from ..optim.adamw import schedule_guard_lr
from ..optim.schemes import get as get_scheme
from ..optim.schemes import injection
from ..optim.policies import check_beta
from .optim_base import ECOBase
from .numerics import div, sqrt_rounded

__all__ = ["ECOSGD", "ECOAdamW"]


class ECOSGD(ECOBase):
    """SGD with momentum over quantized weights (mirror of :func:`ecosim.optim.sgdm`).

    ``momentum`` means what it means in ``torch.optim.SGD``: heavy-ball momentum
    ``m = beta m + g`` (no dampening), so ``ECOSGD(ps, lr=0.1, momentum=0.9,
    scheme="master")`` keeps the master copy ``torch.optim.SGD(ps, lr=0.1, momentum=0.9)``
    would hold. ``heavy_ball=False`` selects the EMA form ``m = beta m + (1 - beta) g`` of
    :func:`ecosim.optim.sgdm`'s default (and of the paper's analysis): its steps are
    ``1 - beta`` times as large at the same ``lr`` (10x smaller at ``beta = 0.9``); the
    NumPy mirror's ``sgdm(lr, beta)`` equals ``ECOSGD(..., heavy_ball=False)``.

    Step ``t`` (``lr = group["lr"]``; ``g`` the gradient at the stored weights ``w``, plus
    ``weight_decay * w``; ``gain = beta``, ``beta**2`` with Nesterov)::

        m = beta * m + g                     # heavy_ball=False: beta m + (1 - beta) g  [q_m]
        u = m                                # nesterov: u = beta * m + g (EMA: (1 - beta) g)
        theta_tilde = base - lr * u          # base: w; master: theta; kahan: w + c
        w = q(theta_tilde);  e = theta_tilde - w          <- the weight write
        eco:       m += (1/lr)(1 - 1/beta) e             (Nesterov: / beta once more) [q_m]
        eco_exact: m += e_prev (beta/(gain lr)) - e (1/(gain lr_next));  e_prev = e  [q_m]
        kahan:     c = q_c(e)
        master:    theta = theta_tilde                                              [q_master]

    Args:
        params: tensors, ``named_parameters()`` pairs, or param-group dicts of either; a
            :class:`~ecosim.torch.nn.GradSlot` (a weight stored by
            :func:`~ecosim.torch.store_weights`) is read from and written to its codes.
        lr: learning rate (> 0 for eco/eco_exact).
        momentum: ``beta`` in (0, 1) (eco/eco_exact), [0, 1) otherwise.
        weight_decay: coupled L2.
        scheme: ``"master"``, ``"naive"``, ``"eco"``, ``"eco_exact"``, ``"kahan"``.
        weights: an :class:`ecosim.torch.Quantizer` for every plain parameter, a dict name ->
            Quantizer or None (None or absent: that parameter stays in full precision and is
            updated like ``"fp"``), or None (stored weights only; the rest full precision).
            Stored weights use their store's quantizer (a different one here is an error).
        key: root key of the SR draws.
        nesterov: Nesterov momentum, as :func:`ecosim.optim.sgdm`.
        heavy_ball: True (the default, ``torch.optim.SGD``'s momentum): ``m = beta m + g``;
            False: the EMA form ``m = beta m + (1 - beta) g`` (NumPy ``sgdm``'s default).
            ECO's injection coefficient is the same for both.
        states: per-buffer formats ``{"g": ..., "m": ..., "master": ...}``: an
            :class:`ecosim.torch.Quantizer`, a format name or a ``(format, mode)`` pair (as
            :func:`ecosim.optim.base.state_quantizer`).
        diagnostics: collect per-step diagnostics (:meth:`diagnostics`, :meth:`never_changed`):
            the fraction of stored weights changed, never changed, ``|m|/|g|`` and ECO's
            injected energy kept. Off by default (then it costs nothing); on, it changes no
            result.

    Example:
        >>> import torch
        >>> from ecosim.torch import Quantizer
        >>> p = torch.nn.Parameter(torch.ones(1, 4))
        >>> opt = ECOSGD([p], 0.1, 0.9, scheme="eco", weights=Quantizer("int8", scale=2.0**-4))
        >>> for _ in range(20):              # every update is below half a grid step
        ...     p.grad = torch.full((1, 4), 0.02)
        ...     opt.step()
        >>> p.detach()                      # naive rounding would stay at 1.0
        tensor([[0.8750, 0.8750, 0.8750, 0.8750]])
    """

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, *, scheme="eco",
                 weights=None, key=0, nesterov=False, heavy_ball=True, states=None,
                 diagnostics=False):
        # the NumPy optimizers' checks (ecosim.optim.policies, ecosim.core.checks)
        momentum = check_beta(momentum, "momentum", scheme)
        weight_decay = check_positive(weight_decay, "weight_decay", allow_zero=True)
        self.nesterov = check_bool(nesterov, "nesterov")
        self.heavy_ball = check_bool(heavy_ball, "heavy_ball")
        super().__init__(params, dict(lr=lr, momentum=float(momentum),
                                      weight_decay=float(weight_decay), next_lr=None),
                         scheme, weights, key, states, diagnostics)

    _twin = "sgdm"
    _linear = True

    def _gain(self, beta):
        return beta * beta if self.nesterov else beta

    def _lr_next(self, group):
        nl = group.get("next_lr")
        return group["lr"] if nl is None else nl

    def _check_group(self, group):
        if not self._scheme_record().exact:
            return
        if group["lr"] == 0.0 or self._lr_next(group) <= 0.0:
            raise ValueError("eco_exact with a zero learning rate (this step's or the next's) "
                             "is not supported here (NumPy keeps the error pending)")
        assumed = group.get("exact_momentum")
        if assumed is not None and group["momentum"] != assumed:
            raise ValueError(
                f"eco_exact: momentum changed from {assumed!r} to {group['momentum']!r} since "
                "its last injection, which assumed it constant, so the run is no longer "
                "exact; keep the momentum constant (OneCycleLR(..., cycle_momentum=False)) "
                "or use scheme='eco'")

    def _init_state(self, st, group, meta, full, w):
        self._zeros(st, "m", full)
        self._init_scheme_state(st, group, meta, full, w)
        if meta.sch.exact:  # m_0 = -e_0 / (gain lr_0)
            group["exact_momentum"] = group["momentum"]  # the beta the injections assume
            m0 = st["e_prev"] * (-1.0 / (self._gain(group["momentum"]) * group["lr"]))
            self._keep(st, "m", m0, self._key(group, meta), 0, meta.name, "init_m")

    def _step_param(self, meta, p, w, g, st, group, t):
        beta, lr, wd = group["momentum"], group["lr"], group["weight_decay"]
        name, key = meta.name, self._key(group, meta)
        if wd:
            g = g + wd * w  # coupled L2 at the stored weights
        m = self._load(st, "m", w)
        m.mul_(beta)
        m += g if self.heavy_ball else (1.0 - beta) * g
        m = self._keep(st, "m", m, key, t, name, "m")
        if self.nesterov:
            u = m * beta
            u += g if self.heavy_ball else (1.0 - beta) * g
        else:
            u = m
        if lr == 0.0:  # no write: no rounding, no error, nothing to inject
            return
        base = self._base(meta, st, w)
        tt = u * (-lr)
        tt += base  # theta_tilde = base - lr * u
        e_prev = st.get("e_prev")  # the write replaces it
        e = self._write_weights(meta, p, st, w, tt, key, t)
        if e is None:
            return
        if meta.sch.exact:  # m += e_prev beta / (gain lr) - e / (gain lr_next)
            gain = self._gain(beta)
            m += e_prev * (beta / (gain * lr))
            m -= e * (1.0 / (gain * self._lr_next(group)))
            self._keep(st, "m", m, key, t, name, "m_inject")
            group["exact_momentum"] = beta
        else:  # ECO's injection
            a = meta.sch.coefficient(1.0 / lr, beta)
            self._inject(st, m, injection(e, a / beta if self.nesterov else a), key, t, name)


class ECOAdamW(ECOBase):
    """AdamW over quantized weights (mirror of :func:`ecosim.optim.adamw`).

    Step ``t`` (``n = t + 1``, less the steps that skipped the parameter for want of a
    ``.grad``; ``lr = group["lr"]``, ``g`` the gradient at the stored weights ``w``)::

        m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2                    [q_m, q_v]
        d = sqrt(v / (1 - b2^n)) + eps
        theta_tilde = base (1 - lr wd) - (lr / (1 - b1^n)) m / d
            # base: w; master: theta; eco_exact: w + e_prev; kahan: w + c
        w = q(theta_tilde);  e = theta_tilde - w          <- the weight write
        eco:       m += ((1 - b1^n)/lr)(1 - 1/b1) d e     [* (1 - lr wd)]       [q_m]
                   (schedule_guard: lr of the coefficient = L(t), see below)
        eco_wd:    m += ((1 - b1^n)/lr)(1 - (1 - lr wd)/b1) d e                 [q_m]
        eco_momentum_exact:
                   m += ((1 - b1^n)/lr)(1 - lr wd) d (e_prev - e/b1);  e_prev = e   [q_m]
                   (while state["pending"]: base w + e_prev and no e_prev term; the
                   first step with lr > 0 clears it)
        eco_exact: e_prev = e
        kahan:     c = q_c(e)
        master:    theta = theta_tilde                                          [q_master]

    Schedule guard (``schedule_guard=True``; schemes ``"eco"`` and ``"eco_wd"``): the
    injection is sized with ``L(t)``, the ``b1``-weighted mean of the learning rates of the
    steps that will consume it, :func:`ecosim.optim.schedule_guard_lr` (the NumPy rule, the
    same function): ``lr(t)`` itself when ``lr(t + 1 .. t + H)`` all equal it (bit for bit
    ECO at a constant rate), no injection when they are all 0. The later rates come from
    ``lr_schedule``: a callable ``t -> lr`` (``t`` the optimizer's step counter :attr:`t`,
    0 at the first step, as NumPy's schedules) or a list of them, one per param group. A
    ``torch.optim.lr_scheduler`` cannot be looked ahead, so the optimizer is told the
    schedule it follows and checks it: at every step ``group["lr"]`` must equal
    ``lr_schedule(t)`` exactly, else ValueError (nothing is written). For ``LambdaLR(opt,
    f)``, whose rate is ``base_lr * f(t)``, pass ``lr_schedule=lambda t: base_lr * f(t)``.
    The optimizer pickles ``lr_schedule`` with itself, so a pickled optimizer needs a
    picklable one (a module-level function or a ``functools.partial``, not a lambda).

    Args:
        params, weights, key, states, diagnostics: as :class:`ECOSGD` (``states`` keys ``"g"``,
            ``"m"``, ``"v"``, ``"master"``).
        lr: learning rate (> 0 for eco).
        betas: ``(b1, b2)``; ``b1`` in (0, 1) for eco/eco_exact.
        eps: added to the root of the bias-corrected second moment, > 0.
        weight_decay: decoupled weight decay.
        scheme: ``"master"``, ``"naive"``, ``"eco"``, ``"eco_exact"``, ``"kahan"``,
            ``"eco_wd"`` or ``"eco_momentum_exact"`` (the records of
            :mod:`ecosim.optim.schemes` the torch mirror runs, ``torch_names_for("adamw")``).
        wd_corrected_injection: multiply ECO's coefficient by ``(1 - lr wd)``.
        schedule_guard: size ECO's injection with ``L(t)`` (above) instead of ``lr(t)``;
            needs ``lr_schedule`` and an injecting scheme (``"eco"``, ``"eco_wd"``).
        lr_schedule: ``t -> lr`` (or a list, one per param group): the rates the group's
            ``lr`` follows, read by the schedule guard only (None: no guard).
        compile: run the element-wise math (the moment updates, and ``d`` and
            ``(lr/bc1) m/d``) through ``torch.compile`` (two graphs, dynamic shapes, no
            recompilation as ``n`` grows); the rounding steps stay eager. If compilation fails
            the optimizer warns once (RuntimeWarning) and runs eager. On the CPU (inductor's
            C++ backend) it is bit-identical with NumPy over 30 steps of three 64 x 96 tensors
            (inductor builds its C++ with ``-ffp-contract=off``, and no square-root mismatch
            shows; ``tests/test_torch_optim.py``, marked slow), and on 4.2M parameters stored
            as FP8 a step is about 5-10% faster after a first step that compiles. Off by default:
            other backends (Triton on CUDA) may contract ``a*b + c`` into a fused multiply-add,
            which rounds once where NumPy rounds twice, so bit-identity is not guaranteed
            there.

    Constructed like ``ECOAdamW(model.named_parameters(), lr, betas=(0.9, 0.999), eps=1e-8,
    weight_decay=0.0, scheme="eco", weights=Quantizer("e4m3", "sr", granularity="row"),
    key=0)``; with weights stored by :func:`~ecosim.torch.store_weights`, ``weights=`` may
    be omitted (the other parameters then stay in full precision).
    """

    _twin = "adamw"

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *,
                 scheme="eco", weights=None, key=0, states=None, wd_corrected_injection=False,
                 compile=False, diagnostics=False, schedule_guard=False, lr_schedule=None):
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"betas must be a pair (b1, b2), got {betas!r}")
        # the NumPy optimizers' checks (ecosim.optim.policies, ecosim.core.checks)
        b1, b2 = (float(b) if isinstance(b, torch.Tensor) and b.numel() == 1 else b
                  for b in betas)  # torch.optim takes one-element tensors too
        b1 = check_beta(b1, "betas[0]", scheme)
        b2 = check_beta(b2, "betas[1]", "fp")
        eps = check_positive(eps, "eps")
        weight_decay = check_positive(weight_decay, "weight_decay", allow_zero=True)
        self.wd_corrected_injection = check_bool(wd_corrected_injection,
                                                 "wd_corrected_injection")
        self.schedule_guard = check_bool(schedule_guard, "schedule_guard")
        self.lr_schedule = _check_schedule(lr_schedule)
        if self.schedule_guard and self._scheme_record_of(scheme).after != "inject":
            raise ValueError(f"schedule_guard sizes ECO's memory-free injection: it needs an "
                             f"injecting scheme ('eco', 'eco_wd'), got scheme={scheme!r}")
        if self.schedule_guard and self.lr_schedule is None:
            raise ValueError("schedule_guard needs the later learning rates: pass "
                             "lr_schedule=(t -> lr), the rates group['lr'] will follow")
        self._guard: dict = {}  # id(param group) -> L(t), the guard's rate of this step
        self._math = _AdamMath(check_bool(compile, "compile"))
        super().__init__(params, dict(lr=lr, betas=(b1, b2), eps=float(eps),
                                      weight_decay=float(weight_decay)), scheme, weights, key,
                         states, diagnostics)

    def _scheme_record(self):
        """The scheme's record; ``wd_corrected_injection`` makes an injection decay-corrected."""
        return self._scheme_record_of(self.scheme)

    def _scheme_record_of(self, scheme):
        sch = get_scheme(scheme)
        if self.wd_corrected_injection and sch.after == "inject":
            return dataclasses.replace(sch, decay_corrected=True)
        return sch

    def _init_param(self, group, name, p):
        super()._init_param(group, name, p)
        if self._meta[name].sch.exact == "momentum":  # no offset in m yet (NumPy's pending)
            self.state[p]["pending"] = True

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter (see the class docstring). With ``schedule_guard``,
        every group's ``lr`` is checked against ``lr_schedule(t)`` first (ValueError, nothing
        written, on a mismatch) and its ``L(t)`` computed once."""
        if self.schedule_guard:
            self._guard = {id(g): self._guard_rate(i, g) for i, g in enumerate(self.param_groups)}
        return super().step(closure)

    def _guard_rate(self, i, group):
        t, lr = self.t, group["lr"]
        sched = self._schedule_of(i)
        want = _rate(sched, t)
        if want != lr:
            raise ValueError(f"schedule_guard: param group {i} has lr {lr!r} at step {t}, "
                             f"but lr_schedule({t}) = {want!r}; pass the schedule it follows")
        return schedule_guard_lr(lr, lambda s: _rate(sched, s), t, group["betas"][0])

    def _schedule_of(self, i):
        sched = self.lr_schedule
        if not isinstance(sched, (list, tuple)):
            return sched
        if len(sched) != len(self.param_groups):
            raise ValueError(f"lr_schedule has {len(sched)} schedules for "
                             f"{len(self.param_groups)} param groups: one per group expected")
        return sched[i]

    def _skipped(self, st):
        """A step without this parameter's gradient: its bias correction counts its own
        updates, ``n = t + 1 - st["skipped"]`` (``torch.optim.AdamW``'s per-parameter step)."""
        st["skipped"] = st.get("skipped", 0) + 1

    def _init_state(self, st, group, meta, full, w):
        self._zeros(st, "m", full)
        self._zeros(st, "v", full)
        self._init_scheme_state(st, group, meta, full, w)

    def _step_param(self, meta, p, w, g, st, group, t):
        (b1, b2), lr, eps, wd = group["betas"], group["lr"], group["eps"], group["weight_decay"]
        name, key = meta.name, self._key(group, meta)
        n = t + 1 - st.get("skipped", 0)
        bc1, bc2 = 1.0 - b1**n, 1.0 - b2**n
        m, v = self._load(st, "m", w), self._load(st, "v", w)
        self._math.moments(m, v, g, b1, b2)
        m = self._keep(st, "m", m, key, t, name, "m")
        v = self._keep(st, "v", v, key, t, name, "v")
        if lr == 0.0:  # no write: no rounding, no error, nothing to inject
            return
        d, tt = self._math.direction(m, v, bc1, bc2, eps, lr)
        base = self._base(meta, st, w)
        decay = 1.0 - lr * wd
        if wd:
            base = base * decay
        torch.sub(base, tt, out=tt)  # theta_tilde = base (1 - lr wd) - (lr/bc1) m / d
        e = self._write_param(meta, p, st, w, tt, d, m, key, t, (bc1 / lr) * decay, b1)
        lr_inj = self._guard[id(group)] if self.schedule_guard else lr
        if e is not None and lr_inj != 0.0:  # else no later step writes: none given back
            k = injection(e, meta.sch.coefficient(bc1 / lr_inj, b1, decay), d)
            self._inject(st, m, k, key, t, name)

    def _write_param(self, meta, p, st, w, tt, d, m, key, t, rate, b1):
        """The scheme's write of ``tt`` (:meth:`_write_weights`); ``eco_momentum_exact``'s
        offset ``rate d (e_prev - e / b1)``, ``rate = (bc1 / lr)(1 - lr wd)``, in NumPy's
        order. Returns the error ECO's injection is to move into ``m`` (None: none)."""
        e_prev, pending = st.get("e_prev"), st.get("pending", False)  # the write replaces e_prev
        e = self._write_weights(meta, p, st, w, tt, key, t)
        if pending:
            st["pending"] = False
        if e is None or not meta.sch.exact:
            return e
        k = e * (-1.0 / b1)
        if not pending:
            k += e_prev
        k *= d * rate
        self._inject(st, m, k, key, t, meta.name)
        return None

    def _step_group(self, group, items, t):
        """The step of ``group``'s parameters, batched in runs of at most ``_BATCH`` elements
        when the moments are float tensors (no ``states`` format) and the math is eager:
        the moment updates as ``torch._foreach`` calls, ``d`` and ``(lr/bc1) m/d`` on the
        run's ``m`` and ``v`` concatenated, ECO's injection as ``torch._foreach`` calls after
        the run's weight writes. Every element sees the operations of :meth:`_step_param` in
        the same order (element-wise, so the same bits); only the per-call overhead goes."""
        if (self._math.compiled is not None or self.states.get("m") is not None
                or self.states.get("v") is not None):
            return super()._step_group(group, items, t)
        run, size = [], 0
        for name, p, g in items:
            meta = self._meta[name]
            w, g = self._inputs(group, meta, p, g, t)
            st = self.state[p]
            if run and (size + w.numel() > _BATCH or (w.dtype, w.device) != run[0][2:4]
                        or st.get("skipped", 0) != run[0][6].get("skipped", 0)):
                self._step_run(run, group, t)
                run, size = [], 0
            run.append((meta, p, w.dtype, w.device, w, g, st))
            size += w.numel()
        if run:
            self._step_run(run, group, t)

    def _step_run(self, run, group, t):
        """:meth:`_step_param` of several parameters of one dtype, device and count of
        updates at once."""
        (b1, b2), lr, eps, wd = group["betas"], group["lr"], group["eps"], group["weight_decay"]
        n = t + 1 - run[0][6].get("skipped", 0)
        bc1, bc2 = 1.0 - b1**n, 1.0 - b2**n
        sts = [r[6] for r in run]
        ms, vs = [st["m"] for st in sts], [st["v"] for st in sts]
        _moments_foreach(ms, vs, [r[5] for r in run], b1, b2)  # stored in place (no format)
        if lr == 0.0:  # no write: no rounding, no error, nothing to inject
            return
        d, tt = self._math.direction(_cat(ms), _cat(vs), bc1, bc2, eps, lr)
        ds, tts = _split(d, ms), _split(tt, ms)
        bases = [self._base(r[0], r[6], r[4]) for r in run]
        decay = 1.0 - lr * wd
        if wd:
            bases = torch._foreach_mul(bases, decay)
        tts = torch._foreach_sub(bases, tts)  # base (1 - lr wd) - (lr/bc1) m / d, fresh
        lr_inj = self._guard[id(group)] if self.schedule_guard else lr
        es, ks, into, coef = [], [], [], None
        for (meta, p, _, _, w, _, st), tt, dk, m in zip(run, tts, ds, ms):
            e = self._write_param(meta, p, st, w, tt, dk, m, self._key(group, meta), t,
                                  (bc1 / lr) * decay, b1)
            if e is not None and lr_inj != 0.0:  # injected below, all at once
                coef = meta.sch.coefficient(bc1 / lr_inj, b1, decay)
                es.append(e), ks.append(dk), into.append(m)
        if ks:  # injection(e, coef, d) = (d * coef) * e, then m += k (m has no format)
            torch._foreach_mul_(ks, coef)
            torch._foreach_mul_(ks, es)
            torch._foreach_add_(into, ks)


#: the most elements of one run of :meth:`ECOAdamW._step_run`: its temporaries (the concatenated
#: ``m``, ``v``, ``d``, ``theta_tilde``) stay small, never a large model's copy at once
_BATCH = 1 << 18


def _cat(xs):
    return torch.cat([x.reshape(-1) for x in xs])


def _split(flat, likes):
    """Views of ``flat`` shaped as ``likes``, in order."""
    return [x.view(like.shape) for x, like in zip(flat.split([y.numel() for y in likes]),
                                                   likes)]


def _moments_foreach(ms, vs, gs, b1, b2):
    """:func:`_moments` of lists of tensors: the same operations, one call per operation."""
    torch._foreach_mul_(ms, b1)
    torch._foreach_add_(ms, torch._foreach_mul(gs, 1.0 - b1))
    torch._foreach_mul_(vs, b2)
    gg = torch._foreach_mul(gs, gs)
    torch._foreach_mul_(gg, 1.0 - b2)
    torch._foreach_add_(vs, gg)


def _check_schedule(sched):
    """``lr_schedule``: None, a callable, or a non-empty list/tuple of callables."""
    if sched is None or callable(sched):
        return sched
    if isinstance(sched, (list, tuple)) and sched and all(callable(f) for f in sched):
        return list(sched)
    raise TypeError(f"lr_schedule must be a callable t -> lr or a list of them (one per param "
                    f"group), got {type(sched).__name__}")


def _rate(sched, t):
    """``sched(t)`` as a float, finite and >= 0 (NumPy's ``lr_at`` check)."""
    raw = sched(t)
    try:
        value = float(raw)
    except TypeError:
        raise TypeError(f"lr_schedule returned {raw!r} at step {t}, not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"lr_schedule({t}) = {value!r}; it must be finite and >= 0")
    return value


class _AdamMath:
    """AdamW's element-wise math, eager (NumPy's operation order) or through ``torch.compile``.

    ``moments`` updates ``m`` and ``v`` in place; ``direction`` returns ``d = sqrt(v/bc2) + eps``
    and ``(lr/bc1) m / d`` as new tensors.
    """

    _warned = False

    def __init__(self, compile: bool):
        self.compiled = None
        if compile:
            try:
                self.compiled = (torch.compile(_moments, dynamic=True),
                                 torch.compile(_direction_c, dynamic=True))
            except Exception as err:  # noqa: BLE001 - any failure means eager
                self._fail(err)

    def _fail(self, err):
        self.compiled = None
        if not _AdamMath._warned:
            _AdamMath._warned = True
            warnings.warn(f"ECOAdamW(compile=True): torch.compile failed ({type(err).__name__}: "
                          f"{err}); running eager", RuntimeWarning, stacklevel=4)

    def moments(self, m, v, g, b1, b2):
        if self.compiled is not None:
            try:
                self.compiled[0](m, v, g, b1, b2)
                return
            except Exception as err:  # noqa: BLE001
                self._fail(err)
        _moments(m, v, g, b1, b2)

    def direction(self, m, v, bc1, bc2, eps, lr):
        if self.compiled is not None:
            try:
                return self.compiled[1](m, v, bc1, bc2, eps, lr)
            except Exception as err:  # noqa: BLE001
                self._fail(err)
        d = sqrt_rounded(div(v, bc2))  # a true division on every device (see div)
        d += eps
        tt = m / d
        tt *= lr / bc1  # (lr / (1 - b1^n)) * m / d
        return d, tt


def _moments(m, v, g, b1, b2):
    """``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2`` in place, NumPy's roundings."""
    m.mul_(b1)
    m += (1.0 - b1) * g
    v.mul_(b2)
    v += (g * g) * (1.0 - b2)


def _direction_c(m, v, bc1, bc2, eps, lr):
    d = torch.sqrt(v / bc2) + eps
    return d, (m / d) * (lr / bc1)
