"""The Python side of bench/memhook.c, for the PyTorch halves of the benchmarks that
count host memory: load() gives the preloaded counter (memhook_current, memhook_peak,
memhook_reset_peak, the first two returning bytes), its peak reset, or None where the
library was not preloaded."""
import ctypes


def load():
    try:
        h = ctypes.CDLL(None)
        h.memhook_peak.restype = ctypes.c_int64
        h.memhook_current.restype = ctypes.c_int64
        h.memhook_reset_peak()
        return h
    except (AttributeError, OSError):
        return None
