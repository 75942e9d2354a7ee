"""The CUDA codecs through the package (tests/gpu/run.sh runs these on a
GPU; without one, or with a library built without CUDA, they are skipped
and test_hooks checks the refusal): payloads identical to the CPU's, the
hooks on CUDA tensors in float32 and under bfloat16 autocast, torch's
allocator seeing the payloads."""
import pytest
import torch

import actc
import actc.core
import actc.torch
from actc._lib import lib

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() and lib.actc_cuda_built()),
                                reason="needs a GPU and the CUDA build of actc")


@pytest.mark.parametrize("spec", ["quant:2", "quant:8", "quant:3,group=64", "nf4", "fp4,round=stochastic",
                                  "e2m1", "dyn8", "division", "division:lfc-only", "mask", "bf16", "fp32"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_payload_identical_to_cpu(spec, dtype):
    torch.manual_seed(0)
    x = (torch.randn(6, 3, 17, 19) * 3).to(dtype)
    pc, cpu = actc.core.encode(x.float(), spec, key=11)
    pg, gpu = actc.core.encode(x.cuda(), spec, key=11)
    assert gpu.is_cuda and pg.bytes == pc.bytes
    assert torch.equal(gpu.cpu(), cpu), spec
    yc = actc.core.decode(pc, cpu)
    yg = actc.core.decode(pg, gpu, dtype)
    assert yg.dtype == dtype and yg.is_cuda
    assert torch.equal(yg.cpu(), yc.to(dtype)), spec


def test_codecs_without_kernels_refused():
    for spec in ("division:hfc-only", "quant:2,per-tensor"):
        with pytest.raises(actc.ActcError, match="no CUDA kernels"):
            actc.core.encode(torch.randn(4, 8, 16, 16, device="cuda"), spec)


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 2048),
                               torch.nn.GELU(), torch.nn.Linear(2048, 10)).cuda()


@pytest.mark.parametrize("policy", ["quant:8", "actnn:L3", "gact:4", "nf4", "division"])
def test_hooks_on_gpu_close_to_fp32(policy):
    torch.manual_seed(1)
    model = _mlp()
    x, y = torch.randn(64, 512, device="cuda"), torch.randint(0, 10, (64,), device="cuda")
    torch.nn.functional.cross_entropy(model(x), y).backward()
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with actc.torch.compress(policy, model) as c:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    stored, fp32 = c.totals()
    assert 0 < stored < fp32
    for p, r in zip(model.parameters(), ref):
        assert p.grad.is_cuda
        rel = float((p.grad - r).norm() / r.norm())
        assert rel < (0.02 if policy == "quant:8" else 0.5), (policy, rel)


def test_bf16_autocast_and_allocator():
    torch.manual_seed(2)
    model = _mlp()
    x, y = torch.randn(256, 512, device="cuda"), torch.randint(0, 10, (256,), device="cuda")

    def step(hooks):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if hooks:
                with actc.torch.compress("actnn:L3", model) as c:
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    loss.backward()
                assert any(codec.startswith("quant") for _, codec, _, _ in c.saved())
            else:
                torch.nn.functional.cross_entropy(model(x), y).backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    plain, hooked = step(False), step(True)
    assert hooked < plain, (hooked, plain)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_ranges_bit_for_bit_and_same_widths():
    """ActNN's per-sample ranges computed on the GPU (actc_cuda_range_sq)
    are the planner's own from the values, bit for bit, in every dtype, and
    plan the same widths."""
    import ctypes
    from actc._lib import CodecPlan, SaveQuery, ROLE_LINEAR_IN, check
    torch.manual_seed(3)
    x = torch.randn(8, 3, 17, 19) * torch.arange(1, 9, dtype=torch.float32).view(8, 1, 1, 1)
    x[2, 0, 0, :5] = float("nan")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        xh = x.to(dtype).float()
        r = actc.core.sample_range_sq(x.to(dtype).cuda())
        assert r.dtype == torch.float64 and r.is_cuda and r.shape == (8,)
        widths = []
        for ranges in (None, r.cpu()):
            p = actc.core.Planner("actnn:L3")
            shape = (ctypes.c_int * 4)(*x.shape)
            q = SaveQuery()
            q.scope, q.index, q.ndim, q.shape, q.step = b"l", 0, 4, shape, 0
            q.role.role = ROLE_LINEAR_IN
            if ranges is None:
                q.data = xh.data_ptr()
            else:
                q.sample_range_sq = ctypes.cast(ranges.data_ptr(), ctypes.POINTER(ctypes.c_double))
            plan, bits = CodecPlan(), (ctypes.c_uint8 * 8)()
            check(lib.actc_planner_plan(p._h, ctypes.byref(q), ctypes.byref(plan), bits))
            widths.append(list(bits))
        assert widths[0] == widths[1] and len(set(widths[0])) > 1, (dtype, widths)
        # The values themselves: the planner's order, so the same doubles.
        v = xh.view(8, -1)
        for n in range(8):
            acc = [0.0] * 32
            for g in range((v.shape[1] + 255) // 256):
                piece = v[n, 256 * g:256 * (g + 1)]
                piece = piece[~torch.isnan(piece)]
                if piece.numel():
                    d = float(piece.max()) - float(piece.min())
                    acc[g % 32] += d * d
            w = 16
            while w:
                for lane in range(w):
                    acc[lane] += acc[lane + w]
                w //= 2
            assert float(r[n]) == acc[0], (dtype, n)


def test_overlap_same_as_waiting():
    """actnn on CUDA tensors: planning once the ranges arrive (overlap, the
    default) gives the gradients and saved() lines of planning at each
    save (overlap=False), step after step."""
    torch.manual_seed(5)
    model = _mlp()
    x, y = torch.randn(64, 512, device="cuda"), torch.randint(0, 10, (64,), device="cuda")
    runs = []
    for overlap in (False, True):
        c = actc.torch.compress("actnn:L3", model, seed=2, overlap=overlap)
        out = []
        for _ in range(3):
            model.zero_grad()
            with c:
                torch.nn.functional.cross_entropy(model(x), y).backward()
            out.append(([p.grad.clone() for p in model.parameters()], c.saved()))
            c.step()
        runs.append(out)
    for (g0, s0), (g1, s1) in zip(*runs):
        assert s0 == s1 and any(codec == "quant:mixed" for _, codec, _, _ in s0), s0
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(g0, g1))
