"""actc's policies behind PyTorch's saved-tensor hooks.

    c = actc.torch.compress("actnn:L3", model)
    for x, y in data:
        with c:
            loss = loss_fn(model(x), y)
            loss.backward()
        opt.step()
        c.step()

Inside ``with c:`` every floating tensor an operator saves for backward,
other than the model's parameters and buffers, is planned by actc's policy
and stored through its codec in a uint8 tensor; backward decodes it when it
needs it.  Boolean saves (a mask) are kept at 1 bit, integer saves (indices)
as they are, and statistics exactly: 0-D and 1-D saves, saves whose last
axis is 1 (a row's mean or scale) and a norm module's saves other than its
input.  The output an nn.ReLU saves is kept as its sign, 1 bit.  A storage
saved twice in a step is stored once.

Semantics of torch.autograd.graph.saved_tensors_hooks apply: only the
innermost pair of hooks is active, pack runs under no-grad, unpack may run
more than once (retain_graph), the payload lives as long as the graph.  With
hooks installed PyTorch skips its check for a saved tensor changed in place,
so this module checks ``_version`` itself and raises at unpack.

Layer scopes are the dotted module names of ``model`` (forward hooks); with a
model, saves made outside its modules (the loss, usually) are kept as the
loss's saves are in actc (fp32 under quant, actnn and gact: a float32,
bfloat16 or float16 save planned fp32 is kept as it is, not copied); the
sample axis is dim 0.  Tested with torch 1.13 (Debian 12's python3-torch)."""
import collections
import ctypes
import math
import threading
import weakref

import torch
import torch.nn as nn
import torch.nn.modules.module as _modules

from . import _lib
from .compact import SubspaceAdamW, compact  # noqa: F401  (actc.torch.compact, its optimizer)
from .core import Planner, check_device, codec_input, decode, encode_into, plan as codec_plan, sample_range_sq

# The layer name of saves made outside the model's modules.
OUTSIDE = "(outside)"

# Modules whose non-parameter floating saves have a known role.
_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_NORM = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm1d,
         nn.InstanceNorm2d, nn.InstanceNorm3d)


def _role_of(module):
    """The actc_save_role of what module saves (ROLE_UNKNOWN by default)."""
    r = _lib.SaveRole()
    r.linear = 1
    if module is None:
        r.role = _lib.ROLE_LOSS_IN
    elif isinstance(module, nn.Linear):
        r.role, r.fan_in = _lib.ROLE_LINEAR_IN, module.in_features
    elif isinstance(module, _CONV):
        k = module.kernel_size
        r.role = _lib.ROLE_CONV_IN
        r.kernel_h, r.kernel_w = k[-2] if len(k) > 1 else 1, k[-1]
        r.fan_in = module.in_channels // module.groups
        for s in k:
            r.fan_in *= s
    elif isinstance(module, _NORM):
        r.role, r.linear = _lib.ROLE_NORM_IN, 0
    else:
        r.role = _lib.ROLE_UNKNOWN
    return r


class _Kept:
    """A save kept as it is (a parameter, an integer tensor, statistics)."""
    __slots__ = ("tensor", "version")

    def __init__(self, t):
        self.tensor, self.version = t, t._version


class _Packed:
    """A save stored through a codec: the plan, the payload, and what
    unpack needs to give the tensor back and to check it.  A save whose
    plan waits for its ranges (compress's overlap) has `pending` set and
    no payload yet; one planned fp32 has no plan and the tensor itself as
    its payload."""
    __slots__ = ("plan", "payload", "shape", "dtype", "source", "version", "where", "pending", "__weakref__")


class _Pending:
    """A save queued until its per-sample ranges reach the host: the values
    to encode, the ranges' pinned copy and its event, the stream, what the
    planner is asked, and where its line of saved() goes."""
    __slots__ = ("t", "x", "xver", "ranges", "event", "stream", "scope", "index", "role", "step", "slot", "counted")


