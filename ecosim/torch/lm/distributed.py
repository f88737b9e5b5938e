"""Processes and shards: the process group ``torchrun`` describes, FSDP2 sharding, whole-tensor
state dicts, and a gradient-norm clip that sharding cannot change.

Part of :mod:`ecosim.torch.lm` (whose docstring says what these promise: DDP and FSDP2
layouts that give bit-identical trajectories, and checkpoints that resume across them).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..dtensor import is_dtensor, local_tensor
from ..model import Transformer

__all__ = ["Env", "barrier", "clip_grad_norm", "fully_shard_model", "gather_full",
           "gather_tensor", "load_full_model", "setup", "shard_adamw_state"]


@dataclass
class Env:
    """This process: its rank among ``world`` processes, its device, and whether it created
    the process group (and so destroys it in :meth:`close`)."""

    rank: int
    world: int
    device: torch.device
    owns_group: bool

    def close(self):
        """Destroy the process group if this run created it."""
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()


def _deterministic_cuda() -> None:
    """What the exactness promises (resume, DDP/FSDP layouts) need on CUDA: cuBLAS with a
    fixed workspace (``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless already set; read when cuBLAS
    starts, so before the first matrix product) and ``torch.use_deterministic_algorithms``.
    ``warn_only=True``: an operation without a deterministic CUDA kernel warns (that run's
    bit-exactness is then not promised) instead of ending the run. Not checked on a GPU yet."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)


def setup(device: str, fsdp: bool = False) -> Env:
    """Join the process group ``torchrun`` describes (if any) and pick this rank's device.

    FSDP needs a process group even for one process: a private single-process one then."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    owns = False
    cuda = device.startswith("cuda")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device(device)
    if cuda and dev.index is None:
        dev = torch.device("cuda", local)
    if cuda:
        _deterministic_cuda()
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
        owns = True
    elif fsdp and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0,
                                world_size=1)
        owns = True
    if dist.is_initialized():
        return Env(dist.get_rank(), dist.get_world_size(), dev, owns)
    return Env(0, 1, dev, owns)


def gather_tensor(t: torch.Tensor, env: Env) -> torch.Tensor:
    """``t`` of every rank stacked along a new first axis (rank order)."""
    if env.world == 1:
        return t[None]
    out = [torch.empty_like(t) for _ in range(env.world)]
    dist.all_gather(out, t.contiguous())
    return torch.stack(out)


def barrier(env: Env):
    """Wait for every process (nothing to wait for alone)."""
    if env.world > 1:
        dist.barrier()


def fully_shard_model(model: Transformer, env: Env) -> None:
    """FSDP2: every block, then the root (embedding, final norm, head), on a 1-D mesh of all
    processes. Every process built the same initial weights, so each keeps its own rows."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh(env.device.type, (env.world,))
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _rows(t, whole: torch.Tensor) -> torch.Tensor:
    """The rows of the whole tensor ``whole`` that the DTensor ``t`` holds here (torch.chunk's
    split on dim 0, as ``Shard(0)``)."""
    mesh = t.device_mesh
    chunk = -(-whole.shape[0] // mesh.size())
    start = min(mesh.get_local_rank() * chunk, whole.shape[0])
    return whole[start:start + t.to_local().shape[0]]


def gather_full(x):
    """``x`` (a state dict, nested) with every DTensor gathered into a whole tensor. A
    collective: every process calls it, in the same order."""
    if is_dtensor(x):
        return x.full_tensor()
    if isinstance(x, dict):
        return {k: gather_full(v) for k, v in x.items()}
    if isinstance(x, list):
        return [gather_full(v) for v in x]
    return x


@torch.no_grad()
def load_full_model(model: torch.nn.Module, sd: dict) -> None:
    """Load whole tensors into a (possibly FSDP-sharded) model: each process its rows."""
    own = dict(model.named_parameters())
    own.update(model.named_buffers())
    if set(own) != set(sd):
        raise ValueError(f"checkpoint model keys differ: missing {sorted(set(own) - set(sd))}, "
                         f"unexpected {sorted(set(sd) - set(own))}")
    for k, t in own.items():
        src = sd[k].to(device=t.device, dtype=t.dtype)
        if is_dtensor(t):
            t.to_local().copy_(_rows(t, src))
        else:
            t.copy_(src)


def shard_adamw_state(sd: dict, opt: torch.optim.Optimizer) -> dict:
    """A torch optimizer's state dict of whole tensors, with the states of DTensor parameters
    made DTensors holding this process's rows (``Optimizer.load_state_dict`` would keep them
    whole, and the step would mix DTensors and tensors)."""
    from torch.distributed.tensor import DTensor
    params = [p for g in opt.param_groups for p in g["params"]]
    state = {}
    for i, st in sd["state"].items():
        p = params[i]
        state[i] = {k: DTensor.from_local(_rows(p, v.to(p.device)).clone(), p.device_mesh,
                                          p.placements, run_check=False, shape=p.shape,
                                          stride=p.stride())
                    if (is_dtensor(p) and torch.is_tensor(v) and not is_dtensor(v)
                        and tuple(v.shape) == tuple(p.shape)) else v
                    for k, v in st.items()}
    return dict(sd, state=state)


def clip_grad_norm(params, max_norm: float, env: Env) -> float:
    """Clip the gradients to global norm ``max_norm`` (``inf``: only measure it); return the
    norm. The norm does not depend on how parameters are sharded on dim 0: per-row sums of
    squares in float64 (whole rows, so the same reduction wherever a row lives), gathered into
    the global row order, summed per parameter (vectors of the same length), and the
    parameters' sums added with ``math.fsum``; the coefficient ``max_norm / (norm + 1e-6)``
    (as ``clip_grad_norm_``), when below 1, multiplies every gradient in its own dtype."""
    grads = [p.grad for p in params if p.grad is not None]
    sums, sharded = [], []
    for g in grads:
        loc = local_tensor(g).detach()
        s = loc.reshape(loc.shape[0] if loc.ndim else 1, -1).to(torch.float64).square().sum(1)
        if is_dtensor(g):
            n0 = g.shape[0]
            chunk = -(-n0 // g.device_mesh.size())
            sharded.append((len(sums), n0, chunk))
            s = torch.cat([s, s.new_zeros(chunk - s.numel())])  # padded to equal sizes
        sums.append(s)
    if sharded:
        idx = [i for i, *_ in sharded]
        flat = torch.cat([sums[i] for i in idx])
        allr = gather_tensor(flat, env)  # (world, sum of chunks), rank order = row order
        pos = 0
        for i, n0, chunk in sharded:
            sums[i] = allr[:, pos:pos + chunk].reshape(-1)[:n0]
            pos += chunk
    # One host sync for all parameters (the same float64 sums as one .item() each).
    total = math.fsum(torch.stack([s.sum() for s in sums]).tolist()) if sums else 0.0
    norm = math.sqrt(total)
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for g in grads:
            loc = local_tensor(g)
            loc.mul_(torch.full((), coef, dtype=loc.dtype, device=loc.device))
    return norm


