"""CompAct for PyTorch: chosen nn.Linear layers save a random projection
z = x P of their input (rank r) instead of x, and backward returns the
weight gradient dy^T z P^T, unbiased (E[P P^T] = I), for any torch
optimizer.  P is actc's (actc_project, actc_project_back): never stored,
regenerated from its key, with the engine's seed rule (a key from the seed,
the seed epoch step // gap and the layer), so the same seed gives the same
matrices.  z is what autograd saves, so under actc.torch.compress it is
compressed by the policy too (CompAct composed with a codec policy)."""
import ctypes
import fnmatch

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._lib import ActcError, check, lib

_HASH_START = 0xCBF29CE484222325
_COMPACT_SALT = 0x434F4D50414354  # the engine's ("COMPACT")


class Projection(ctypes.Structure):
    """actc_projection."""
    _fields_ = [("n", ctypes.c_int), ("rank", ctypes.c_int), ("key", ctypes.c_uint64), ("kind", ctypes.c_int),
                ("density", ctypes.c_float), ("scale", ctypes.c_float), ("age", ctypes.c_uint32),
                ("reset_state", ctypes.c_int)]


def _layer_key(name):
    data = name.encode()
    return lib.actc_hash_bytes(_HASH_START, data, len(data))


class _ProjectedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, proj):
        y = F.linear(x, weight, bias)
        rows = x.numel() // proj.n
        x2 = x.detach().reshape(rows, proj.n).to(torch.float32).contiguous()
        z = torch.empty(rows, proj.rank, dtype=torch.float32)
        check(lib.actc_project(ctypes.addressof(proj), x2.data_ptr(), rows, z.data_ptr()), "compact")
        ctx.save_for_backward(z, weight)
        ctx.proj, ctx.x_shape, ctx.x_dtype, ctx.has_bias = proj, x.shape, x.dtype, bias is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        z, weight = ctx.saved_tensors
        proj = ctx.proj
        dy2 = dy.reshape(-1, weight.shape[0])
        dx = (dy @ weight).reshape(ctx.x_shape) if ctx.needs_input_grad[0] else None
        dw = None
        if ctx.needs_input_grad[1]:
            u = (dy2.to(torch.float32).t() @ z).contiguous()  # out x rank
            dw = torch.zeros(weight.shape, dtype=torch.float32)
            check(lib.actc_project_back(ctypes.addressof(proj), u.data_ptr(), weight.shape[0], 1.0, dw.data_ptr()),
                  "compact")
            dw = dw.to(weight.dtype)
        db = dy2.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db, None


class compact:
    """Make the nn.Linear layers of `model` that `layers` selects (fnmatch
    globs over dotted module names, '|'-separated or a list; default: every
    nn.Linear) save x P instead of x.

    r: the rank, a fraction of the layer's input width (0 < r < 1) or a
        number of columns (>= 1).
    gap: steps per projection (a new P every gap calls of step()); None: one
        P for good.
    seed: the projections' seed.  sparse: Achlioptas' sparse signs instead
        of Gaussian entries (density 1/3).
    Call step() once per training iteration; remove() restores the layers."""

    def __init__(self, model, r=0.25, gap=50, seed=0, layers=None, sparse=False):
        if not (r > 0):
            raise ValueError("actc.torch.compact: r must be positive (a fraction below 1, or a rank)")
        if gap is not None and gap < 1:
            raise ValueError("actc.torch.compact: gap must be at least 1 (or None)")
        globs = layers.split("|") if isinstance(layers, str) else layers
        self.r, self.gap, self.seed, self.sparse = r, gap, seed, sparse
        self.step_count = 0
        self.layers = {}
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear) and (globs is None or any(fnmatch.fnmatchcase(name, g) for g in globs)):
                n = m.in_features
                rank = int(round(r * n)) if r < 1 else int(r)
                if not 1 <= rank <= n:
                    raise ActcError(f"actc.torch.compact: rank {rank} for layer '{name}' of width {n} "
                                    f"(r={r}: give a fraction, or at most {n})")
                self.layers[name] = (m, rank)
        if not self.layers:
            raise ActcError("actc.torch.compact: no nn.Linear layer matches "
                            + ("|".join(globs) if globs else "(the model has none)"))
        for name, (m, rank) in self.layers.items():
            m.forward = self._forward_of(name, m, rank)

    def _projection(self, name, n, rank):
        p = Projection()
        p.n, p.rank = n, rank
        epoch = self.step_count // self.gap if self.gap else 0
        p.key = lib.actc_rng_key(self.seed ^ _COMPACT_SALT, epoch, _layer_key(name))
        p.kind = 1 if self.sparse else 0
        p.density = 1.0 / 3.0 if self.sparse else 0.0
        p.scale = 1.0
        p.age = self.step_count % self.gap if self.gap else self.step_count
        return p

    def _forward_of(self, name, m, rank):
        def forward(x):
            if not torch.is_grad_enabled() or not m.weight.requires_grad:
                return F.linear(x, m.weight, m.bias)
            if x.device.type != "cpu":
                raise ActcError("actc.torch.compact: CUDA tensors need the CUDA build of actc (not available yet)")
            return _ProjectedLinear.apply(x, m.weight, m.bias, self._projection(name, m.in_features, rank))
        return forward

    def step(self):
        """One training iteration done (a new P every gap steps)."""
        self.step_count += 1

    def remove(self):
        """Give the layers their own forward back."""
        for m, _ in self.layers.values():
            if "forward" in m.__dict__:
                del m.forward
        self.layers = {}
