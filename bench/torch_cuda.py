#!/usr/bin/env python3
"""actc's CUDA codecs behind PyTorch's saved-tensor hooks on one GPU
(issue 38; tests/gpu/run.sh runs it): GPT-2 124M (12 x 768, 12 heads,
context 1024, vocabulary 50,257, scaled_dot_product_attention) at batch 8
and a ResNet-50-like CNN (bottlenecks 3-4-6-3, 224 x 224) at batch 64,
bf16 autocast, AdamW, under
  none            no hooks (PyTorch alone)
  pytorch-2bit    a 2-bit hook in PyTorch ops, ActNN's scheme
                  (bench/torch_hooks.py's pack_2bit)
  actc:POLICY     actc.torch.compress(POLICY, model): actnn:L3, gact:4,
                  division, nf4
  actc-wait:actnn:L3  the same with overlap=False: each save planned at
                  once, the host waiting for its ranges (one
                  synchronisation per save; the default queues them)
Per configuration: tokens (images) per second over the timed steps, the
step time against none's, torch.cuda.max_memory_allocated, and the saved
context of one step (what the hooks keep; for none, the saved tensors'
bytes).  A configuration that fails prints its error and the rest go on.
JSON lines, then a table.

usage: python3 bench/torch_cuda.py [--models gpt2,resnet50] [--steps 10]
           [--warmup 3] [--configs none,pytorch-2bit,actc:actnn:L3,...]
           [--device cuda] [--tiny]   (--tiny: small shapes, a smoke test)"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(1, os.path.join(here, "..", "python"))
from torch_hooks import pack_2bit, packed_bytes, unpack_2bit  # noqa: E402

CONFIGS = ["none", "pytorch-2bit", "actc:actnn:L3", "actc-wait:actnn:L3", "actc:gact:4", "actc:division", "actc:nf4"]


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.x
            a = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
            a = a.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = a.softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(d), Attention(d, heads), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, layers=12, d=768, heads=12, context=1024, vocab=50257):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.ln(x) @ self.tok.weight.t()  # tied head


class Bottleneck(nn.Module):
    def __init__(self, cin, mid, stride):
        super().__init__()
        cout = 4 * mid
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
            nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.body(x) + self.skip(x))


class ResNet50(nn.Module):
    def __init__(self, classes=1000, widths=(64, 128, 256, 512), depths=(3, 4, 6, 3)):
        super().__init__()
        layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for i, (w, n) in enumerate(zip(widths, depths)):
            for j in range(n):
                layers.append(Bottleneck(cin, w, 2 if j == 0 and i > 0 else 1))
                cin = 4 * w
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def run(model_name, config, a, dev):
    torch.manual_seed(1)
    if model_name == "gpt2":
        shape = dict(layers=2, d=64, heads=4, context=64, vocab=512) if a.tiny else {}
        model = GPT(**shape).to(dev)
        batch, seq, vocab = (2, 64, 512) if a.tiny else (8, 1024, 50257)
        data = [(torch.randint(0, vocab, (batch, seq), device=dev),) * 2 for _ in range(2)]
        units = batch * seq
    else:
        model = ResNet50(widths=(8, 16, 32, 64), depths=(1, 1, 1, 1)).to(dev) if a.tiny else ResNet50().to(dev)
        batch, side = (4, 64) if a.tiny else (64, 224)
        data = [(torch.randn(batch, 3, side, side, device=dev), torch.randint(0, 10, (batch,), device=dev))
                for _ in range(2)]
        units = batch
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    params = {p.data_ptr() for p in model.parameters()}

    def loss_of(x, y):
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            out = model(x)
            return F.cross_entropy(out.float().view(-1, out.shape[-1]), y.view(-1))

    sizes, c = [], None
    if config == "none":
        def pack(t):
            if t.data_ptr() not in params:
                sizes.append((t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage")
                              else t.storage().data_ptr(), t.numel() * t.element_size()))
            return t
        hooks = lambda: torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)  # noqa: E731
    elif config == "pytorch-2bit":
        def pack(t):
            p = pack_2bit(t)
            if not isinstance(p, torch.Tensor) or t.data_ptr() not in params:
                sizes.append((id(p), packed_bytes(p)))
            return p
        hooks = lambda: torch.autograd.graph.saved_tensors_hooks(pack, unpack_2bit)  # noqa: E731
    else:
        import actc.torch
        policy = config.split(":", 1)[1]
        c = actc.torch.compress(policy, model, overlap=not config.startswith("actc-wait:"))
        hooks = lambda: c  # noqa: E731

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    elapsed, context, peak = 0.0, 0, 0
    for s in range(-a.warmup, a.steps):
        x, y = data[s % 2]
        opt.zero_grad(set_to_none=True)
        sizes.clear()
        measure = s == -1 or config != "none"  # none: its context in one untimed step
        sync()
        if dev.type == "cuda" and s == 0:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        if measure:
            with hooks():
                loss = loss_of(x, y)
                loss.backward()
        else:
            loss = loss_of(x, y)
            loss.backward()
        opt.step()
        if c is not None:
            c.step(lambda: loss_of(x, y))
        sync()
        if s >= 0:
            elapsed += time.perf_counter() - t0
        if s == -1:
            context = sum(dict(sizes).values()) if c is None else c.totals()[0]
    if dev.type == "cuda":
        peak = torch.cuda.max_memory_allocated()
    return {"model": model_name, "config": config, "batch": batch,
            ("tokens_per_s" if model_name == "gpt2" else "images_per_s"): round(units * a.steps / elapsed, 1),
            "step_ms": round(1000 * elapsed / a.steps, 2), "max_memory_allocated_gib": round(peak / 2**30, 3),
            "context_mib": round(context / 2**20, 1), "loss": round(loss.item(), 4),
            "torch": torch.__version__, "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt2,resnet50")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    a = ap.parse_args()
    if a.warmup < 1 or a.steps < 1:
        ap.error("--warmup and --steps: at least 1")
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("no GPU: bench/torch_cuda.py needs one (or --device cpu --tiny for a smoke test)")
        return 0
    rows = []
    for m in a.models.split(","):
        for cfg in a.configs.split(","):
            try:
                r = run(m, cfg, a, dev)
            except Exception as e:  # noqa: BLE001 - one configuration's failure is a row of the table
                r = {"model": m, "config": cfg, "error": str(e).splitlines()[0][:160]}
            print(json.dumps(r), flush=True)
            rows.append(r)
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    print(f"\n{'model':<9} {'config':<19} {'units/s':>10} {'step ms':>9} {'vs none':>8} {'max alloc GiB':>13} "
          f"{'context MiB':>11} {'x less':>7}")
    for m in a.models.split(","):
        base = next((r for r in rows if r["model"] == m and r["config"] == "none" and "error" not in r), None)
        for r in (r for r in rows if r["model"] == m):
            if "error" in r:
                print(f"{m:<9} {r['config']:<19} failed: {r['error']}")
                continue
            ups = r.get("tokens_per_s", r.get("images_per_s"))
            vs = f"{r['step_ms'] / base['step_ms']:.2f}x" if base else "-"
            less = f"{base['context_mib'] / r['context_mib']:.1f}" if base and r["context_mib"] else "-"
            print(f"{m:<9} {r['config']:<19} {ups:>10.1f} {r['step_ms']:>9.2f} {vs:>8} "
                  f"{r['max_memory_allocated_gib']:>13.3f} {r['context_mib']:>11.1f} {less:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
