__version__ = "0.13.0"  # the library version this package binds (include/actc.h)
