__version__ = "0.12.0"  # the library version this package binds (include/actc.h)
