# The package from this source tree (python/), whichever folder pytest runs in.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
