"""actc.torch.compress: gradients through the hooks against PyTorch's
without them, unbiasedness at 2 bits, the report's bytes, the safety rules
(in-place changes, unpack twice, refusals) and the learning policies."""
import math
import os
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import actc
import actc.core
import actc.torch as at

HERE = os.path.dirname(os.path.abspath(__file__))


def small_cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 10))


def grads(model, x, y, c=None, retain=False):
    model.zero_grad()
    if c is None:
        F.cross_entropy(model(x), y).backward()
    else:
        with c:
            F.cross_entropy(model(x), y).backward(retain_graph=retain)
    return [p.grad.detach().clone() for p in model.parameters()]


def rel(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def test_version_matches_the_header():
    header = open(os.path.join(HERE, "..", "..", "include", "actc.h")).read()
    version = re.search(r'#define ACTC_VERSION "([^"]+)"', header).group(1)
    assert actc.__version__ == version == actc.library_version


def test_roles_match_the_library():
    from actc import _lib
    names = {_lib.ROLE_UNKNOWN: "unknown", _lib.ROLE_LINEAR_IN: "linear_in", _lib.ROLE_CONV_IN: "conv_in",
             _lib.ROLE_NORM_IN: "norm_in", _lib.ROLE_LOSS_IN: "loss_in"}
    for value, name in names.items():
        assert _lib.lib.actc_role_name(value).decode() == name


def test_codecs_on_tensors():
    x = torch.randn(6, 300)
    for spec, tol in [("fp32", 0.0), ("bf16", 1 / 128), ("quant:8", 1 / 255 + 1e-3), ("nf4", 0.5), ("dyn8", 0.1)]:
        p, payload = actc.core.encode(x, spec, key=3)
        assert payload.numel() == p.bytes
        y = actc.core.decode(p, payload)
        span = float(x.max() - x.min())
        assert float((y - x).abs().max()) <= tol * span + 1e-7, spec
    with pytest.raises(actc.ActcError, match="bad codec .quant:2x.: quant takes"):
        actc.core.encode(x, "quant:2x")
    with pytest.raises(actc.ActcError, match="actc has CPU and CUDA codecs"):
        actc.core.codec_input(torch.empty(2, 2, device="meta"))
    with pytest.raises(actc.ActcError, match="floating or boolean"):
        actc.core.codec_input(torch.zeros(2, 2, dtype=torch.int32))


def test_8_bits_close_to_fp32():
    torch.manual_seed(0)
    m = small_cnn()
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))
    ref = grads(m, x, y)
    assert all(torch.equal(a, b) for a, b in zip(grads(m, x, y, at.compress("none", m)), ref))
    g8 = grads(m, x, y, at.compress("quant:8", m))
    # Parameter 1 is the first convolution's bias, whose gradient batch norm
    # cancels (its reference is rounding noise).
    for i, (a, b) in enumerate(zip(g8, ref)):
        if i != 1:
            assert rel(a, b) < 0.03, (i, rel(a, b))


@pytest.mark.parametrize("layer", ["linear", "conv"])
def test_unbiased_at_2_bits(layer):
    """The mean of n stochastic 2-bit gradients approaches the exact one at
    the 1/sqrt(n) law: ||mean - exact||^2 ~ tr(Cov) / n when unbiased."""
    torch.manual_seed(1)
    if layer == "linear":
        m = nn.Sequential(nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 4))
        x = torch.randn(16, 32)
    else:
        m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Tanh(), nn.Flatten(), nn.Linear(4 * 6 * 6, 4))
        x = torch.randn(16, 3, 8, 8)
    y = torch.randint(0, 4, (16,))
    exact = torch.cat([g.flatten() for g in grads(m, x, y)])
    n = 96
    samples = torch.stack([torch.cat([g.flatten() for g in grads(m, x, y, at.compress("quant:2", m, seed=s))])
                           for s in range(n)])
    mean = samples.mean(0)
    trace = samples.var(0).sum()
    ratio = float((mean - exact).pow(2).sum() / (trace / n))
    assert ratio < 3.0, ratio  # about 1 when unbiased; a bias grows it with n
    assert float((samples[0] - exact).norm()) > float((mean - exact).norm()) * 3  # the noise was real


def test_report_bytes_are_the_payloads():
    torch.manual_seed(2)
    m = nn.Sequential(small_cnn(), nn.Dropout(0.5))
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    for policy in ["quant:2", "division", "nf4", "actnn:L3"]:
        c = at.compress(policy, m)
        grads(m, x, y, c)
        saves = c.saved()
        stored, fp32 = c.totals()
        assert stored == sum(s[3] for s in saves) and stored < fp32
        for scope, codec, shape, nbytes in saves:
            if codec == "kept":
                continue
            if codec == "quant:mixed":  # per-sample widths of 1 to 8 bits
                assert 0 < nbytes <= actc.core.plan("quant:8", shape, sample_bits=[8] * shape[0]).bytes
                continue
            assert nbytes == actc.core.plan(codec, shape).bytes, (policy, scope, codec, shape)
        assert ("0.2", "mask", (4, 8, 8, 8), 256) in saves  # the ReLU's sign, 1 bit
        assert "total (" + c.policy + ")" in c.report()


