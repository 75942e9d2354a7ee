"""CompAct for PyTorch: chosen nn.Linear layers save a random projection
z = x P of their input (rank r) instead of x, and backward returns the
weight gradient dy^T z P^T, unbiased (E[P P^T] = I), for any torch
optimizer.  P is actc's (actc_project, actc_project_back): never stored,
regenerated from its key, with the engine's seed rule (a key from the seed,
the seed epoch step // gap and the layer), so the same seed gives the same
matrices.  z is what autograd saves, so under actc.torch.compress it is
compressed by the policy too (CompAct composed with a codec policy).

With subspace=True the layers keep CompAct's whole scheme (Algorithms 2-3):
backward leaves the weight gradient as the low-rank factor dy^T z (out x r)
and compact.optimizer() steps it in the subspace, Adam moments out x r,
then back with the same P: w -= lr * scale * d P^T, as the engine's
optimizers step a low-rank gradient (src/optim/optim.c)."""
import ctypes
import fnmatch
import math

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
    def forward(ctx, x, weight, bias, proj, sink):
        y = F.linear(x, weight, bias)
        rows = x.numel() // proj.n
        x2 = x.detach().reshape(rows, proj.n).to(torch.float32).contiguous()
        z = torch.empty(rows, proj.rank, dtype=torch.float32)
        check(lib.actc_project(ctypes.addressof(proj), x2.data_ptr(), rows, z.data_ptr()), "compact")
        ctx.save_for_backward(z, weight)
        ctx.proj, ctx.x_shape, ctx.x_dtype, ctx.has_bias = proj, x.shape, x.dtype, bias is not None
        ctx.sink = sink
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
        if ctx.needs_input_grad[1] and ctx.sink is not None:
            ctx.sink._add_factor(weight, u, proj)  # stepped in the subspace
        elif ctx.needs_input_grad[1]:
            dw = torch.zeros(weight.shape, dtype=torch.float32)
            check(lib.actc_project_back(ctypes.addressof(proj), u.data_ptr(), weight.shape[0], 1.0, dw.data_ptr()),
                  "compact")
            dw = dw.to(weight.dtype)
        db = dy2.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db, None, None


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
    subspace: keep the chosen weights' gradients as their low-rank factors
        dy^T (x P) (out x r, in self.factors, not in .grad) for
        self.optimizer(), which keeps their Adam moments out x r too
        (CompAct's optimizer; False: dense gradients for any optimizer).
    Call step() once per training iteration; remove() restores the layers."""

    def __init__(self, model, r=0.25, gap=50, seed=0, layers=None, sparse=False, subspace=False):
        if not (r > 0):
            raise ValueError("actc.torch.compact: r must be positive (a fraction below 1, or a rank)")
        if gap is not None and gap < 1:
            raise ValueError("actc.torch.compact: gap must be at least 1 (or None)")
        globs = layers.split("|") if isinstance(layers, str) else layers
        self.r, self.gap, self.seed, self.sparse, self.subspace = r, gap, seed, sparse, subspace
        self.step_count = 0
        self.factors = {}  # weight -> (factor out x r, its projection): subspace gradients
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
            return _ProjectedLinear.apply(x, m.weight, m.bias, self._projection(name, m.in_features, rank),
                                          self if self.subspace else None)
        return forward

    # ---- subspace gradients (subspace=True) ---------------------------------
    def _add_factor(self, weight, u, proj):
        """Backward's factor for weight, summed over the backward passes of
        one update (micro-batches), which must share the projection."""
        held = self.factors.get(weight)
        if held is None:
            self.factors[weight] = (u, proj)
        elif bytes(held[1]) != bytes(proj):
            raise ActcError("actc.torch.compact: the backward passes of one update used different projections "
                            "(step() was called between them): call step() once per update, after the optimizer")
        else:
            held[0].add_(u)

    def clip_grad_norm_(self, parameters, max_norm):
        """torch.nn.utils.clip_grad_norm_ over parameters' dense gradients
        and the subspace factors (each counted by its own norm, as the
        engine's clipping counts a low-rank gradient): scales both when the
        total norm exceeds max_norm, and returns the total norm."""
        dense = [p.grad for p in parameters if p.grad is not None]
        low = [u for u, _ in self.factors.values()]
        total = float(torch.sqrt(sum((g.detach().double().pow(2).sum() for g in dense + low),
                                     torch.zeros((), dtype=torch.float64))))
        if total > max_norm:
            for g in dense + low:
                g.mul_(max_norm / (total + 1e-6))
        return torch.tensor(total)

    def optimizer(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, scale=1.0,
                  reset_state=False):
        """AdamW over params, the chosen layers' weights stepped in their
        subspace (needs subspace=True): see SubspaceAdamW."""
        if not self.subspace:
            raise ActcError("actc.torch.compact: optimizer() steps subspace gradients: create the compact with "
                            "subspace=True (or use any torch optimizer on the dense gradients)")
        return SubspaceAdamW(params, self, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, scale=scale,
                             reset_state=reset_state)

    def step(self):
        """One training iteration done (a new P every gap steps)."""
        self.step_count += 1

    def remove(self):
        """Give the layers their own forward back."""
        for m, _ in self.layers.values():
            if "forward" in m.__dict__:
                del m.forward
        self.layers = {}
        self.factors = {}


class SubspaceAdamW(torch.optim.Optimizer):
    """AdamW (torch.optim.AdamW's arithmetic) whose low-rank gradients -
    the factors F (out x r) a subspace compact left for the chosen weights -
    are stepped in their subspace (CompAct's Algorithm 3): moments m, v of
    F's shape, d = m_hat / (sqrt(v_hat) + eps), decoupled decay, then
    w -= lr * scale * d P^T with the P of the step that made F.  The moments
    carry over when P changes (CompAct's code), or restart with a new P
    when reset_state is true (bias correction counted from there).  Other
    parameters, and compact weights without a factor, take the dense step.
    Make it with compact.optimizer()."""

    def __init__(self, params, compact_, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, scale=1.0,
                 reset_state=False):
        if not (lr >= 0 and eps >= 0 and weight_decay >= 0 and scale > 0 and 0 <= betas[0] < 1
                and 0 <= betas[1] < 1):
            raise ValueError("actc SubspaceAdamW: lr, eps, weight_decay >= 0, scale > 0, betas in [0, 1)")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, scale=scale,
                                      reset_state=reset_state))
        self.compact = compact_

    def zero_grad(self, set_to_none=True):
        super().zero_grad(set_to_none=set_to_none)
        for group in self.param_groups:
            for p in group["params"]:
                self.compact.factors.pop(p, None)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                held = self.compact.factors.pop(p, None)
                if held is None and p.grad is None:
                    continue
                if held is not None and p.grad is not None:
                    raise ActcError("actc SubspaceAdamW: a parameter has both a subspace and a dense gradient "
                                    "(a compact layer's weight used elsewhere too)")
                g, proj = held if held is not None else (p.grad, None)
                st = self.state[p]
                if not st or st["m"].shape != g.shape or (proj is not None and group["reset_state"]
                                                          and proj.age == 0):
                    st["step"], st["m"], st["v"] = 0, torch.zeros_like(g), torch.zeros_like(g)
                st["step"] += 1
                m, v, t = st["m"], st["v"], st["step"]
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                d = (m / (1 - b1 ** t)) / (v.sqrt() / math.sqrt(1 - b2 ** t) + eps)
                p.mul_(1 - lr * wd)
                if proj is None:
                    p.add_(d, alpha=-lr)
                    continue
                # d P^T into a dense buffer, added with torch so that p's
                # version counter moves as with any in-place update.
                back = torch.zeros(p.shape, dtype=torch.float32)
                check(lib.actc_project_back(ctypes.addressof(proj), d.contiguous().data_ptr(), p.shape[0], 1.0,
                                            back.data_ptr()), "SubspaceAdamW")
                p.add_(back.to(p.dtype), alpha=-lr * group["scale"])
        return loss
