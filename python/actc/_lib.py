"""The C library through ctypes: finding libactc.so, checking its version,
declaring the functions the package calls, and turning a failed status into
an exception that carries the library's message.

Nothing here imports torch: the binding passes addresses (``data_ptr()``)
and sizes, the way bitsandbytes does, so it does not depend on torch's C++
ABI."""
import ctypes
import ctypes.util
import os
import shutil
import subprocess

from ._version import __version__

MAX_DIMS = 5  # ACTC_MAX_DIMS


class ActcError(RuntimeError):
    """A call into libactc failed; the message is the library's."""


class LibraryNotFound(ImportError):
    """libactc.so was not found, or is of another version."""


class CodecPlan(ctypes.Structure):
    """actc_codec_plan (include/actc.h): plain data, made by the library."""
    _fields_ = [
        ("codec", ctypes.c_char * 48),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int * MAX_DIMS),
        ("numel", ctypes.c_size_t),
        ("bytes", ctypes.c_size_t),
        ("key", ctypes.c_uint64),
        ("sample_widths", ctypes.c_int),
        ("threads", ctypes.c_int),
        ("id_", ctypes.c_int),
        ("bits_", ctypes.c_int),
        ("group_", ctypes.c_int),
        ("width_", ctypes.c_int),
        ("iparam_", ctypes.c_int * 4),
        ("sample_bits_hash_", ctypes.c_uint64),
    ]


class SaveRole(ctypes.Structure):
    """actc_save_role."""
    _fields_ = [
        ("role", ctypes.c_int),
        ("linear", ctypes.c_int),
        ("fan_in", ctypes.c_int),
        ("kernel_h", ctypes.c_int),
        ("kernel_w", ctypes.c_int),
        ("transforms", ctypes.c_uint),
    ]


class SaveQuery(ctypes.Structure):
    """actc_save_query."""
    _fields_ = [
        ("scope", ctypes.c_char_p),
        ("index", ctypes.c_int),
        ("role", SaveRole),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_int)),
        ("data", ctypes.c_void_p),
        ("step", ctypes.c_uint64),
        ("sample_range_sq", ctypes.POINTER(ctypes.c_double)),
    ]


# actc_role values the package uses (tests/test_hooks.py checks them
# against actc_role_name).
ROLE_UNKNOWN, ROLE_LINEAR_IN, ROLE_CONV_IN, ROLE_NORM_IN, ROLE_LOSS_IN = 0, 1, 3, 4, 15

_c = ctypes
_P = ctypes.c_void_p
_SIGNATURES = {
    "actc_version": (_c.c_char_p, []),
    "actc_policy_list": (_c.c_char_p, []),
    "actc_last_error": (_c.c_char_p, []),
    "actc_status_name": (_c.c_char_p, [_c.c_int]),
    "actc_role_name": (_c.c_char_p, [_c.c_int]),
    "actc_set_threads": (None, [_c.c_int]),
    "actc_get_threads": (_c.c_int, []),
    "actc_codec_plan_make": (_c.c_int, [_c.c_char_p, _c.c_int, _c.POINTER(_c.c_int), _c.c_uint64, _P,
                                        _c.POINTER(CodecPlan)]),
    "actc_codec_encode": (_c.c_int, [_c.POINTER(CodecPlan), _P, _P, _P, _c.c_size_t]),
    "actc_codec_decode": (_c.c_int, [_c.POINTER(CodecPlan), _P, _c.c_size_t, _P]),
    "actc_cuda_built": (_c.c_int, []),
    "actc_cuda_device_count": (_c.c_int, []),
    "actc_cuda_encode": (_c.c_int, [_c.POINTER(CodecPlan), _P, _c.c_int, _P, _P, _c.c_size_t, _P]),
    "actc_cuda_decode": (_c.c_int, [_c.POINTER(CodecPlan), _P, _c.c_size_t, _P, _c.c_int, _P]),
    "actc_cuda_range_sq_len": (_c.c_size_t, [_c.c_int, _c.c_size_t]),
    "actc_cuda_range_sq": (_c.c_int, [_P, _c.c_int, _c.c_int, _c.c_size_t, _P, _c.c_size_t, _P]),
    "actc_planner_new": (_c.c_int, [_c.c_char_p, _c.c_uint64, _c.POINTER(_P)]),
    "actc_planner_free": (None, [_P]),
    "actc_planner_policy": (_c.c_char_p, [_P]),
    "actc_planner_observes": (_c.c_int, [_P]),
    "actc_planner_measures": (_c.c_int, [_P]),
    "actc_planner_plan": (_c.c_int, [_P, _c.POINTER(SaveQuery), _c.POINTER(CodecPlan), _P]),
    "actc_planner_observe": (_c.c_int, [_P, _c.c_char_p, _c.POINTER(_c.c_int), _c.c_int, _c.c_double]),
    "actc_planner_replan": (_c.c_int, [_P]),
    "actc_planner_measure_begin": (_c.c_int, [_P]),
    "actc_planner_measure_count": (_c.c_int, [_P]),
    "actc_planner_measure_perturb": (_c.c_int, [_P, _c.c_int]),
    "actc_planner_measure_commit": (_c.c_int, [_P, _c.POINTER(_c.c_double), _c.c_int]),
    "actc_planner_measure_cancel": (None, [_P]),
    "actc_controller_measure_due": (_c.c_int, [_c.c_uint64, _c.c_uint64]),
    "actc_project": (_c.c_int, [_P, _P, _c.c_int, _P]),
    "actc_project_back": (_c.c_int, [_P, _P, _c.c_int, _c.c_float, _P]),
    "actc_rng_key": (_c.c_uint64, [_c.c_uint64, _c.c_uint64, _c.c_uint64]),
    "actc_hash_bytes": (_c.c_uint64, [_c.c_uint64, _c.c_char_p, _c.c_size_t]),
}

