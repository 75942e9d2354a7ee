"""actc.torch.compact: the chosen layers save x P (rank r), the weight
gradient dy^T (x P) P^T is unbiased, the input and bias gradients are exact,
P follows the seed rule and the gap, and bad arguments are refused."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import actc
import actc.torch as at


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 4))


def grads(m, x, y):
    m.zero_grad()
    F.cross_entropy(m(x), y).backward()
    return [p.grad.clone() for p in m.parameters()]


def test_unbiased_and_exact_where_it_must_be():
    m = model()
    x, y = torch.randn(16, 64, requires_grad=True), torch.randint(0, 4, (16,))
    ref = grads(m, x, y)
    dx_ref = x.grad.clone()
    n = 128
    samples = []
    for s in range(n):
        cp = at.compact(m, r=0.25, seed=s)
        x.grad = None
        g = grads(m, x, y)
        assert torch.allclose(x.grad, dx_ref, atol=1e-6)          # dx = dy W: exact
        assert torch.allclose(g[1], ref[1]) and torch.allclose(g[3], ref[3])  # biases
        samples.append(torch.cat([g[0].flatten(), g[2].flatten()]))
        cp.remove()
    samples = torch.stack(samples)
    exact = torch.cat([ref[0].flatten(), ref[2].flatten()])
    ratio = float((samples.mean(0) - exact).pow(2).sum() / (samples.var(0).sum() / n))
    assert ratio < 3.0, ratio  # ~1 when unbiased
    assert float((samples[0] - exact).norm()) > 0.5 * float(exact.norm())  # the projection was real


def test_saves_the_projection_and_composes_with_a_policy():
    m = model()
    x, y = torch.randn(16, 64), torch.randint(0, 4, (16,))
    cp = at.compact(m, r=0.25, layers="0")
    c = at.compress("quant:4", m)
    with c:
        F.cross_entropy(m(x), y).backward()
    saves = c.saved()
    assert [s[1:3] for s in saves if s[0] == "0"] == [("quant:4", (16, 16))]  # x P, rank 16 of 64, compressed
    # Layer 2 (not chosen) keeps x: the tanh's output, which the tanh saved
    # first (one storage, stored once).
    assert [s[1:3] for s in saves if s[0] in ("1", "2")] == [("quant:4", (16, 32))]
    cp.remove()
    assert "forward" not in m[0].__dict__


def test_seed_rule_and_gap():
    m = model()
    x, y = torch.randn(8, 64), torch.randint(0, 4, (8,))
    cp = at.compact(m, r=0.5, gap=2, seed=3)
    a = grads(m, x, y)
    assert torch.equal(grads(m, x, y)[0], a[0])  # the same P within a step
    cp.step()
    assert torch.equal(grads(m, x, y)[0], a[0])  # and within the gap
    cp.step()
    assert not torch.equal(grads(m, x, y)[0], a[0])  # a new P after it
    cp.remove()
    cp = at.compact(m, r=0.5, gap=2, seed=3)
    assert torch.equal(grads(m, x, y)[0], a[0])  # the seed decides P
    cp.remove()


def train(use_compact):
    m = model()
    torch.manual_seed(1)
    w = torch.randn(64, 4)
    x = torch.randn(512, 64)
    y = (x @ w).argmax(1)
    cp = at.compact(m, r=0.25) if use_compact else None
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for epoch in range(6):
        for i in range(0, 512, 32):
            opt.zero_grad()
            F.cross_entropy(m(x[i:i + 32]), y[i:i + 32]).backward()
            opt.step()
            if cp:
                cp.step()
    with torch.no_grad():
        return F.cross_entropy(m(x), y).item()


def test_trains():
    start = F.cross_entropy(model()(torch.randn(512, 64)), torch.zeros(512, dtype=torch.long)).item()
    fp32, projected = train(False), train(True)
    # It learns, slower than fp32 (1.40 -> 1.01 against 0.30 here): Adam on
    # a rank-16 estimate of a 64-wide gradient, without CompAct's subspace
    # optimizer (the stretch goal, not built).
    assert projected < 0.8 * start and fp32 < projected, (start, fp32, projected)


def test_bad_arguments():
    with pytest.raises(ValueError, match="r must be positive"):
        at.compact(model(), r=0)
    with pytest.raises(actc.ActcError, match="rank 100 for layer '0' of width 64"):
        at.compact(model(), r=100)
    with pytest.raises(actc.ActcError, match="no nn.Linear layer matches blocks"):
        at.compact(model(), layers="blocks.*")