class compress:
    """Saved-tensor hooks that store every save through actc's `policy`.

    policy: a policy spec (actc.policies() lists them): none, bf16, quant:B,
        actnn:L0-L3 or actnn:X, gact:B or gact:fixB, division[:...], agoq,
        and the 4-bit formats nf4, fp4, e2m1 (with ,block=G and ,round=R).
        compact is actc.torch.compact; gact:CB1/CB2/CKPT are checkpointing,
        torch.utils.checkpoint's job: both are refused with that advice.
    model: the nn.Module whose modules name the layers (scopes, roles,
        parameters kept, gradient reports for actnn); required by the
        adaptive policies.
    seed: the random streams' seed (stochastic rounding).
    threads: the CPU threads of the hooks' encodes and decodes (default:
        torch.get_num_threads() at each save), set per call: the
        library's global setting is left as it is.
    adapt_interval: gact: steps between sensitivity measurements (GACT's
        default, 1000; the first at step 0, and within the first interval
        also at its halvings down to a sixteenth, e.g. steps 62, 125, 250
        and 500: actc_controller_measure_due, the engine's schedule).
    overlap: CUDA tensors under actnn, whose plans need each save's
        per-sample ranges on the host: True (default) queues the ranges'
        copy and plans and encodes the save once they have arrived (at a
        later save, when more than 8 wait, at the end of the model's
        forward, or when backward needs it), so the host does not wait for
        the GPU at each save; the waiting saves (at most 8) are held as they
        are meanwhile.  False: at the save, one synchronisation with the
        GPU each.  Same plans and bytes either way."""

    # Saves that may wait for their ranges (overlap): at most this many
    # tensors are held unencoded.
    MAX_PENDING = 8
    # Tests: queue CPU saves too (never ready before they are forced), so
    # the queue's logic runs without a GPU.
    _queue_host = False

    def __init__(self, policy="actnn:L3", model=None, seed=0, threads=None, adapt_interval=1000, overlap=True):
        self.planner = Planner(policy, seed)
        self.policy = self.planner.policy
        self.model = model
        if (self.planner.observes or self.planner.measures) and model is None:
            raise ValueError(f"actc: policy {self.policy} learns from the model's gradients: give model=")
        if adapt_interval < 1:
            raise ValueError("actc: adapt_interval must be at least 1")
        self.adapt_interval = adapt_interval
        self.threads = threads
        self.overlap = overlap
        self._queue = collections.deque()  # _Packed saves waiting for their ranges, oldest first
        self._lock = threading.Lock()
        self.step_count = 0
        self.stats = {}        # this step: scope -> {"saves", "stored", "fp32"}
        self.last_stats = {}   # the step before the last c.step()
        self._saves = []       # this step: (scope, codec, shape, stored bytes)
        self._scopes = []      # the modules running forward, innermost last
        self._names = {}
        self._params = set()
        self._indices = {}     # scope -> save numbers of this step (planned saves)
        self._shapes = {}      # (scope, index) -> per-sample shape (learning policies)
        self._dedup = {}
        self._input_shape = {}  # module -> the shape of its first input this step
        self._handles = []
        self._hooks = None
        self._depth = 0
        self._counting = True

    # ---- entering and leaving -------------------------------------------
    def __enter__(self):
        self._depth += 1
        if self._depth > 1:
            return self
        self._scopes = []
        self._dedup = {}
        if self.model is not None:
            self._install_module_hooks()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth > 0:
            return False
        try:
            if exc[0] is None:
                self._drain()
        finally:
            self._queue.clear()
            self._close_hooks(exc)
        return False

    def _close_hooks(self, exc):
        self._hooks.__exit__(*exc)
        self._hooks = None
        for h in self._handles:
            h.remove()
        self._handles = []
        self._dedup = {}

    def _install_module_hooks(self):
        self._names = {m: name for name, m in self.model.named_modules()}
        self._params = {t.data_ptr() for t in self.model.parameters()} | \
                       {t.data_ptr() for t in self.model.buffers() if t.numel()}
        # Two global hooks (for every module; those of other models are
        # passed over) rather than two per module: one registration each
        # per block, not hundreds.
        self._handles.append(_modules.register_module_forward_pre_hook(self._enter_module))
        self._handles.append(_modules.register_module_forward_hook(self._leave_module))

    def _enter_module(self, module, inputs):
        if module not in self._names:
            return
        self._scopes.append(module)
        if inputs and isinstance(inputs[0], torch.Tensor):
            self._input_shape[module] = tuple(inputs[0].shape)

    def _leave_module(self, module, inputs, output):
        if module not in self._names:
            return
        if self._scopes and self._scopes[-1] is module:
            self._scopes.pop()
        if module is self.model:
            # The model's forward is done: no save of it stays unencoded
            # into the loss and backward (one wait for the GPU per step).
            self._drain()
        if self.planner.observes and torch.is_grad_enabled() and isinstance(output, torch.Tensor) \
                and output.requires_grad and output.dim() >= 1:
            scope = self._names.get(module, "")
            indices = self._indices.get(scope)
            if indices:
                saves = list(indices)
                output.register_hook(lambda g, s=scope, i=saves: self._observe(s, i, g))

    def _observe(self, scope, indices, g):
        n = g.shape[0] if g.dim() >= 1 and g.shape[0] > 0 else 1
        v = g.detach().reshape(-1)
        if v.dtype != torch.float32:
            v = v.float()
        self.planner.observe(scope, indices, float(torch.dot(v, v)) / n)
        return None

    # ---- the hooks --------------------------------------------------------
    def _where(self):
        """(scope, module) of the save being made."""
        if self.model is None:
            return "", False
        if not self._scopes:
            return OUTSIDE, None  # outside the model: the loss
        m = self._scopes[-1]
        return self._names.get(m, ""), m

    def _is_param(self, t):
        if isinstance(t, nn.Parameter):
            return True
        if self.model is None:
            return t.is_leaf and t.requires_grad
        return t.data_ptr() in self._params

    # Autograd nodes of a copy or a view: a parameter seen through them is
    # still a parameter (autocast's cached bfloat16 weight, its transpose).
    _COPIES = {"ToCopyBackward0", "TBackward0", "TransposeBackward0", "ViewBackward0", "UnsafeViewBackward0",
               "PermuteBackward0", "ExpandBackward0", "CloneBackward0", "AliasBackward0", "ReshapeAliasBackward0"}

    def _is_param_copy(self, t):
        """t is a parameter through copies and views alone (autocast's
        weight casts): kept like the parameter, never quantized as if it
        were the layer's input."""
        fn = t.grad_fn
        for _ in range(6):
            if fn is None:
                return False
            name = type(fn).__name__
            if name == "AccumulateGrad":
                return self._is_param(fn.variable)
            if name not in self._COPIES:
                return False
            nxt = [f for f, _ in fn.next_functions if f is not None]
            if len(nxt) != 1:
                return False
            fn = nxt[0]
        return False

    def _pack(self, t):
        if t.dtype == torch.bool:
            return self._pack_codec(t, "mask")
        if not t.is_floating_point() or self._is_statistic(t) or self._is_param(t) or t.numel() == 0 \
                or self._is_param_copy(t):
            if t.is_floating_point() and t.dim() >= 2:
                check_device(t)  # a build without CUDA says so, not a silent pass
            kept = _Kept(t)
            if not self._is_param(t):
                self._count(self._where()[0], "kept", t,
                            t.numel() * t.element_size(), t.numel() * t.element_size())
            return kept
        scope, module = self._where()
        if isinstance(module, nn.ReLU):
            # relu saves its output and reads only its sign (result > 0):
            # a 1-bit mask gives backward the same values.
            return self._pack_codec(t, "mask")
        return self._pack_policy(t, scope, module)

    def _threads(self):
        return self.threads if self.threads else torch.get_num_threads()

    def _is_statistic(self, t):
        """0-D and 1-D saves, saves whose last axis is 1 (a row's mean or
        scale, broadcast), and a norm's saves other than its input: the
        engine keeps such statistics exact (ACTC_ROLE_STATS), and rounding
        them biases the gradient of every element they scale."""
        if t.dim() < 2 or t.shape[-1] == 1:
            return True
        if self._scopes and isinstance(self._scopes[-1], _NORM):
            return tuple(t.shape) != self._input_shape.get(self._scopes[-1])
        return False

    def _sample_shape(self, x, module):
        """The shape x is planned and encoded in: a linear layer's input
        flattened to rows for the product ([B*T, C] of a [B, T, C] input)
        keeps its samples on dim 0, so the policy sees B samples, not B*T."""
        if isinstance(module, nn.Linear) and x.dim() == 2:
            shape = self._input_shape.get(module)
            if shape and len(shape) > 2 and shape[-1] == x.shape[-1] and x.shape[0] % shape[0] == 0 \
                    and math.prod(shape) == x.numel():
                return shape
        return tuple(x.shape)

    def _dedup_key(self, t, kind):
        return (kind, t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t._version)

    def _lookup(self, key):
        hit = self._dedup.get(key)
        if hit is None:
            return None
        src, packed = hit[0](), hit[1]()
        if src is None or packed is None:
            del self._dedup[key]
            return None
        return packed

    def _remember(self, key, t, packed):
        self._dedup[key] = (weakref.ref(t), weakref.ref(packed))

    def _new_packed(self, t, p, payload, where):
        k = _Packed()
        k.plan, k.payload, k.shape, k.dtype = p, payload, t.shape, t.dtype
        k.source, k.version, k.where, k.pending = weakref.ref(t), t._version, where, None
        return k

    def _pack_codec(self, t, codec):
        key = self._dedup_key(t, codec)
        hit = self._lookup(key)
        if hit is not None:
            return hit
        x = codec_input(t)
        p = codec_plan(codec, tuple(x.shape))
        p.threads = self._threads()
        k = self._new_packed(t, p, encode_into(p, x), self._where()[0])
        self._count(k.where, codec, t, p.bytes, t.numel() * 4)
        self._remember(key, t, k)
        return k

    def _pack_policy(self, t, scope, module):
        key = self._dedup_key(t, "act")
        hit = self._lookup(key)
        if hit is not None:
            return hit
        x = codec_input(t)
        shape = self._sample_shape(x, module)
        if shape != tuple(x.shape):
            x = x.view(shape)
        indices = self._indices.setdefault(scope, [])
        index = len(indices)
        if self.planner.observes or self.planner.measures:
            self._check_shape(scope, index, x)
        role = _lib.SaveRole() if module is False else _role_of(module)
        indices.append(index)
        k = self._new_packed(t, None, None, scope)
        w = _Pending()
        w.t, w.x, w.xver, w.scope, w.index, w.role, w.step = t.detach(), x, x._version, scope, index, role, \
            self.step_count
        w.ranges = w.event = w.stream = None
        w.counted, w.slot = self._counting, len(self._saves)
        if self._counting:
            self._saves.append(None)  # this save's line, filled when it is encoded
        if self.planner.needs_ranges(role) and self.overlap and (x.is_cuda or self._queue_host):
            if x.is_cuda:
                # The ranges on their way to the host; planned once there.
                w.stream = torch.cuda.current_stream(x.device)
                r = sample_range_sq(x)
                w.ranges = torch.empty(r.shape, dtype=r.dtype, pin_memory=True)
                w.ranges.copy_(r, non_blocking=True)
                w.event = torch.cuda.Event()
                w.event.record(w.stream)
            k.pending = w
            self._queue.append(k)
            self._remember(key, t, k)
            self._drain(self.MAX_PENDING)
            return k
        self._finish(k, w)
        self._remember(key, t, k)
        return k

    def _finish(self, k, w):
        """Plan and encode save k from what w kept of it (k.pending cleared
        last: another thread's unpack of k waits in _drain until then)."""
        try:
            self._plan_encode(k, w)
        finally:
            k.pending = None

    def _plan_encode(self, k, w):
        if w.x._version != w.xver:
            # Changed in place while it waited: what forward saved is gone,
            # and unpack says so (no payload).
            return
        ranges = None
        if w.event is not None:
            w.event.synchronize()
            ranges = w.ranges
        p, bits = self.planner.plan(w.x, w.scope, w.index, w.role, w.step, ranges)
        if p.codec == b"fp32" and w.t.element_size() <= 4:
            # The tensor itself (as a kept save) instead of a float32 copy:
            # the same values, in no more bytes (float64 is narrowed).
            k.payload, stored = w.t, w.t.numel() * w.t.element_size()
        else:
            p.threads = self._threads()
            k.plan = p
            k.payload = encode_into(p, w.x, ctypes.cast(bits, ctypes.c_void_p) if bits is not None else None,
                                    w.stream)
            stored = p.bytes
        if w.counted:
            self._count(w.scope, p.codec.decode(), w.x, stored, w.x.numel() * 4, slot=w.slot)

    def _drain(self, keep=0):
        """Plan and encode the queued saves whose ranges have arrived, and
        the oldest ones (waiting for theirs) until at most `keep` wait."""
        q = self._queue
        with self._lock:  # backward may unpack on several threads (one per device)
            while q and (len(q) > keep or (q[0].pending.event is not None and q[0].pending.event.query())):
                k = q.popleft()
                self._finish(k, k.pending)

    def _check_shape(self, scope, index, x):
        per_sample = tuple(x.shape[1:])
        seen = self._shapes.setdefault((scope, index), per_sample)
        if seen != per_sample:
            raise _lib.ActcError(
                f"actc: {self.policy} knows tensors by their order within a step, and save {index} of layer "
                f"'{scope}' had per-sample shape {list(seen)} before and {list(per_sample)} now: the model's "
                "saves must repeat from step to step (the batch size may change)")

    def _unpack(self, k):
        if isinstance(k, _Kept):
            if k.tensor._version != k.version:
                raise RuntimeError(self._changed_message("", k.version, k.tensor._version))
            return k.tensor
        if k.pending is not None:
            self._drain()
            if k.pending is not None:
                raise RuntimeError(f"actc: a tensor of layer '{k.where}' saved for backward was never encoded: the "
                                   "`with` block that saved it ended with an exception")
        src = k.source()
        if k.payload is None or (src is not None and src._version != k.version):
            now = src._version if src is not None else "another"
            raise RuntimeError(self._changed_message(k.where, k.version, now))
        if k.plan is None:  # planned fp32: kept as it is (its version is t's)
            if k.payload._version != k.version:
                raise RuntimeError(self._changed_message(k.where, k.version, k.payload._version))
            return k.payload
        y = decode(k.plan, k.payload, torch.float32 if k.dtype == torch.bool else k.dtype)
        if k.shape != y.shape:
            y = y.view(k.shape)
        return y.bool() if k.dtype == torch.bool else y

    @staticmethod
    def _changed_message(where, before, now):
        layer = f" of layer '{where}'" if where else ""
        return (f"actc: a tensor{layer} saved for backward was modified by an inplace operation (version "
                f"{before} when saved, {now} now); backward would not compute the gradient of what forward did")

    # ---- accounting -------------------------------------------------------
    def _count(self, scope, codec, t, stored, fp32, slot=None):
        if not self._counting and slot is None:
            return
        s = self.stats.setdefault(scope, {"saves": 0, "stored": 0, "fp32": 0})
        s["saves"] += 1
        s["stored"] += stored
        s["fp32"] += fp32
        line = (scope, codec, tuple(t.shape), stored)
        if slot is None:
            self._saves.append(line)
        else:
            self._saves[slot] = line

    def saved(self):
        """This step's saves so far: (layer, codec, shape, stored bytes)."""
        self._drain()
        return [s for s in self._saves if s is not None]  # None: changed in place before it was encoded

    def report(self):
        """The saved context per layer, stored against fp32 (this step's,
        or the last step's when this one has saved nothing yet)."""
        self._drain()
        stats = self.stats or self.last_stats
        lines = [f"{'layer':<32} {'saves':>5} {'stored':>12} {'fp32':>12} {'ratio':>7}"]
        tot = {"saves": 0, "stored": 0, "fp32": 0}
        for scope, s in stats.items():
            for k in tot:
                tot[k] += s[k]
            ratio = s["fp32"] / s["stored"] if s["stored"] else float("inf")
            lines.append(f"{scope or '(model)':<32} {s['saves']:>5} {s['stored']:>12} {s['fp32']:>12} {ratio:>6.1f}x")
        ratio = tot["fp32"] / tot["stored"] if tot["stored"] else float("inf")
        lines.append(f"{'total (' + self.policy + ')':<32} {tot['saves']:>5} {tot['stored']:>12} {tot['fp32']:>12} "
                     f"{ratio:>6.1f}x")
        return "\n".join(lines)

    def totals(self):
        """(stored, fp32) bytes of this step's saves (or the last step's)."""
        self._drain()
        stats = self.stats or self.last_stats
        return sum(s["stored"] for s in stats.values()), sum(s["fp32"] for s in stats.values())

    # ---- steps --------------------------------------------------------------
    def step(self, closure=None):
        """End of one training iteration: the adaptive policies learn (actnn
        re-plans from the gradients backward reported; gact measures its
        sensitivities when due, running `closure`, a function that computes
        the loss of the current batch, L + 1 more times), then the next
        step begins."""
        self._drain()
        if self.planner.observes:
            self.planner.replan()
        if self.planner.measures and _lib.lib.actc_controller_measure_due(self.step_count, self.adapt_interval):
            if closure is None:
                raise ValueError(f"actc: {self.policy} measures its sensitivities now (step {self.step_count}; "
                                 f"adapt_interval {self.adapt_interval}): call c.step(closure) with a function "
                                 "that returns the loss of the current batch")
            self._measure(closure)
        self.step_count += 1
        self.last_stats, self.stats = self.stats, {}
        self._saves = []
        self._indices = {}
        self._dedup = {}

    def _measure(self, closure):
        """GACT's Algorithm 1 on the closure's batch: a reference pass and
        one per saved tensor with that tensor re-rounded, the same random
        state (dropout) and the same buffers (batch norm) in every pass."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        buffers = [b.detach().clone() for b in self.model.buffers()]
        counting, self._counting = self._counting, False

        def restore_rng():
            torch.set_rng_state(rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state_all(cuda_rng)

        def grads():
            restore_rng()
            self._indices, self._dedup = {}, {}
            with self, torch.enable_grad():
                loss = closure()
                g = torch.autograd.grad(loss, params, allow_unused=True)
            with torch.no_grad():
                for b, saved in zip(self.model.buffers(), buffers):
                    b.copy_(saved)
            return [x.detach().double() if x is not None else torch.zeros(p.shape, dtype=torch.float64, device=p.device)
                    for x, p in zip(g, params)]

        self.planner.measure_begin()
        try:
            g0 = grads()
            diffs = []
            for l in range(self.planner.measure_count()):
                self.planner.measure_perturb(l)
                gl = grads()
                diffs.append(float(sum((a - b).pow(2).sum() for a, b in zip(g0, gl))))
            self.planner.measure_commit(diffs)
        except BaseException:
            self.planner.measure_cancel()
            raise
        finally:
            self._counting = counting
            restore_rng()
