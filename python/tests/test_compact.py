"""actc.torch.compact: the chosen layers save x P (rank r), the weight
gradient dy^T (x P) P^T is unbiased, the input and bias gradients are exact,
P follows the seed rule and the gap, and bad arguments are refused."""
import ctypes

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


def train(mode):
    m = model()
    torch.manual_seed(1)
    w = torch.randn(64, 4)
    x = torch.randn(512, 64)
    y = (x @ w).argmax(1)
    cp = at.compact(m, r=0.25, subspace=mode == "subspace") if mode else None
    if mode == "subspace":
        opt = cp.optimizer(m.parameters(), lr=3e-3, weight_decay=0)
    else:
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
    fp32, projected, subspace = train(None), train("dense"), train("subspace")
    # Both learn, slower than fp32 here (a rank-16 view of a 64-wide
    # gradient; measured 1.40 -> fp32 0.30, Adam on the projected dense
    # gradient 1.01, CompAct's subspace Adam 1.00).
    assert projected < 0.8 * start and fp32 < projected, (start, fp32, projected)
    assert subspace < 0.8 * start and fp32 < subspace, (start, fp32, subspace)


def test_subspace_adamw_step():
    """One weight stepped in its subspace: moments of the factor's shape,
    w <- w (1 - lr wd) - lr scale d P^T with d Adam's direction of the
    factor dy^T (x P); the bias (dense) as torch.optim.AdamW steps it."""
    torch.manual_seed(0)
    lin = nn.Linear(8, 3)
    ref = nn.Linear(8, 3)
    ref.load_state_dict(lin.state_dict())
    cp = at.compact(lin, r=0.5, gap=None, subspace=True)
    opt = cp.optimizer(lin.parameters(), lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, scale=0.25)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    proj = cp._projection("", 8, 4)
    P = torch.empty(8, 4)
    at_lib = actc._lib.lib
    assert at_lib.actc_project(ctypes.addressof(proj), torch.eye(8).data_ptr(), 8, P.data_ptr()) == 0
    w = lin.weight.detach().clone()
    m = torch.zeros(3, 4)
    v = torch.zeros(3, 4)
    for t in (1, 2):
        x = torch.randn(5, 8)
        opt.zero_grad()
        ref_opt.zero_grad()
        lin(x).pow(2).sum().backward()
        ref(x).pow(2).sum().backward()
        assert lin.weight.grad is None                        # the gradient is the factor
        u = cp.factors[lin.weight][0]
        dy = 2 * (x @ w.t() + lin.bias.detach())
        assert torch.allclose(u, dy.t() @ (x @ P), atol=1e-4)  # dy^T (x P)
        opt.step()
        ref_opt.step()
        assert opt.state[lin.weight]["m"].shape == (3, 4)      # out x r, not out x in
        m = 0.9 * m + 0.1 * u
        v = 0.99 * v + 0.01 * u * u
        d = (m / (1 - 0.9 ** t)) / ((v / (1 - 0.99 ** t)).sqrt() + 1e-8)
        w = w * (1 - 0.01 * 0.1) - 0.01 * 0.25 * d @ P.t()
        assert torch.allclose(lin.weight, w, atol=1e-5), (t, (lin.weight - w).abs().max())
        if t == 1:  # dense: AdamW's arithmetic (then the weights differ)
            assert torch.allclose(lin.bias, ref.bias, atol=1e-7)
        assert not cp.factors                                 # stepped, dropped


def test_subspace_clipping_and_accumulation():
    torch.manual_seed(0)
    m = model()
    cp = at.compact(m, r=0.25, layers="0", subspace=True)
    x, y = torch.randn(16, 64), torch.randint(0, 4, (16,))
    F.cross_entropy(m(x[:8]), y[:8]).backward()
    u1 = cp.factors[m[0].weight][0].clone()
    F.cross_entropy(m(x[8:]), y[8:]).backward()              # a second micro-batch adds to it
    u = cp.factors[m[0].weight][0]
    assert not torch.equal(u, u1)
    dense = [p.grad for p in m.parameters() if p.grad is not None]
    assert len(dense) == 3                                    # layer 0's bias, layer 2's weight and bias
    want = float(torch.sqrt(sum(g.pow(2).sum() for g in dense) + u.pow(2).sum()))
    norm = cp.clip_grad_norm_(m.parameters(), 0.5 * want)
    assert abs(float(norm) - want) < 1e-4 * want
    after = float(torch.sqrt(sum(g.pow(2).sum() for g in dense) + u.pow(2).sum()))
    assert abs(after - 0.5 * want) < 1e-3 * want              # both forms scaled
    cp.step()                                                 # a new projection mid-update: refused
    with pytest.raises(RuntimeError, match="different projections"):
        F.cross_entropy(m(x), y).backward()


def test_subspace_moments_across_projections():
    """A new P every step (gap 1): the moments carry over (CompAct's code),
    or restart with each P under reset_state, the bias correction with them."""
    for reset, want in ((False, 3), (True, 1)):
        torch.manual_seed(0)
        lin = nn.Linear(8, 3)
        cp = at.compact(lin, r=0.5, gap=1, subspace=True)
        opt = cp.optimizer(lin.parameters(), reset_state=reset)
        for _ in range(3):
            opt.zero_grad()
            lin(torch.randn(4, 8)).pow(2).sum().backward()
            u = cp.factors[lin.weight][0].clone()
            m_before = opt.state[lin.weight]["m"].clone() if opt.state[lin.weight] else None
            opt.step()
            cp.step()
        st = opt.state[lin.weight]
        assert st["step"] == want, (reset, st["step"])
        assert opt.state[lin.bias]["step"] == 3                   # dense: never reset
        if reset:
            assert torch.allclose(st["m"], 0.1 * u)                # only the last factor
        else:
            assert torch.allclose(st["m"], 0.9 * m_before + 0.1 * u)


def test_bad_arguments_subspace():
    with pytest.raises(actc.ActcError, match="subspace=True"):
        at.compact(model()).optimizer(model().parameters())
    with pytest.raises(ValueError, match="SubspaceAdamW"):
        at.compact(model(), subspace=True).optimizer(model().parameters(), scale=0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="r must be positive"):
        at.compact(model(), r=0)
    with pytest.raises(actc.ActcError, match="rank 100 for layer '0' of width 64"):
        at.compact(model(), r=100)
    with pytest.raises(actc.ActcError, match="no nn.Linear layer matches blocks"):
        at.compact(model(), layers="blocks.*")
