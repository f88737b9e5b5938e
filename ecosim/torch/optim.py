"""ECO optimizers as ``torch.optim.Optimizer`` subclasses, mirroring :mod:`ecosim.optim`.

:class:`ECOSGD` mirrors :func:`ecosim.optim.sgdm` (EMA momentum; schemes ``"master"``,
``"naive"``, ``"eco"``, ``"eco_exact"``) and :class:`ECOAdamW` mirrors
:func:`ecosim.optim.adamw` (schemes ``"master"``, ``"naive"``, ``"eco"``). The update rules,
the order of the float operations and the SR keys are the NumPy reference's (see the module
docstrings of :mod:`ecosim.optim.sgdm` and :mod:`ecosim.optim.adamw`), so on the CPU, in
float32, the stored weights and the states equal the NumPy optimizer's bit for bit:

* the constructor writes ``q(p)`` into every parameter (SR key ``fold_in(key, "init", name)``);
* step ``t`` (a global counter, as NumPy's ``state.step``) writes ``q(theta_tilde)`` with SR key
  ``fold_in(key, t, name)``; ``name`` comes from ``model.named_parameters()`` pairs, or is
  ``"0", "1", ...`` (running over all groups) for plain parameters;
* scalars are Python floats applied to the tensors exactly where NumPy applies them;
* AdamW's square root of a float32 ``v`` is taken in float64 and rounded back (torch's
  vectorized CPU ``sqrt`` is not correctly rounded: measured off by one ulp on ~0.7% of float32
  and float64 inputs with torch 2.13 AVX512). float64 parameters therefore follow NumPy within
  an ulp of ``d`` in AdamW, not bit for bit; SGD is bit-exact in both dtypes.

The parameter tensor holds the dequantized stored weights (what the forward pass uses);
:meth:`encoded` returns them as real low-precision codes (:class:`ecosim.torch.Encoded`) with the
scales of the write. Learning rates are read from ``group["lr"]`` at every step, so torch LR
schedulers work. ``eco_exact`` needs ``lr(t+1)`` at step ``t``: it is ``group["next_lr"]`` when
set, else ``group["lr"]`` (a constant learning rate).

Not mirrored (yet): Nesterov/heavy-ball momentum, low-precision states (``states=``), Kahan,
``fp``, per-parameter quantizer dicts, and zero learning rates for ``eco_exact`` (refused).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from .. import rng
from .quantizer import Encoded, Quantizer

__all__ = ["ECOSGD", "ECOAdamW"]


def _named(params):
    """Param groups with a ``names`` entry, from tensors, (name, tensor) pairs or dicts."""
    params = list(params)
    if not params:
        raise ValueError("optimizer got an empty parameter list")
    groups = params if isinstance(params[0], dict) else [{"params": params}]
    out, counter = [], 0
    for g in groups:
        g = dict(g)
        ps = list(g["params"]) if not isinstance(g["params"], torch.Tensor) else [g["params"]]
        names, tensors = [], []
        for p in ps:
            if isinstance(p, tuple):
                names.append(str(p[0]))
                tensors.append(p[1])
            else:
                names.append(str(counter))
                tensors.append(p)
            counter += 1
        g["params"], g["names"] = tensors, names
        out.append(g)
    seen = [n for g in out for n in g["names"]]
    if len(set(seen)) != len(seen):
        raise ValueError("parameter names must be unique")
    return out


def _check_lr(lr, scheme):
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
        raise ValueError(f"lr must be a finite number >= 0, got {lr!r}")
    if scheme in ("eco", "eco_exact") and lr <= 0:
        raise ValueError(f"scheme {scheme!r} needs lr > 0 (its injection divides by lr), "
                         f"got {lr!r}")


def _sqrt(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded square root (NumPy's). torch's vectorized float32 ``sqrt`` on CPUs
    (measured on an AVX512 build of torch 2.13) is off by one ulp on ~0.7% of inputs; the
    float64 root of a float32 value rounded back to float32 is correctly rounded (53 >= 2*24+2
    bits, so the double rounding is innocuous). float64 inputs use torch's own root."""
    if x.dtype == torch.float32:
        return x.to(torch.float64).sqrt_().to(torch.float32)
    return x.sqrt()


