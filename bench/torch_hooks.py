#!/usr/bin/python3
"""One PyTorch training configuration under saved-tensor hooks, for
bench/torch_hooks.sh: the model of bench/pytorch_gpt.py (gpt-mini) or
bench/pytorch_step.py (resnet18), fp32 on CPU, with
  fp32            no hooks (PyTorch alone)
  pytorch-2bit    a 2-bit hook written in PyTorch ops, ActNN's scheme (per
                  sample, groups of 256 elements, fp32 minimum and scale,
                  stochastic rounding, four codes a byte): what a user
                  writes without a compression library
  actc:POLICY     actc.torch.compress(POLICY, model)
and prints one JSON line: tokens (samples) per second over the timed steps,
the saved context of one step (bytes the hooks keep, or the saved tensors'
bytes for fp32) and the peak RSS.

usage: /usr/bin/python3 bench/torch_hooks.py --model gpt-mini --batch 8
           --hook actc:actnn:L3 [--steps 5 --warmup 2 --threads 2]"""
import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(1, os.path.join(here, "..", "python"))
import pytorch_gpt  # noqa: E402
import pytorch_step  # noqa: E402

GROUP = 256


def pack_2bit(t):
    """ActNN's 2-bit per-group stochastic quantizer in PyTorch ops."""
    if not t.is_floating_point() or t.dim() < 2 or (t.is_leaf and t.requires_grad):
        return t  # parameters and statistics as they are
    shape, dtype = t.shape, t.dtype
    x = t.detach().float().reshape(shape[0], -1).contiguous()
    pad = (-x.shape[1]) % GROUP
    if pad:
        x = F.pad(x, (0, pad))
    g = x.view(shape[0], -1, GROUP)
    lo = g.amin(-1, keepdim=True)
    scale = 3.0 / (g.amax(-1, keepdim=True) - lo).clamp_min(1e-12)
    q = ((g - lo) * scale + torch.rand_like(g)).floor_().clamp_(0, 3).to(torch.uint8).view(-1, 4)
    packed = q[:, 0] | (q[:, 1] << 2) | (q[:, 2] << 4) | (q[:, 3] << 6)
    return (packed, lo, scale, shape, dtype, pad)


def unpack_2bit(p):
    if isinstance(p, torch.Tensor):
        return p
    packed, lo, scale, shape, dtype, pad = p
    q = torch.stack([(packed >> s) & 3 for s in (0, 2, 4, 6)], 1).view(lo.shape[0], -1, GROUP).float()
    x = (q / scale + lo).view(shape[0], -1)
    if pad:
        x = x[:, :-pad]
    return x.reshape(shape).to(dtype)


def packed_bytes(p):
    if isinstance(p, torch.Tensor):
        return p.numel() * p.element_size()
    return sum(t.numel() * t.element_size() for t in p[:3])


def make_model(name):
    if name == "resnet18":
        return pytorch_step.make("resnet18"), None
    family, layers, d, heads, context, vocab = pytorch_gpt.PRESETS[name]
    return pytorch_gpt.LM(family, layers, d, heads, context, vocab), vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt-mini")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--hook", default="fp32")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.warmup < 1 or a.steps < 1:
        ap.error("--warmup and --steps: at least 1 (the context is measured in the last warm-up step)")
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model, vocab = make_model(a.model)
    lm = vocab is not None
    if lm:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        seq = pytorch_gpt.PRESETS[a.model][4]
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
        seq = 1

    def batch():
        if lm:
            return torch.randint(0, min(vocab, 256), (a.batch, seq)), torch.randint(0, min(vocab, 256), (a.batch, seq))
        return torch.randn(a.batch, 1, 28, 28), torch.randint(0, 10, (a.batch,))

    def loss_of(x, y):
        out = model(x)
        return F.cross_entropy(out.view(-1, out.shape[-1]), y.view(-1))

    sizes = []
    if a.hook == "fp32":
        def hooks():
            return torch.autograd.graph.saved_tensors_hooks(lambda t: (sizes.append(packed_bytes(t)), t)[1],
                                                            lambda t: t)
        counting, c = True, None
    elif a.hook == "pytorch-2bit":
        def pack(t):
            p = pack_2bit(t)
            sizes.append(packed_bytes(p))
            return p

        def hooks():
            return torch.autograd.graph.saved_tensors_hooks(pack, unpack_2bit)
        counting, c = False, None
    elif a.hook.startswith("actc:"):
        import actc.torch
        c = actc.torch.compress(a.hook[5:], model, threads=a.threads)

        def hooks():
            return c
        counting = False
    else:
        raise SystemExit(f"unknown --hook {a.hook}: fp32, pytorch-2bit or actc:POLICY")

    elapsed, context = 0.0, 0
    for s in range(-a.warmup, a.steps):
        x, y = batch()
        opt.zero_grad(set_to_none=True)
        sizes.clear()
        measure_fp32 = counting and s == -1  # the fp32 context, in an untimed step
        t0 = time.perf_counter()
        if a.hook == "fp32" and not measure_fp32:
            loss = loss_of(x, y)
            loss.backward()
        else:
            with hooks():
                loss = loss_of(x, y)
                loss.backward()
        opt.step()
        if c is not None:
            c.step(lambda: loss_of(x, y))
        t1 = time.perf_counter()
        if s >= 0:
            elapsed += t1 - t0
        if s == -1:  # the last warm-up step: its saved context
            context = sum(sizes) if c is None else sum(v["stored"] for v in c.last_stats.values())
    units = a.batch * seq * a.steps
    r = {"model": a.model, "batch": a.batch, "hook": a.hook, "threads": a.threads,
         ("tokens_per_s" if lm else "samples_per_s"): round(units / elapsed, 1),
         "step_ms": round(1000 * elapsed / a.steps, 1), "context_mib": round(context / 2**20, 2),
         "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
         "torch": torch.__version__, "loss": round(loss.item(), 4)}
    print(json.dumps(r))


if __name__ == "__main__":
    main()
