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
