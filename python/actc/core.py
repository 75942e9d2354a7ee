"""The codecs and the planner on torch tensors: plans from the library,
payloads in uint8 tensors the package allocates (with torch, on the
tensor's device, so torch's caching allocator and max_memory_allocated see
them), values through ``data_ptr()``.  CPU tensors go through
actc_codec_encode/decode in float32; CUDA tensors through
actc_cuda_encode/decode on torch's current stream, in their own dtype
(float32, bfloat16 or float16), with the same payload bytes.  The hooks
(actc.torch) and CompAct build on these."""
import ctypes

import torch

from ._lib import ROLE_LOSS_IN, ActcError, CodecPlan, SaveQuery, check, lib, library_path, raise_last

_FLOAT_TYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _shape_array(shape):
    return (ctypes.c_int * max(1, len(shape)))(*shape)


# The dtypes the CUDA codecs read and write (actc_dtype).
_CUDA_DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


def check_device(t):
    """Refuse a tensor on a device the library has no codecs for."""
    if t.device.type == "cpu":
        return
    if t.device.type != "cuda":
        raise ActcError(f"actc: a tensor on {t.device} cannot be compressed: actc has CPU and CUDA codecs")
    if not lib.actc_cuda_built():
        raise ActcError(f"actc: a tensor on {t.device} cannot be compressed by {library_path}: compressing "
                        "CUDA tensors needs the CUDA build of actc (configure with -DACTC_WITH_CUDA=ON where "
                        "nvcc is installed)")


def codec_input(t):
    """t's values as a contiguous tensor for the codecs: float32 on the CPU
    (t itself when it is one already); on a GPU float32, bfloat16 or
    float16 as t is (others become float32), aligned to its element.
    Refuses what the codecs cannot take."""
    check_device(t)
    if t.dtype not in _FLOAT_TYPES and t.dtype != torch.bool:
        raise ActcError(f"actc: the codecs take floating or boolean tensors, not {t.dtype}")
    if t.dim() > 5:
        raise ActcError(f"actc: the codecs take at most 5 dimensions, not {t.dim()} ({list(t.shape)})")
    x = t.detach()
    if x.is_cuda:
        if x.dtype not in _CUDA_DTYPES:
            x = x.to(torch.float16 if x.dtype == torch.bool else torch.float32)
        x = x.contiguous()
        return x if x.data_ptr() % x.element_size() == 0 else x.clone()
    if x.dtype != torch.float32:
        x = x.to(torch.float32)
    return x.contiguous()


def _stream(t):
    return ctypes.c_void_p(torch.cuda.current_stream(t.device).cuda_stream)


def plan(codec, shape, key=0, sample_bits=None):
    """The plan of codec spec `codec` ("quant:2", "nf4,block=64", ...) for a
    tensor of `shape`: plan.bytes is the payload's size."""
    p = CodecPlan()
    bits = None
    if sample_bits is not None:
        bits = (ctypes.c_uint8 * len(sample_bits))(*sample_bits)
    check(lib.actc_codec_plan_make(codec.encode(), len(shape), _shape_array(shape), key,
                                   ctypes.cast(bits, ctypes.c_void_p) if bits is not None else None,
                                   ctypes.byref(p)))
    return p


def encode_into(p, x, sample_bits=None, stream=None):
    """Encode contiguous x (codec_input's) with plan p into a new uint8
    tensor on x's device (CUDA: on `stream`, torch's current one by
    default)."""
    if x.is_cuda and stream is not None:
        with torch.cuda.stream(stream):
            return encode_into(p, x, sample_bits)
    out = torch.empty(p.bytes, dtype=torch.uint8, device=x.device)
    if x.is_cuda:
        check(lib.actc_cuda_encode(ctypes.byref(p), x.data_ptr(), _CUDA_DTYPES[x.dtype], sample_bits,
                                   out.data_ptr(), p.bytes, _stream(x)), "encode")
    else:
        check(lib.actc_codec_encode(ctypes.byref(p), x.data_ptr(), sample_bits, out.data_ptr(), p.bytes),
              "encode")
    return out


def decode(p, payload, dtype=torch.float32):
    """The values of a payload, as a new tensor of the plan's shape on the
    payload's device."""
    shape = tuple(p.shape[:p.ndim])
    if payload.is_cuda:
        direct = dtype in _CUDA_DTYPES
        y = torch.empty(shape, dtype=dtype if direct else torch.float32, device=payload.device)
        check(lib.actc_cuda_decode(ctypes.byref(p), payload.data_ptr(), payload.numel(), y.data_ptr(),
                                   _CUDA_DTYPES[y.dtype], _stream(payload)), "decode")
        return y if direct else y.to(dtype)
    y = torch.empty(shape, dtype=torch.float32)
    check(lib.actc_codec_decode(ctypes.byref(p), payload.data_ptr(), payload.numel(), y.data_ptr()), "decode")
    return y if dtype == torch.float32 else y.to(dtype)


