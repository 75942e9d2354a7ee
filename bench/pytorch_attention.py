"""PyTorch peer of bench_attention: forward + backward of causal multi-head
self-attention on q, k, v [B, T, H*Dh] (the layout the actc operators take),
timed the same way (one untimed warm-up, loss = sum(out * R)).

usage: /usr/bin/python3 bench/pytorch_attention.py [B] [T] [H] [Dh] [REPS] [THREADS]

Forms: "naive" is the textbook composition (what torch 1.13, Debian's
version, runs for nn.MultiheadAttention's core); "sdpa" is
torch.nn.functional.scaled_dot_product_attention(is_causal=True) when the
installed torch has it (2.0+).  Bench only: the build and tests never need
PyTorch."""
import json
import math
import sys
import time

import torch


def naive(q, k, v, H):
    B, T, D = q.shape
    Dh = D // H
    q, k, v = (t.view(B, T, H, Dh).transpose(1, 2) for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(Dh))
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
    return (p @ v).transpose(1, 2).reshape(B, T, D)


def sdpa(q, k, v, H):
    B, T, D = q.shape
    Dh = D // H
    q, k, v = (t.view(B, T, H, Dh).transpose(1, 2) for t in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return o.transpose(1, 2).reshape(B, T, D)


def main():
    a = [int(x) for x in sys.argv[1:]]
    B, T, H, Dh, reps = (a + [8, 256, 8, 32, 10][len(a):])[:5]
    if len(a) > 5:
        torch.set_num_threads(a[5])
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, T, H * Dh, requires_grad=True) for _ in range(3))
    r = torch.rand(B, T, H * Dh) - 0.5
    forms = [("naive", naive)]
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        forms.append(("sdpa", sdpa))
    print(f"pytorch {torch.__version__} attention B={B} T={T} H={H} Dh={Dh}, "
          f"{torch.get_num_threads()} threads, {reps} reps")
    for name, fn in forms:
        tf = tb = 0.0
        for s in range(-1, reps):
            t0 = time.perf_counter()
            y = fn(q, k, v, H)
            t1 = time.perf_counter()
            loss = (y * r).sum()
            t2 = time.perf_counter()
            loss.backward()
            t3 = time.perf_counter()
            q.grad = k.grad = v.grad = None
            if s >= 0:
                tf += t1 - t0
                tb += t3 - t2
        tok = B * T * reps / (tf + tb)
        print(f"{name:5s} {tok:9.0f} tokens/s  forward {1e3 * tf / reps:7.2f} ms  "
              f"backward {1e3 * tb / reps:7.2f} ms")
        print(json.dumps({"bench": "attention", "impl": "pytorch", "form": name, "B": B, "T": T, "H": H,
                          "Dh": Dh, "threads": torch.get_num_threads(), "tokens_per_s": round(tok, 1),
                          "forward_ms": round(1e3 * tf / reps, 3), "backward_ms": round(1e3 * tb / reps, 3)}))


if __name__ == "__main__":
    main()
