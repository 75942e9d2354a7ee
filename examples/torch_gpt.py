#!/usr/bin/env python3
"""A byte-level GPT (gpt-mini's shape by default: 4 layers, width 128, 4
heads, 128-token context) trained on a text file with actc's activation
compression through PyTorch's saved-tensor hooks.

    make corpus   # build/data/kjv.txt, the King James Bible as plain text
    python3 examples/torch_gpt.py --compress actnn:L3 --steps 200
    python3 examples/torch_gpt.py --compress off --compact 0.25   # CompAct alone

The model is defined here; the loss is computed outside it (actc keeps the
loss's saves as it does in its own engine).  The package is imported from
the source tree when it is not installed."""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import actc.torch  # noqa: E402


def causal_probs(q, k):
    T = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)


class CausalAttention(torch.autograd.Function):
    """softmax(q k^T / sqrt(d)) v saving q, k and v only: backward recomputes
    the probabilities, as memory-efficient attention (PyTorch 2's
    scaled_dot_product_attention, actc's flash attention) does, instead of
    keeping the T x T matrix of every head."""

    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return causal_probs(q, k) @ v

    @staticmethod
    def backward(ctx, dout):
        q, k, v = ctx.saved_tensors
        p = causal_probs(q, k)
        dv = p.transpose(-2, -1) @ dout
        dp = dout @ v.transpose(-2, -1)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True)) / math.sqrt(q.shape[-1])
        return ds @ k, ds.transpose(-2, -1) @ q, dv


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        return self.proj(CausalAttention.apply(q, k, v).transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=256, width=128, layers=4, heads=4, context=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.ln(self.blocks(x)))


def batches(data, batch, seq, gen):
    while True:
        i = torch.randint(0, len(data) - seq - 1, (batch,), generator=gen)
        w = torch.stack([data[j:j + seq + 1] for j in i.tolist()])
        yield w[:, :-1].long(), w[:, 1:].long()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compress", default="actnn:L3", help="an actc policy, or 'off' for PyTorch alone")
    ap.add_argument("--data", default=os.path.join(here, "..", "build", "data", "kjv.txt"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--compact", type=float, default=0,
                    help="CompAct: the blocks' linear layers save x P of rank R x width, stepped in the subspace")
    ap.add_argument("--compact-scale", type=float, default=1.0, help="CompAct's alpha (the subspace step's scale)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    if not os.path.exists(a.data):
        sys.exit(f"no text at {a.data}: run `make corpus` or give --data FILE")
    torch.manual_seed(a.seed)
    raw = torch.frombuffer(bytearray(open(a.data, "rb").read()), dtype=torch.uint8)
    split = int(0.95 * len(raw))
    model = GPT(width=a.width, layers=a.layers, heads=max(1, a.width // 32), context=a.seq)
    cp = actc.torch.compact(model, r=a.compact, layers="blocks.*", seed=a.seed, subspace=True) if a.compact else None
    if cp:
        opt = cp.optimizer(model.parameters(), lr=a.lr, betas=(0.9, 0.99), weight_decay=0.01, scale=a.compact_scale)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.99), weight_decay=0.01)
    c = None if a.compress == "off" else actc.torch.compress(a.compress, model, seed=a.seed)
    train = batches(raw[:split], a.batch, a.seq, torch.Generator().manual_seed(a.seed))
    t0 = time.time()
    for step in range(1, a.steps + 1):
        x, y = next(train)
        opt.zero_grad()
        if c is None:
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
        else:
            with c:
                loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
                loss.backward()
        if cp:
            cp.clip_grad_norm_(model.parameters(), 1.0)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if cp:
            cp.step()
        if c is not None:
            c.step(lambda: F.cross_entropy(model(x).flatten(0, 1), y.flatten()))
        if step % 20 == 0 or step == a.steps:
            tok_s = step * a.batch * a.seq / (time.time() - t0)
            print(f"step {step}/{a.steps} loss {loss.item():.4f} ({loss.item() / math.log(2):.3f} bits/byte) "
                  f"{tok_s:.0f} tokens/s", flush=True)
    model.eval()
    val = batches(raw[split:], a.batch, a.seq, torch.Generator().manual_seed(1))
    with torch.no_grad():
        vl = sum(F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item() for x, y in (next(val) for _ in range(8)))
    print(f"validation {vl / 8 / math.log(2):.4f} bits/byte")
    if c is not None:
        print(c.report())


if __name__ == "__main__":
    main()