class _ECOBase(torch.optim.Optimizer):
    _schemes: tuple = ()

    def __init__(self, params, defaults, scheme, weights, key):
        if scheme not in self._schemes:
            raise ValueError(f"scheme must be one of {self._schemes}, got {scheme!r}")
        if weights is None:
            raise ValueError(f"scheme {scheme!r} needs a weights Quantizer")
        if not isinstance(weights, Quantizer):
            raise TypeError("weights must be an ecosim.torch.Quantizer")
        _check_lr(defaults["lr"], scheme)
        self.scheme, self.weights = scheme, weights
        defaults = dict(defaults, key=rng.as_key(key))
        super().__init__(_named(params), defaults)
        for group in self.param_groups:
            _check_lr(group["lr"], scheme)
        self._step_count_t = 0
        with torch.no_grad():
            for group in self.param_groups:
                for name, p in zip(group["names"], group["params"]):
                    if p.dtype not in (torch.float32, torch.float64):
                        raise TypeError(f"parameter {name!r} must be float32 or float64")
                    if not bool(torch.isfinite(p).all()):
                        raise ValueError(f"parameter {name!r} has non-finite values")
                    full = p.detach().clone()
                    w = self._write(full, group["key"], name, "init")
                    p.copy_(w)
                    self._init_state(self.state[p], group, name, full, w)

    # -- shared pieces -------------------------------------------------------------------------
    def _write(self, x, key, name, t):
        """``q(x)`` with SR key ``fold_in(key, t, name)``."""
        q = self.weights
        k = rng.fold_in(key, t, name) if q.mode == "sr" else None
        return q(x, key=k)

    def _scales_after(self, p, state):
        state["w_scales"] = self.weights.scales(p)  # absmax of the stored values (see encoded)

    @property
    def t(self) -> int:
        """Index of the next update (NumPy's ``state.step``)."""
        return self._step_count_t

    def encoded(self, p) -> Encoded:
        """The stored weights of parameter ``p`` (a tensor or its name) as low-precision codes.

        The codes are the RTN encoding of the stored values with scales recomputed from those
        values after each write (``state["w_scales"]``), not the scales the write itself used;
        the test checks that ``decode(encoded(p)) == p`` for row-wise E4M3.
        """
        if isinstance(p, str):
            p = next(q for g in self.param_groups for n, q in zip(g["names"], g["params"])
                     if n == p)
        rtn = dataclasses.replace(self.weights, mode="rtn")
        return rtn.encode(p.detach(), scales=self.state[p].get("w_scales"))

    def state_dict(self):
        sd = super().state_dict()
        sd["ecosim_t"] = self._step_count_t
        return sd

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        t = state_dict.pop("ecosim_t", None)
        super().load_state_dict(state_dict)
        if t is not None:
            self._step_count_t = int(t)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        t = self._step_count_t
        for group in self.param_groups:
            lr = group["lr"]
            _check_lr(lr, "fp")
            if lr == 0.0 and self.scheme == "eco_exact":
                raise ValueError("eco_exact with a zero learning rate is not supported here")
            for name, p in zip(group["names"], group["params"]):
                if p.grad is None:
                    raise ValueError(f"parameter {name!r} has no gradient")
                g = p.grad.detach().to(p.dtype)
                if not bool(torch.isfinite(g).all()):
                    raise ValueError(f"gradient of parameter {name!r} at step {t} has "
                                     "non-finite values")
                new_w = self._step_param(name, p.detach(), g, self.state[p], group, t)
                if new_w is not None:
                    p.copy_(new_w)
                    self._scales_after(p, self.state[p])
        self._step_count_t = t + 1
        return loss


