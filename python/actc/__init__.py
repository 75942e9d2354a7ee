"""actc for PyTorch: activation-compressed training through saved-tensor
hooks, over the C library libactc (ctypes; no link against libtorch).

    import actc.torch
    c = actc.torch.compress("actnn:L3", model)
    with c:
        loss = loss_fn(model(x), y)
        loss.backward()
    c.step()

The library is found through ACTC_LIBRARY (the file or its folder),
pkg-config, the source tree's build folder, or the install prefixes; its
version must match this package's (actc.__version__)."""
from ._version import __version__
from ._lib import ActcError, LibraryNotFound, library_path, library_version, lib as _clib


def policies():
    """The text that lists every policy spec and its options."""
    return _clib.actc_policy_list().decode()


__all__ = ["__version__", "ActcError", "LibraryNotFound", "library_path", "library_version", "policies"]
