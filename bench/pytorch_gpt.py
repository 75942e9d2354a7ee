#!/usr/bin/python3
"""PyTorch peer for transformer language-model training: the GPT-2 and LLaMA
models that actc implements, with the same shapes, trained with the same step
(forward + mean cross-entropy, backward, AdamW), fp32 on CPU.
bench/lm_throughput.sh runs it next to actc's build/bench_step on the same
shapes in the same run; this script only measures PyTorch.

usage: /usr/bin/python3 bench/pytorch_gpt.py --model gpt-mini --batch 8 --seq 256
           --steps 10 --warmup 2 --threads 2 [--json]
           [--layers N --width N --heads N --context N --vocab N]   (another shape)

Models (no dropout):
  gpt    GPT-2: wte + learned wpe, pre-LayerNorm blocks (separate Q, K, V
         linears with bias, causal attention, output projection, MLP D->4D->D
         with tanh GELU), final LayerNorm, head tied to wte.
  llama  RMSNorm, Q/K/V/O without bias, RoPE (base 10000, adjacent pairs),
         SwiGLU MLP (hidden 256*ceil(int(8D/3)/256)), untied head.
Attention is the textbook form (torch 1.13 has no scaled_dot_product_attention).
Each step trains on random token ids in [0, min(V, 256)) as inputs and targets.
After --warmup untimed steps, --steps steps are timed with time.perf_counter
around forward (incl. loss), backward and optimizer step.  Peak RSS is
getrusage's ru_maxrss (whole process, so it includes the warm-up).
Needs Debian's python3-torch (bench only; the build and tests never use it)."""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# name: (family, layers, width, heads, context, vocab)
PRESETS = {
    "gpt-mini": ("gpt", 6, 256, 8, 256, 256),
    "llama-mini": ("llama", 6, 256, 8, 256, 256),
    "gpt2-124m": ("gpt", 12, 768, 12, 1024, 50257),
}
EXPECTED_PARAMS = {"gpt2-124m": 124_439_808}


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin):
    """Rotate adjacent pairs (x[2i], x[2i+1]) of x [B, H, T, Dh] by t * base^(-2i/Dh)."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, llama, d, heads):
        super().__init__()
        self.llama, self.heads = llama, heads
        bias = not llama
        self.ln1 = RMSNorm(d) if llama else nn.LayerNorm(d, eps=1e-5)
        self.ln2 = RMSNorm(d) if llama else nn.LayerNorm(d, eps=1e-5)
        self.q, self.k, self.v = (nn.Linear(d, d, bias=bias) for _ in range(3))
        self.proj = nn.Linear(d, d, bias=bias)  # attention output (residual)
        if llama:
            hidden = 256 * math.ceil(int(2 * 4 * d / 3) / 256)
            self.w1, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
            self.w2 = nn.Linear(hidden, d, bias=False)  # residual
        else:
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)  # fc2: residual
            self.gelu = nn.GELU(approximate="tanh")

    def attention(self, x, mask, cos, sin):
        B, T, D = x.shape
        q, k, v = (m(x).view(B, T, self.heads, D // self.heads).transpose(1, 2) for m in (self.q, self.k, self.v))
        if self.llama:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D // self.heads))
        p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        return self.proj((p @ v).transpose(1, 2).reshape(B, T, D))

    def forward(self, x, mask, cos=None, sin=None):
        x = x + self.attention(self.ln1(x), mask, cos, sin)
        h = self.ln2(x)
        if self.llama:
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))
        return x + self.fc2(self.gelu(self.fc1(h)))


class LM(nn.Module):
    def __init__(self, family, layers, d, heads, context, vocab):
        super().__init__()
        self.llama = family == "llama"
        self.wte = nn.Embedding(vocab, d)
        self.wpe = None if self.llama else nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(self.llama, d, heads) for _ in range(layers))
        self.norm = RMSNorm(d) if self.llama else nn.LayerNorm(d, eps=1e-5)
        self.head = nn.Linear(d, vocab, bias=False) if self.llama else None
        self.register_buffer("mask", torch.ones(context, context, dtype=torch.bool).triu(1), persistent=False)
        dh = d // heads
        ang = torch.arange(context, dtype=torch.float64)[:, None] * 10000.0 ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:  # linears and embeddings; norm weights stay 1
                resid = name.endswith(("proj.weight", "fc2.weight", "w2.weight"))
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers) if resid else 0.02)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe.weight[:T]
        mask, cos, sin = self.mask[:T, :T], self.cos[:T], self.sin[:T]
        for blk in self.blocks:
            x = blk(x, mask, cos, sin)
        x = self.norm(x)
        return self.head(x) if self.llama else F.linear(x, self.wte.weight)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt-mini", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=0, help="sequence length trained (default: the context)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the text line")
    for k in ("layers", "width", "heads", "context", "vocab"):
        ap.add_argument("--" + k, type=int, default=0, help=f"{k} other than the preset's (bench_step's ACTC_BENCH_SHAPE)")
    a = ap.parse_args()
    family, layers, d, heads, context, vocab = PRESETS[a.model]
    reshaped = any((a.layers, a.width, a.heads, a.context, a.vocab))
    layers, d, heads = a.layers or layers, a.width or d, a.heads or heads
    context, vocab = a.context or context, a.vocab or vocab
    seq = a.seq or context
    if not 1 <= seq <= context or a.batch < 1 or a.steps < 1 or a.warmup < 0:
        ap.error(f"need 1 <= --seq <= {context}, --batch >= 1, --steps >= 1, --warmup >= 0")

    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = LM(family, layers, d, heads, context, vocab)
    params = sum(p.numel() for p in model.parameters())
    want = None if reshaped else EXPECTED_PARAMS.get(a.model)
    if want is not None and params != want:
        raise SystemExit(f"{a.model}: {params:,} parameters, expected {want:,}")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    hi = min(vocab, 256)

    tf = tb = to = 0.0
    for s in range(-a.warmup, a.steps):
        x = torch.randint(0, hi, (a.batch, seq))
        y = torch.randint(0, hi, (a.batch, seq))
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if s >= 0:
            tf, tb, to = tf + t1 - t0, tb + t2 - t1, to + t3 - t2

    total = tf + tb + to
    r = {"peer": "pytorch", "model": a.model, "batch": a.batch, "seq": seq,
         "tokens_per_s": round(a.batch * seq * a.steps / total, 1),
         "forward_pct": round(100 * tf / total, 1), "backward_pct": round(100 * tb / total, 1),
         "optimizer_pct": round(100 * to / total, 1), "step_ms": round(1000 * total / a.steps, 1),
         "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
         "params": params, "torch": torch.__version__, "threads": a.threads,
         "steps": a.steps, "warmup": a.warmup, "loss": round(loss.item(), 4)}
    if a.json:
        print(json.dumps(r))
    else:
        print(f"pytorch {a.model} batch {a.batch} seq {seq}: {r['tokens_per_s']:.1f} tokens/s "
              f"(forward {r['forward_pct']:.1f}% backward {r['backward_pct']:.1f}% "
              f"optimizer {r['optimizer_pct']:.1f}%), step {r['step_ms']:.1f} ms, "
              f"peak RSS {r['peak_rss_mib']} MiB, params {params:,}, torch {torch.__version__}, "
              f"{a.threads} threads")


if __name__ == "__main__":
    main()
