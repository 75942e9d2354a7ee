"""A small CNN and a small GPT (the examples' models) train under the hooks
with actnn:L3 and gact:4 to within seed noise of PyTorch's fp32, and the
adaptive policies do adapt."""
import os
import statistics
import sys

import pytest
import torch
import torch.nn.functional as F

import actc.torch as at

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
from torch_gpt import GPT  # noqa: E402
from torch_resnet import ResNet  # noqa: E402

SEEDS = (0, 1, 2)


def images(seed, n):
    """Ten classes of 16x16 images: a fixed template per class plus noise."""
    templates = torch.randn(10, 1, 16, 16, generator=torch.Generator().manual_seed(100))
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    return templates[y] + 1.5 * torch.randn(n, 1, 16, 16, generator=g), y


def fit(model, policy, seed, batches, loss_fn, opt):
    # gact at its default interval (1000) measures at steps 0, 62 and 125
    # here (actc_controller_measure_due).  Measured at step 0 alone, the GPT
    # below ended at 1.053 nats under gact:4 against fp32's 0.746 (3 seeds):
    # the untrained model's flat softmax hides how sensitive the loss's
    # saves become.
    c = at.compress(policy, model, seed=seed) if policy else None
    for xb, yb in batches:
        opt.zero_grad()
        if c is None:
            loss_fn(model(xb), yb).backward()
        else:
            with c:
                loss_fn(model(xb), yb).backward()
        opt.step()
        if c is not None:
            c.step(lambda: loss_fn(model(xb), yb))
    return c


def cnn_accuracy(policy, seed):
    torch.manual_seed(seed)
    model = ResNet(n=1, width=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = images(1, 1536)
    fit(model, policy, seed, [(x[i:i + 32], y[i:i + 32]) for i in range(0, len(x), 32)] * 2, F.cross_entropy, opt)
    xt, yt = images(2, 1000)
    model.eval()
    with torch.no_grad():
        return float((model(xt).argmax(1) == yt).float().mean())


def text_batches(seed, steps, batch=8, seq=32):
    """Bytes of a noisy repeating pattern: learnable in a few hundred steps."""
    g = torch.Generator().manual_seed(seed)
    base = torch.tensor(list(b"the quick brown fox jumps over the lazy dog; "), dtype=torch.long)
    text = base.repeat(400)
    noise = torch.rand(len(text), generator=torch.Generator().manual_seed(7)) < 0.05
    text[noise] = torch.randint(0, 256, (int(noise.sum()),), generator=torch.Generator().manual_seed(8))
    out = []
    for _ in range(steps):
        i = torch.randint(0, len(text) - seq - 1, (batch,), generator=g)
        w = torch.stack([text[j:j + seq + 1] for j in i.tolist()])
        out.append((w[:, :-1], w[:, 1:]))
    return out


def lm_loss(logits, y):
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def gpt_loss(policy, seed):
    torch.manual_seed(seed)
    model = GPT(width=32, layers=2, heads=2, context=32)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    fit(model, policy, seed, text_batches(seed, 150), lm_loss, opt)
    model.eval()
    with torch.no_grad():
        return statistics.mean(lm_loss(model(x), y).item() for x, y in text_batches(99, 4))


def within_noise(values, ref, floor):
    """The policy's mean within the seeds' spread (or floor) of fp32's."""
    spread = max(statistics.stdev(values), statistics.stdev(ref), floor)
    return abs(statistics.mean(values) - statistics.mean(ref)) <= 3 * spread


@pytest.mark.parametrize("policy", ["actnn:L3", "gact:4"])
def test_cnn_trains_like_fp32(policy):
    ref = [cnn_accuracy(None, s) for s in SEEDS]
    got = [cnn_accuracy(policy, s) for s in SEEDS]
    assert statistics.mean(ref) > 0.5, ref  # the task was learnt
    assert within_noise(got, ref, 0.01), (policy, got, ref)


def test_gpt_trains_like_fp32():
    ref = [gpt_loss(None, s) for s in SEEDS]
    assert statistics.mean(ref) < 1.0, ref  # far below log(256) = 5.5: learnt
    got = [gpt_loss("gact:4", s) for s in SEEDS]
    assert within_noise(got, ref, 0.02), (got, ref)
    # actnn:L3 (2 bits on average) trains, but this 32-wide GPT after 150
    # steps at lr 3e-3 ends about 0.11 nats above fp32 (seed spread 0.02),
    # uniform quant:2 0.09; quant:4 is within noise (bench/RESULTS.md, issue
    # 37).  The bound below holds that measurement, not a promise of seed
    # noise.
    got = [gpt_loss("actnn:L3", s) for s in SEEDS]
    assert statistics.mean(got) - statistics.mean(ref) < 0.15, (got, ref)


def test_policies_adapt():
    """actnn:L3 moves bits between layers and samples from the gradients it
    observes, gact:4 from its measured sensitivities: after a few steps the
    saves' sizes are no longer those of the first step (every layer at the
    average), at about the same total."""
    torch.manual_seed(0)
    model = ResNet(n=1, width=8)
    x, y = images(1, 32)
    for policy in ["actnn:L3", "gact:4"]:
        c = at.compress(policy, model, adapt_interval=1)
        sizes = []
        for _ in range(3):
            with c:
                F.cross_entropy(model(x), y).backward()
            sizes.append([s[3] for s in c.saved() if s[1].startswith("quant")])
            c.step(lambda: F.cross_entropy(model(x), y))
        assert len(sizes[0]) == len(sizes[2]) > 5 and sizes[0] != sizes[2], (policy, sizes)
        assert 0.5 < sum(sizes[2]) / sum(sizes[0]) < 2.0, (policy, sizes)
