__version__ = "0.15.0"  # the library version this package binds (include/actc.h)
