__version__ = "0.11.0"  # the library version this package binds (include/actc.h)