def test_inplace_change_is_an_error():
    w = nn.Linear(8, 8)
    for policy in ["none", "quant:4"]:
        a = torch.randn(4, 8, requires_grad=True)
        with at.compress(policy, w):
            h = w(a) * 1.0
            s = h.sin()           # saves h
            h.add_(1.0)           # changes it
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                s.sum().backward()
        # A parameter kept as it is, changed before backward.
        with at.compress(policy, w):
            out = w(torch.randn(4, 8, requires_grad=True)).sum()  # saves the weight
        with torch.no_grad():
            w.weight.add_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.backward()


def test_unpack_twice():
    torch.manual_seed(3)
    m = small_cnn()
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    c = at.compress("quant:4", m)
    m.zero_grad()
    with c:
        loss = F.cross_entropy(m(x), y)
    loss.backward(retain_graph=True)
    once = [p.grad.clone() for p in m.parameters()]
    loss.backward()
    for a, p in zip(once, m.parameters()):
        assert torch.allclose(p.grad, 2 * a, rtol=1e-5, atol=1e-7)


def test_dtypes_views_and_dedup():
    torch.manual_seed(4)
    lin = nn.Linear(16, 16).double()
    x = torch.randn(16, 8, dtype=torch.float64).t()  # non-contiguous float64
    c = at.compress("quant:8", lin)
    with c:
        y = lin(x)
        z = (y * y).sum()  # y saved twice by one product: stored once
        z.backward()
    ref_lin = nn.Linear(16, 16).double()
    ref_lin.load_state_dict(lin.state_dict())
    (ref_lin(x) ** 2).sum().backward()
    assert rel(lin.weight.grad, ref_lin.weight.grad) < 0.05
    saves = c.saved()
    assert [s[1:] for s in saves if s[0] == at.OUTSIDE] == [("fp32", (8, 16), 512)], saves  # y once
    assert [s[1:] for s in saves if s[0] == ""] == [("quant:8", (8, 16), 160)], saves  # x


def test_fp32_plans_keep_the_tensor():
    """A save planned fp32 (the loss's, outside the model) is kept as it is,
    not copied: backward reads the very tensor; float64 is still narrowed
    (previous test)."""
    lin = nn.Linear(8, 8)
    for policy in ["quant:4", "actnn:L3"]:
        c = at.compress(policy, lin)
        with c:
            y = lin(torch.randn(4, 8, requires_grad=True))
            s = y.sin()  # saves y, outside the model: planned fp32
            assert s.grad_fn._saved_self.data_ptr() == y.data_ptr()
            s.sum().backward()
        assert ("(outside)", "fp32", (4, 8), 128) in c.saved(), c.saved()


def test_bool_and_int_saves():
    torch.manual_seed(5)
    m = nn.Linear(8, 32)
    x, y = torch.randn(4, 8), torch.randint(0, 32, (4,))

    def loss():
        h = m(x)
        return F.cross_entropy(torch.where(h > 0.1, h, torch.zeros(())), y)  # where saves a bool

    m.zero_grad()
    loss().backward()
    ref = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    c = at.compress("quant:8", m)
    with c:
        loss().backward()
    assert rel(m.weight.grad, ref[0]) < 0.03 and torch.equal(m.bias.grad, ref[1])
    saves = c.saved()
    assert (at.OUTSIDE, "mask", (4, 32), 16) in saves  # 128 booleans in 16 bytes
    assert (at.OUTSIDE, "kept", (4,), 32) in saves     # the loss's int64 targets


def test_gact_measures_on_the_engine_schedule():
    """gact measures at step 0, every adapt_interval steps and at the first
    interval's halvings of at least 16 steps (actc_controller_measure_due):
    with 64, at steps 0, 16, 32 and 64."""
    m = nn.Linear(4, 4)
    c = at.compress("gact:4", m, adapt_interval=64)
    x = torch.randn(2, 4)
    measured = []
    c._measure = lambda closure: measured.append(c.step_count)
    for _ in range(70):
        with c:
            m(x).sum().backward()
        c.step(lambda: m(x).sum())
    assert measured == [0, 16, 32, 64]


def test_bad_input():
    with pytest.raises(actc.ActcError, match="unknown compression policy 'nosuch'"):
        at.compress("nosuch")
    with pytest.raises(actc.ActcError, match="actc.torch.compact"):
        at.compress("compact:r=0.25+gact:4")
    with pytest.raises(actc.ActcError, match="torch.utils.checkpoint"):
        at.compress("gact:CB1")
    with pytest.raises(ValueError, match="give model="):
        at.compress("actnn:L3")
    with pytest.raises(ValueError, match="c.step\\(closure\\)"):
        m = nn.Linear(4, 4)
        c = at.compress("gact:4", m)
        with c:
            m(torch.randn(2, 4)).sum().backward()
        c.step()
    # Nothing half-packed: a failed save leaves no entry behind.
    m = nn.Linear(4, 4)
    c = at.compress("quant:2", m)
    with c:
        # torch 1.x passes an exception raised in a hook on as a
        # RuntimeError that names it, torch 2.x as it is (an ActcError,
        # which is a RuntimeError).
        with pytest.raises(RuntimeError, match="actc: the codecs take at most 5 dimensions"):
            (torch.randn(1, 1, 1, 1, 2, 4, requires_grad=True) * torch.randn(1, 1, 1, 1, 2, 4)).sum()
    assert c.saved() == []