_NAMES = ("libactc.so." + ".".join(__version__.split(".")[:2]), "libactc.so")


def _candidates():
    """(where, path) pairs in the order they are tried."""
    env = os.environ.get("ACTC_LIBRARY")
    if env:
        env = os.path.abspath(env)  # library_path stays valid when the folder changes
        if os.path.isdir(env):
            for n in _NAMES:
                yield "ACTC_LIBRARY", os.path.join(env, n)
        else:
            yield "ACTC_LIBRARY", env
        return  # an explicit choice is not second-guessed
    pkg = shutil.which("pkg-config")
    if pkg:
        try:
            libdir = subprocess.run([pkg, "--variable=libdir", "actc"], capture_output=True, text=True,
                                    timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            libdir = ""
        if libdir:
            for n in _NAMES:
                yield "pkg-config actc", os.path.join(libdir, n)
    # Used from a source tree: the build folder next to python/.
    here = os.path.dirname(os.path.abspath(__file__))
    for n in _NAMES:
        yield "the source tree's build folder", os.path.normpath(os.path.join(here, "..", "..", "build", n))
    for prefix in ("/usr/local/lib", "/usr/lib", "/usr/lib/x86_64-linux-gnu"):
        for n in _NAMES:
            yield "the install prefixes", os.path.join(prefix, n)
    found = ctypes.util.find_library("actc")
    if found:
        yield "the system's library path", found


def _load():
    tried = []
    for where, path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} ({where}: no such file)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({where}: {e})")
            continue
        if not hasattr(lib, "actc_version"):
            tried.append(f"{path} ({where}: not libactc)")
            continue
        lib.actc_version.restype = ctypes.c_char_p
        version = lib.actc_version().decode()
        if version.split(".")[:2] != __version__.split(".")[:2]:
            tried.append(f"{path} ({where}: version {version}, this package needs {__version__})")
            continue
        missing = [n for n in _SIGNATURES if not hasattr(lib, n)]
        if missing:
            tried.append(f"{path} ({where}: lacks {', '.join(missing)})")
            continue
        for name, (res, args) in _SIGNATURES.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        return lib, path, version
    raise LibraryNotFound(
        "actc: libactc.so " + __version__ + " not found; set ACTC_LIBRARY to the library (or its folder), "
        "install actc (cmake --install) so that pkg-config finds it, or build it (make build). Tried:\n  "
        + "\n  ".join(tried))


lib, library_path, library_version = _load()


def check(status, what=""):
    """Raise ActcError with the library's message for a failed status."""
    if status != 0:
        msg = lib.actc_last_error().decode(errors="replace")
        name = lib.actc_status_name(status).decode()
        raise ActcError(f"{what + ': ' if what else ''}{msg} ({name})")


def raise_last(what):
    """Raise ActcError with the library's last message (a call that reports
    failure by its value, not a status)."""
    raise ActcError(f"{what}: {lib.actc_last_error().decode(errors='replace')}")