def sample_range_sq(x):
    """ActNN's per-sample ranges of CUDA tensor x (codec_input's; samples
    on dim 0), what the planner reads from a host tensor's values itself:
    the sum over each sample's groups of 256 elements of (max - min)^2,
    NaNs ignored, bit for bit the planner's (actc_cuda_range_sq, queued on
    torch's current stream).  float64 on x's device, one value per
    sample."""
    n = x.shape[0] if x.dim() >= 2 else 1
    d = x.numel() // max(n, 1)
    out = torch.empty(lib.actc_cuda_range_sq_len(n, d), dtype=torch.float64, device=x.device)
    check(lib.actc_cuda_range_sq(x.data_ptr(), _CUDA_DTYPES[x.dtype], n, d, out.data_ptr(), out.numel(),
                                 _stream(x)), "ranges")
    return out[:n]


def encode(t, codec, key=0):
    """(plan, payload) of tensor t through codec spec `codec`: the public
    codec API on torch tensors."""
    x = codec_input(t)
    p = plan(codec, tuple(x.shape), key)
    return p, encode_into(p, x)


class Planner:
    """A policy without the engine (actc_planner_*): the codec plan of each
    save, and the learning of the adaptive policies."""

    def __init__(self, policy, seed=0):
        h = ctypes.c_void_p()
        check(lib.actc_planner_new(policy.encode(), seed, ctypes.byref(h)))
        self._h = h
        self.policy = lib.actc_planner_policy(h).decode()
        self.observes = bool(lib.actc_planner_observes(h))
        self.measures = bool(lib.actc_planner_measures(h))

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            lib.actc_planner_free(h)
            self._h = None

    def plan(self, x, scope, index, role, step, ranges=None):
        """(plan, sample_bits) for contiguous x (codec_input's); sample_bits is a
        ctypes array when the plan uses per-sample widths, else None.
        ranges: for a CUDA x under an observing policy, its per-sample
        ranges on the host (sample_range_sq's, float64, contiguous);
        computed here, waiting for the GPU, when not given."""
        shape = _shape_array(x.shape)
        q = SaveQuery()
        q.scope = scope.encode()
        q.index = index
        q.role = role
        q.ndim = x.dim()
        q.shape = shape
        q.step = step
        if x.is_cuda:
            # The library reads values on the host only: ActNN (the
            # observing policies) gets their per-sample ranges instead.
            q.data = None
            if self.needs_ranges(role):
                if ranges is None:
                    ranges = sample_range_sq(x).cpu()
                q.sample_range_sq = ctypes.cast(ranges.data_ptr(), ctypes.POINTER(ctypes.c_double))
        else:
            q.data = x.data_ptr()
        p = CodecPlan()
        bits = (ctypes.c_uint8 * max(1, x.shape[0] if x.dim() else 1))()
        check(lib.actc_planner_plan(self._h, ctypes.byref(q), ctypes.byref(p), bits), f"policy {self.policy}")
        return p, (bits if p.sample_widths else None)

    def needs_ranges(self, role):
        """Whether planning a save of this role reads its values (per-sample
        ranges for a device tensor): the observing policies' (ActNN's), but
        not for the loss's saves, which they keep fp32."""
        return self.observes and role.role != ROLE_LOSS_IN

    def observe(self, scope, indices, grad_sq):
        arr = (ctypes.c_int * max(1, len(indices)))(*indices)
        check(lib.actc_planner_observe(self._h, scope.encode(), arr, len(indices), grad_sq), "observe")

    def replan(self):
        check(lib.actc_planner_replan(self._h), f"policy {self.policy}")

    def measure_begin(self):
        check(lib.actc_planner_measure_begin(self._h), f"policy {self.policy}")

    def measure_count(self):
        n = lib.actc_planner_measure_count(self._h)
        if n < 0:
            raise_last(f"policy {self.policy}")
        return n

    def measure_perturb(self, l):
        check(lib.actc_planner_measure_perturb(self._h, l), f"policy {self.policy}")

    def measure_commit(self, sq_diff):
        arr = (ctypes.c_double * max(1, len(sq_diff)))(*sq_diff)
        check(lib.actc_planner_measure_commit(self._h, arr, len(sq_diff)), f"policy {self.policy}")

    def measure_cancel(self):
        lib.actc_planner_measure_cancel(self._h)
