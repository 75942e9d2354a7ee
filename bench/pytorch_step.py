#!/usr/bin/python3
"""PyTorch peer of bench_step: the same models (CIFAR-style ResNet-20 / ResNet-18
on 1x28x28 inputs, 1x1-conv projection shortcuts, no conv bias), the same step
(forward, cross-entropy, backward, SGD with Nesterov momentum), fp32 on CPU.

usage: /usr/bin/python3 bench/pytorch_step.py MODEL BATCH [STEPS] [THREADS]
Needs Debian's python3-torch (bench only; the build and tests never use it).
Prints one human line and one JSON line, like bench_step."""
import json
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.sc = None
        if stride != 1 or cin != cout:
            self.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)))
        h = self.b2(self.c2(h))
        return F.relu(h + (self.sc(x) if self.sc is not None else x))


class ResNet(nn.Module):
    def __init__(self, blocks, widths, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        layers, cin = [], widths[0]
        for s, (n, w) in enumerate(zip(blocks, widths)):
            for j in range(n):
                layers.append(Block(cin, w, 2 if (s > 0 and j == 0) else 1))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        h = self.layers(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def make(name):
    if name == "resnet18":
        return ResNet([2, 2, 2, 2], [64, 128, 256, 512])
    n = {"resnet20": 3, "resnet32": 5, "resnet56": 9}[name]
    return ResNet([n, n, n], [16, 32, 64])


def main():
    model_name, batch = sys.argv[1], int(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = make(model_name)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
    x = torch.randn(batch, 1, 28, 28)
    y = torch.arange(batch) % 10
    tf = tb = to = 0.0
    for s in range(-2, steps):
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if s >= 0:
            tf, tb, to = tf + t1 - t0, tb + t2 - t1, to + t3 - t2
    total = tf + tb + to
    sps = batch * steps / total
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"pytorch {torch.__version__} {model_name:9s} batch {batch:4d} {sps:8.1f} samples/s  forward {100*tf/total:4.1f}%"
          f"  backward {100*tb/total:4.1f}%  optimizer {100*to/total:4.1f}%  RSS {rss/2**20:.1f} MiB")
    print(json.dumps({"peer": "pytorch", "version": torch.__version__, "model": model_name, "batch": batch,
                      "threads": threads, "steps": steps, "samples_per_s": round(sps, 2), "forward_s": tf / steps,
                      "backward_s": tb / steps, "optimizer_s": to / steps, "peak_rss": rss}))


if __name__ == "__main__":
    main()
