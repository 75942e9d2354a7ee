#!/usr/bin/env python3
"""A CIFAR-style ResNet (ResNet-20 by default) trained on Fashion-MNIST with
actc's activation compression through PyTorch's saved-tensor hooks.

    python3 examples/torch_resnet.py --compress actnn:L3 --epochs 1

The model is defined here (no torchvision).  The data are Debian's
dataset-fashion-mnist (/usr/share/datasets/fashion-mnist), padded to 32x32;
--limit-train/--limit-test take the first images only.  The package is
imported from the source tree when it is not installed."""
import argparse
import gzip
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import actc.torch  # noqa: E402


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu1, self.relu2 = nn.ReLU(), nn.ReLU()
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu2(out + (x if self.short is None else self.short(x)))


class ResNet(nn.Module):
    """ResNet-(6n+2) for 32x32 images (He et al., section 4.2); n=3: ResNet-20."""

    def __init__(self, n=3, in_ch=1, classes=10, width=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_ch, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        blocks, cin = [], width
        for stage, cout in enumerate((width, 2 * width, 4 * width)):
            for i in range(n):
                blocks.append(Block(cin, cout, 2 if stage > 0 and i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def fashion_mnist(split, limit, root="/usr/share/datasets/fashion-mnist"):
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz")) as f:
        images = torch.frombuffer(bytearray(f.read()[16:]), dtype=torch.uint8).view(-1, 1, 28, 28)
    with gzip.open(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz")) as f:
        labels = torch.frombuffer(bytearray(f.read()[8:]), dtype=torch.uint8).long()
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = F.pad(images.float() / 255.0, (2, 2, 2, 2))
    return (x - 0.2860) / 0.3530, labels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compress", default="actnn:L3", help="an actc policy, or 'off' for PyTorch alone")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--depth", type=int, default=3, help="blocks per stage (3: ResNet-20)")
    ap.add_argument("--limit-train", type=int, default=0)
    ap.add_argument("--limit-test", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x, y = fashion_mnist("train", a.limit_train)
    xt, yt = fashion_mnist("test", a.limit_test)
    model = ResNet(a.depth)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    c = None if a.compress == "off" else actc.torch.compress(a.compress, model, seed=a.seed)
    steps = a.epochs * ((len(x) + a.batch - 1) // a.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, a.lr, total_steps=steps)
    t0, step = time.time(), 0
    for epoch in range(a.epochs):
        model.train()
        perm = torch.randperm(len(x))
        for i in range(0, len(x), a.batch):
            idx = perm[i:i + a.batch]
            xb, yb = x[idx], y[idx]
            opt.zero_grad()
            if c is None:
                loss = F.cross_entropy(model(xb), yb)
                loss.backward()
            else:
                with c:
                    loss = F.cross_entropy(model(xb), yb)
                    loss.backward()
            opt.step()
            sched.step()
            if c is not None:
                c.step(lambda: F.cross_entropy(model(xb), yb))
            step += 1
            if step % 50 == 0 or step == steps:
                print(f"step {step}/{steps} loss {loss.item():.4f} {step * a.batch / (time.time() - t0):.1f} img/s",
                      flush=True)
    model.eval()
    with torch.no_grad():
        acc = sum(int((model(xt[i:i + 500]).argmax(1) == yt[i:i + 500]).sum()) for i in range(0, len(xt), 500))
    print(f"test accuracy {100.0 * acc / len(xt):.2f}% ({len(xt)} images)")
    if c is not None:
        print(c.report())


if __name__ == "__main__":
    main()
