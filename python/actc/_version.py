__version__ = "0.14.0"  # the library version this package binds (include/actc.h)