def test_shapes_must_repeat_for_learning_policies():
    m = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    c = at.compress("actnn:L3", m)
    with c:
        m(torch.randn(4, 8)).sum().backward()
    c.step()
    with c:
        m(torch.randn(2, 8)).sum().backward()  # another batch size is fine
    c.step()
    m2 = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    c2 = at.compress("actnn:L3", m2)
    with c2:
        m2(torch.randn(4, 8)).sum().backward()
    c2.step()
    with pytest.raises(RuntimeError, match="per-sample shape \\[8\\] before and \\[3, 8\\] now"):
        with c2:
            m2(torch.randn(4, 3, 8)).sum()


def test_library_errors(tmp_path):
    import subprocess
    import sys
    import shutil
    pkg = os.path.join(HERE, "..", "actc")
    env = dict(os.environ, ACTC_LIBRARY=str(tmp_path / "nowhere.so"), PYTHONPATH=os.path.join(HERE, ".."))
    r = subprocess.run([sys.executable, "-c", "import actc"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0 and "LibraryNotFound" in r.stderr and "nowhere.so" in r.stderr
    # A package of another version refuses this library.
    shutil.copytree(pkg, tmp_path / "actc")
    (tmp_path / "actc" / "_version.py").write_text('__version__ = "0.1.0"\n')
    env = dict(os.environ, ACTC_LIBRARY=actc.library_path, PYTHONPATH=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", "import actc"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0 and "needs 0.1.0" in r.stderr


def test_threads_per_call():
    """compress(threads=) sets the hooks' own calls, not the library's
    setting; the payloads are the same at any count."""
    before = actc.core.lib.actc_get_threads()
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 4))
    x = torch.randn(32, 64)
    grads = []
    for threads in (1, 3):
        m.zero_grad()
        with at.compress("quant:2", m, threads=threads) as c:
            m(x).sum().backward()
        assert actc.core.lib.actc_get_threads() == before
        grads.append([p.grad.clone() for p in m.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_autocast_weight_copies_kept():
    """Under autocast a linear layer saves a bfloat16 copy of its weight
    (transposed): kept like the parameter, never quantized as if it were the
    layer's input; the activations are quantized from their bfloat16."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    x = torch.randn(8, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with at.compress("quant:2", m) as c:
            m(x).float().sum().backward()
    saved = c.saved()
    assert [s for s in saved if s[1] == "kept"] == [("2", "kept", (32, 4), 32 * 4 * 2)], saved
    assert all(s[2][0] == 8 for s in saved if s[1] == "quant:2"), saved
    assert all(torch.isfinite(p.grad).all() for p in m.parameters())


def test_queued_saves_match_planning_at_the_save():
    """The queue of saves waiting for their ranges (compress's overlap: CUDA
    tensors under actnn), run here on the CPU: the same gradients (so the
    same payloads) and saved() lines as planning at each save, over steps
    in which actnn re-plans; at most MAX_PENDING saves wait, none after the
    model's forward; a save changed in place while it waits is an error at
    backward."""
    torch.manual_seed(4)
    layers = []
    for _ in range(6):
        layers += [nn.Linear(24, 24), nn.GELU()]
    m = nn.Sequential(*layers, nn.Linear(24, 5))
    x, y = torch.randn(8, 24) * torch.arange(1, 9).view(8, 1), torch.randint(0, 5, (8,))
    runs = []
    for queued in (False, True):
        c = at.compress("actnn:L3", m, seed=3)
        c._queue_host = queued
        waiting, after = [], []
        hs = [mod.register_forward_hook(lambda *a: waiting.append(len(c._queue))) for mod in m]
        hs.append(m.register_forward_hook(lambda *a: after.append(len(c._queue))))
        out = []
        for _ in range(3):
            out.append((grads(m, x, y, c), c.saved()))
            c.step()
        for h in hs:
            h.remove()
        runs.append(out)
        assert after == [0, 0, 0]  # none left unencoded once the model's forward is done
        if queued:
            assert 0 < max(waiting) <= c.MAX_PENDING, waiting
        else:
            assert max(waiting) == 0
    for (g0, s0), (g1, s1) in zip(*runs):
        assert s0 == s1 and any(codec == "quant:mixed" for _, codec, _, _ in s0), s0
        assert all(torch.equal(a, b) for a, b in zip(g0, g1))
    c = at.compress("actnn:L3", m)
    c._queue_host = True
    a = torch.randn(4, 24, requires_grad=True)
    with c:
        h = a * 1.0
        s = m[0](h)           # layer 0 saves its input h, which waits in the queue
        assert len(c._queue) == 1
        h.add_(1.0)           # changes it before it is encoded
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            s.sum().backward()
