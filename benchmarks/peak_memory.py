"""What a training step holds at its peak, plain FP32 AdamW against stored FP8 weights + ECO.

Static bytes per parameter (the README's 12 -> 9) count the weights and optimizer states at
rest. A step also holds the gradients and what autograd saves for backward. For each model
(small configurations of the architectures people train: a GPT-2 built from transformers'
``GPT2Config``, whose layers are ``Conv1D``; a Llama from ``LlamaConfig``, ``nn.Linear``; a
ViT-style block with ``nn.MultiheadAttention``; a small convolutional net) and each setup, one
training step on one batch is measured with saved-tensor hooks:

* ``rest``: weights and optimizer states (``ecosim.torch.measured_memory``);
* ``grads``: the ``.grad`` tensors after backward (a stored layer's gradient is a float32
  tensor of the weight's shape: the ECO optimizers read it whole);
* ``saved``: every distinct storage autograd saved for backward that is not a parameter or
  a buffer (the plain model's layers save their weight parameters, a stored ``nn.Linear``
  its codes and scales: held at rest already, they cost nothing more).
  The activations are the same in both setups, so ``saved`` of the stored model minus the
  plain model's is what storing costs at the peak: every stored layer type saves its codes
  and decodes them again in backward (``ecosim.torch.layer_ops``), so a full-precision copy
  of a stored weight would show here as 4 bytes per stored weight.

``peak`` is ``rest + grads + saved``: the bytes alive when backward starts (the CPU allocator
is not traced; on a GPU, ``torch.cuda.max_memory_allocated`` gives the same up to
workspace). Rows print bytes per parameter of the model and the ratio of ECO's peak to FP32
AdamW's.

Run: ``python benchmarks/peak_memory.py`` (needs transformers for the GPT-2 and Llama rows).
"""
from __future__ import annotations

import argparse
import sys

import torch

import ecosim.torch as et
from meta import write  # benchmarks/meta.py, next to this script


def _models(batch: int):
    """(name, model, batch input, loss function) for each architecture that can be built."""
    out = []
    try:
        import transformers
        transformers.logging.set_verbosity_error()
        g = transformers.GPT2Config(vocab_size=256, n_positions=64, n_embd=128, n_layer=2,
                                    n_head=4)
        ids = torch.randint(0, 256, (batch, 64))
        out.append(("GPT-2 (Conv1D), d=128, 2 layers", transformers.GPT2LMHeadModel(g), ids,
                    lambda m, x: m(input_ids=x, labels=x).loss))
        ll = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=344,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      max_position_embeddings=64)
        out.append(("Llama (nn.Linear), d=128, 2 layers", transformers.LlamaForCausalLM(ll),
                    ids, lambda m, x: m(input_ids=x, labels=x).loss))
    except ImportError:
        print("transformers is not installed: GPT-2 and Llama rows left out", file=sys.stderr)

    class Block(torch.nn.Module):
        def __init__(self, d=128, h=4):
            super().__init__()
            self.norm = torch.nn.LayerNorm(d)
            self.attn = torch.nn.MultiheadAttention(d, h, batch_first=True)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                           torch.nn.Linear(4 * d, d))

        def forward(self, x):
            y = self.norm(x)
            x = x + self.attn(y, y, y, need_weights=False)[0]
            return x + self.mlp(self.norm(x))

    out.append(("ViT block (nn.MultiheadAttention), d=128", Block(),
                torch.randn(batch, 64, 128), lambda m, x: m(x).square().mean()))
    conv = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(64, 10))
    out.append(("ConvNet (nn.Conv2d), 3 convs", conv, torch.randn(batch, 3, 32, 32),
                lambda m, x: m(x).square().mean()))
    return out


def _step(model, x, loss_fn, opt):
    """One step; the bytes of its gradients and of what autograd saved, by kind."""
    held = [*model.parameters(), *model.buffers()]  # counted at rest already
    params = {t.untyped_storage().data_ptr() for t in held}
    seen, saved = set(), {"saved": 0}

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in seen and ptr not in params:
            seen.add(ptr)
            saved["saved"] += st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model, x)
    loss.backward()
    grads = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)
    opt.step()
    opt.zero_grad(set_to_none=False)  # the first step builds the states: measure after it
    return grads, saved


def measure(batch: int = 8) -> list[dict]:
    rows = []
    torch.manual_seed(0)
    for name, model, x, loss_fn in _models(batch):
        n = sum(p.numel() for p in model.parameters())
        for setup in ("FP32 AdamW", "FP8 weights (E4M3, row scales) + ECO AdamW"):
            torch.manual_seed(0)
            m = __import__("copy").deepcopy(model)
            if setup.startswith("FP32"):
                opt = torch.optim.AdamW(m.parameters(), 1e-3)
            else:
                rep = et.quantize_model(m, et.Quantizer("e4m3", "sr", granularity="row"),
                                        key=0)
                opt = et.ECOAdamW(rep.param_groups(), 1e-3, scheme="eco", key=0)
            _step(m, x, loss_fn, opt)  # builds the optimizer states
            grads, saved = _step(m, x, loss_fn, opt)
            rest = et.measured_memory(m, opt if not setup.startswith("FP32") else None)
            rest_b = rest.total if not setup.startswith("FP32") else (
                sum(p.nbytes for p in m.parameters())
                + sum(t.nbytes for s in opt.state.values() for t in s.values()
                      if isinstance(t, torch.Tensor) and t.dim() > 0))
            rows.append({"model": name, "setup": setup, "n": n, "rest": rest_b, "grads": grads,
                         "batch": batch, **saved})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| model | batch | setup | rest | grads | saved | saved - FP32's | peak | "
             "peak / FP32's |", "|---|---|---|---|---|---|---|---|---|"]
    base = {}
    for r in rows:
        peak = r["rest"] + r["grads"] + r["saved"]
        n = r["n"]
        b = base.setdefault((r["model"], r["batch"]), (peak, r["saved"]))
        lines.append(f"| {r['model']} | {r['batch']} | {r['setup']} | {r['rest'] / n:.2f} | "
                     f"{r['grads'] / n:.2f} | {r['saved'] / n:.2f} | "
                     f"{(r['saved'] - b[1]) / n:+.2f} | {peak / n:.2f} | {peak / b[0]:.3f} |")
    return ("Bytes per model parameter held in one training step, see "
            "benchmarks/peak_memory.py's docstring:\n\n" + "\n".join(lines))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = [r for b in args.batch for r in measure(b)]
    md = markdown(rows)
    print(md)
    write("peak_memory", md, argv=sys.argv, extra={"rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
