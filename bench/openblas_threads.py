"""Imported by the PyTorch sides of the benchmarks before torch: Debian's PyTorch calls
the pthread OpenBLAS, which starts as many threads as there are cores unless told
otherwise before torch loads it. limit(n) holds PyTorch's GEMMs to the comparison's
thread count too."""
import os


def limit(threads):
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