class ECOSGD(_ECOBase):
    """SGD with EMA momentum over quantized weights (mirror of :func:`ecosim.optim.sgdm`).

    Step (``g`` the gradient at the stored weights plus ``weight_decay * w``)::

        m = beta * m + (1 - beta) * g
        theta_tilde = base - lr * m          # base: w; master: theta
        w = q(theta_tilde);  e = theta_tilde - w
        eco:       m += (1/lr)(1 - 1/beta) e
        eco_exact: m += e_prev * (beta/(beta lr)) - e * (1/(beta lr_next));  e_prev = e
        master:    theta = theta_tilde

    Args:
        params: tensors, ``named_parameters()`` pairs, or param-group dicts of either.
        lr: learning rate (> 0 for eco/eco_exact).
        momentum: ``beta`` in (0, 1) (eco/eco_exact), [0, 1) otherwise.
        weight_decay: coupled L2.
        scheme: ``"master"``, ``"naive"``, ``"eco"``, ``"eco_exact"``.
        weights: an :class:`ecosim.torch.Quantizer`.
        key: root key of the SR draws.
    """

    _schemes = ("master", "naive", "eco", "eco_exact")

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, *, scheme="eco",
                 weights=None, key=0):
        lo_ok = scheme not in ("eco", "eco_exact")
        if not (0.0 <= momentum < 1.0) or (not lo_ok and momentum == 0.0):
            raise ValueError(f"momentum must be in {'[0, 1)' if lo_ok else '(0, 1)'}, "
                             f"got {momentum!r}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        super().__init__(params, dict(lr=lr, momentum=float(momentum),
                                      weight_decay=float(weight_decay), next_lr=None),
                         scheme, weights, key)

    def _init_state(self, st, group, name, full, w):
        st["m"] = torch.zeros_like(full)
        if self.scheme == "master":
            st["master"] = full
        elif self.scheme == "eco_exact":
            e0 = full - w
            st["e_prev"] = e0
            st["m"] = e0 * (-1.0 / (group["momentum"] * group["lr"]))
        st["w_scales"] = self.weights.scales(w)

    def _step_param(self, name, w, g, st, group, t):
        beta, lr, wd = group["momentum"], group["lr"], group["weight_decay"]
        if wd:
            g = g + wd * w
        m = st["m"] * beta
        m += (1.0 - beta) * g
        st["m"] = m
        if lr == 0.0:
            return None
        base = st["master"] if self.scheme == "master" else w
        tt = m * (-lr)
        tt += base
        new_w = self._write(tt, group["key"], name, t)
        if self.scheme == "master":
            st["master"] = tt
            return new_w
        if self.scheme == "naive":
            return new_w
        e = tt.sub_(new_w)
        if self.scheme == "eco":
            e *= (1.0 / lr) * (1.0 - 1.0 / beta)
            st["m"] = m + e
        else:  # eco_exact (gain = beta)
            lr_next = group.get("next_lr") or lr
            m += st["e_prev"] * (beta / (beta * lr))
            m -= e * (1.0 / (beta * lr_next))
            st["m"] = m
            st["e_prev"] = e
        return new_w


class ECOAdamW(_ECOBase):
    """AdamW over quantized weights (mirror of :func:`ecosim.optim.adamw`).

    Step ``t`` (``n = t + 1``)::

        m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
        d = sqrt(v / (1 - b2^n)) + eps
        theta_tilde = base (1 - lr wd) - (lr / (1 - b1^n)) m / d     # base: w; master: theta
        w = q(theta_tilde);  e = theta_tilde - w
        eco:    m += ((1 - b1^n)/lr)(1 - 1/b1) d e
        master: theta = theta_tilde

    Constructed like ``ECOAdamW(model.named_parameters(), lr, betas=(0.9, 0.999), eps=1e-8,
    weight_decay=0.0, scheme="eco", weights=Quantizer("e4m3", "sr", granularity="row"),
    key=0)``.
    """

    _schemes = ("master", "naive", "eco")

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *,
                 scheme="eco", weights=None, key=0):
        b1, b2 = (float(b) for b in betas)
        if not (0.0 <= b1 < 1.0) or (scheme == "eco" and b1 == 0.0):
            raise ValueError(f"betas[0] out of range for scheme {scheme!r}: {b1!r}")
        if not (0.0 <= b2 < 1.0):
            raise ValueError(f"betas[1] must be in [0, 1), got {b2!r}")
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps!r}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        super().__init__(params, dict(lr=lr, betas=(b1, b2), eps=float(eps),
                                      weight_decay=float(weight_decay)), scheme, weights, key)

    def _init_state(self, st, group, name, full, w):
        st["m"] = torch.zeros_like(full)
        st["v"] = torch.zeros_like(full)
        if self.scheme == "master":
            st["master"] = full
        st["w_scales"] = self.weights.scales(w)

    def _step_param(self, name, w, g, st, group, t):
        (b1, b2), lr, eps, wd = group["betas"], group["lr"], group["eps"], group["weight_decay"]
        n = t + 1
        bc1, bc2 = 1.0 - b1**n, 1.0 - b2**n
        m = st["m"] * b1
        m += (1.0 - b1) * g
        v = g * g
        v *= 1.0 - b2
        v += b2 * st["v"]
        st["m"], st["v"] = m, v
        if lr == 0.0:
            return None
        d = _sqrt(v / bc2)
        d += eps
        tt = m / d
        tt *= lr / bc1
        base = st["master"] if self.scheme == "master" else w
        decay = 1.0 - lr * wd
        if wd:
            base = base * decay
        tt = torch.sub(base, tt)
        new_w = self._write(tt, group["key"], name, t)
        if self.scheme == "master":
            st["master"] = tt
            return new_w
        if self.scheme == "naive":
            return new_w
        e = tt.sub_(new_w)
        coef = (bc1 / lr) * (1.0 - 1.0 / b1)
        d *= coef
        d *= e
        st["m"] = m + d
        return new_w
