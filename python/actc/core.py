"""The codecs and the planner on torch CPU tensors: plans from the library,
payloads in uint8 tensors the package allocates, values through
``data_ptr()``.  The hooks (actc.torch) and CompAct build on these."""
import ctypes

import torch

from ._lib import ActcError, CodecPlan, SaveQuery, check, lib, raise_last

_FLOAT_TYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _shape_array(shape):
    return (ctypes.c_int * max(1, len(shape)))(*shape)


def as_float32(t):
    """t's values as a contiguous float32 CPU tensor (t itself when it is
    one already), for the codecs; refuses what they cannot take."""
    if t.device.type != "cpu":
        raise ActcError(f"actc: a tensor on {t.device} cannot be compressed: this is the CPU build of actc; "
                        "compressing CUDA tensors needs the CUDA build (not available yet)")
    if t.dtype not in _FLOAT_TYPES and t.dtype != torch.bool:
        raise ActcError(f"actc: the codecs take floating or boolean tensors, not {t.dtype}")
    if t.dim() > 5:
        raise ActcError(f"actc: the codecs take at most 5 dimensions, not {t.dim()} ({list(t.shape)})")
    x = t.detach()
    if x.dtype != torch.float32:
        x = x.to(torch.float32)
    return x.contiguous()


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


def encode_into(p, x, sample_bits=None):
    """Encode float32 contiguous x with plan p into a new uint8 tensor."""
    out = torch.empty(p.bytes, dtype=torch.uint8)
    check(lib.actc_codec_encode(ctypes.byref(p), x.data_ptr(), sample_bits, out.data_ptr(), p.bytes),
          "encode")
    return out


def decode(p, payload, dtype=torch.float32):
    """The values of a payload, as a new tensor of the plan's shape."""
    shape = tuple(p.shape[:p.ndim])
    y = torch.empty(shape, dtype=torch.float32)
    check(lib.actc_codec_decode(ctypes.byref(p), payload.data_ptr(), payload.numel(), y.data_ptr()), "decode")
    return y if dtype == torch.float32 else y.to(dtype)


def encode(t, codec, key=0):
    """(plan, payload) of tensor t through codec spec `codec`: the public
    codec API on torch tensors."""
    x = as_float32(t)
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

    def plan(self, x, scope, index, role, step):
        """(plan, sample_bits) for float32 contiguous x; sample_bits is a
        ctypes array when the plan uses per-sample widths, else None."""
        shape = _shape_array(x.shape)
        q = SaveQuery()
        q.scope = scope.encode()
        q.index = index
        q.role = role
        q.ndim = x.dim()
        q.shape = shape
        q.data = x.data_ptr()
        q.step = step
        p = CodecPlan()
        bits = (ctypes.c_uint8 * max(1, x.shape[0] if x.dim() else 1))()
        check(lib.actc_planner_plan(self._h, ctypes.byref(q), ctypes.byref(p), bits), f"policy {self.policy}")
        return p, (bits if p.sample_widths else None)

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
