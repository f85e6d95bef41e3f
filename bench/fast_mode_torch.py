"""PyTorch side of opreg_bench_fast_mode: the same backward passes, timed the same way
(forward untimed, backward timed, the fastest of ROUNDS rounds), f32, one thread.
Prints one line per case: NAME NS. PyTorch has no fast mode: its normal backward."""
import sys
import time

import openblas_threads  # before torch (bench/openblas_threads.py)
openblas_threads.limit(1)

import torch  # noqa: E402

torch.set_num_threads(1)
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
gen = torch.Generator().manual_seed(7)


def rand(*shape, lo=-1.0, hi=1.0):
    return (torch.rand(*shape, generator=gen) * (hi - lo) + lo).requires_grad_(True)


CASES = [
    ("cdist_2048x64", lambda: [rand(2048, 64), rand(2048, 64)], lambda x1, x2: torch.cdist(x1, x2).sum()),
    ("norm_1M", lambda: [rand(1 << 20)], lambda x: torch.norm(x)),
    ("norm_16M", lambda: [rand(1 << 24)], lambda x: torch.norm(x)),
    ("norm_p3_1M", lambda: [rand(1 << 20)], lambda x: torch.norm(x, p=3)),
    ("prod_rows_4096x256", lambda: [rand(4096, 256, lo=0.9, hi=1.1)], lambda x: torch.prod(x, 1).sum()),
    ("max_1M", lambda: [rand(1 << 20)], lambda x: torch.max(x)),
    ("sqrt_1M", lambda: [rand(1 << 20, lo=0.5, hi=2.0)], lambda x: torch.sqrt(x).sum()),
]

for name, make, fn in CASES:
    xs = make()
    best = float("inf")
    for _ in range(rounds + 1):  # the first round warms up
        y = fn(*xs)
        t0 = time.perf_counter()
        torch.autograd.grad(y, xs)
        best = min(best, time.perf_counter() - t0)
    print(name, best * 1e9, flush=True)
