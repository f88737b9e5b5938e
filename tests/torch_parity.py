"""The NumPy-against-torch parity loops of the optimizer tests (imported as
``from torch_parity import ...`` after ``pytest.importorskip("torch")``): a random problem,
a model of bias-free linear layers holding it, and one step of both sides on one gradient."""
import numpy as np
import torch


def random_problem(shapes: dict, steps: int, seed: int):
    """``(P, G)``: float32 standard-normal weights of ``shapes`` and ``steps`` gradients of
    the same shapes, drawn in that order from ``default_rng(seed)``."""
    rs = np.random.default_rng(seed)
    P = {k: rs.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    G = [{k: rs.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
         for _ in range(steps)]
    return P, G


def linear_model(P: dict) -> torch.nn.Module:
    """A module whose bias-free ``nn.Linear`` children (``"a.weight"`` -> child ``a``) hold
    copies of ``P``'s ``(out, in)`` arrays."""
    model = torch.nn.Module()
    for k, w in P.items():
        lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
        setattr(model, k.split(".")[0], lin)
    return model


def step_both(no, w, s, opt, slots: dict, grads: dict):
    """One step of the NumPy optimizer ``no`` from ``(w, s)`` and of the torch optimizer
    ``opt`` on parameters ``slots`` (name -> parameter), both on ``grads``; the new ``(w, s)``."""
    w, s = no.step(w, grads, s)
    for k in grads:
        slots[k].grad = torch.from_numpy(grads[k].copy())
    opt.step()
    return w, s
