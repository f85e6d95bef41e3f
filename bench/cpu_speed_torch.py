"""PyTorch side of opreg_bench_cpu_speed: the same operations on the same shapes, f32,
timed the same way (median over REPS repetitions of a loop calibrated to >= 20 ms);
elementwise ops and softmax write into a preallocated output (into() says why).
Usage: cpu_speed_torch.py THREADS REPS. Prints one line per case: NAME NS."""
import sys
import time

import openblas_threads  # before torch (bench/openblas_threads.py)
openblas_threads.limit(sys.argv[1] if len(sys.argv) > 1 else 1)

import torch  # noqa: E402

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
torch.set_num_threads(threads)
gen = torch.Generator().manual_seed(7)


def rand(*shape, lo=-1.0, hi=1.0):
    return torch.rand(*shape, generator=gen) * (hi - lo) + lo


def norm_backward(x):
    y = torch.norm(x)
    return lambda: torch.autograd.grad(y, x, retain_graph=True)


def chain(n):
    w = rand(8).requires_grad_(True)
    c = rand(8)

    def run():
        x = w
        for _ in range(n):
            x = torch.add(x, c)
        torch.autograd.grad(x.sum(), w)
    return run


def into(f, a):
    """f(a, out=y) into one preallocated y: PyTorch's allocator maps a fresh 64 MiB
    output (above glibc's largest mmap threshold) on every call and page-faults it in,
    which would time the allocator, not the kernel; opreg's allocator keeps its blocks."""
    y = torch.empty_like(a)
    return lambda: f(a, out=y)


def softmax_into(f, a):
    y = torch.empty_like(a)
    return lambda: f(a, 1, False, out=y)


def time_ns(fn):
    n = 1
    while True:  # calibrate; the first loops warm up
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t >= 0.02:
            break
        n *= 2
    v = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        v.append((time.perf_counter() - t0) / n)
    v.sort()
    return v[len(v) // 2] * 1e9


M1, M16, SQ = 1 << 20, 1 << 24, 4096
# the rows of cpu_speed.c's index cases: the same multiplicative hash, repeats included
ROWS = torch.tensor([(i * 2654435761 + 12345) % (1 << 32) % 4096 for i in range(4096)], dtype=torch.int64)
CASES = [
    ("cdist_fwd", lambda: (lambda a, b: lambda: torch.cdist(a, b))(rand(2048, 64), rand(2048, 64))),
    ("norm_bwd_1M", lambda: norm_backward(rand(M1).requires_grad_(True))),
    ("exp_1M", lambda: into(torch.exp, rand(M1))),
    ("sigmoid_1M", lambda: into(torch.sigmoid, rand(M1, lo=-8, hi=8))),
    ("softmax_4096sq", lambda: softmax_into(torch.ops.aten._softmax.out, rand(SQ, SQ, lo=-4, hi=4))),
    ("log_softmax_4096sq", lambda: softmax_into(torch.ops.aten._log_softmax.out, rand(SQ, SQ, lo=-4, hi=4))),
    ("sum_dim0_4096sq", lambda: (lambda a: lambda: torch.sum(a, 0))(rand(SQ, SQ))),
    ("sum_dim1_4096sq", lambda: (lambda a: lambda: torch.sum(a, 1))(rand(SQ, SQ))),
    ("sum_all_4096sq", lambda: (lambda a: lambda: torch.sum(a))(rand(SQ, SQ))),
    ("norm_fwd_16M", lambda: (lambda a: lambda: torch.norm(a))(rand(M16))),
    ("relu_1M", lambda: into(lambda a, out: torch.clamp_min(a, 0, out=out), rand(M1))),
    ("sin_1M", lambda: into(torch.sin, rand(M1, lo=-4, hi=4))),
    ("atan2_1M", lambda: (lambda a, b: lambda: torch.atan2(a, b, out=a.new_empty(a.shape)))(rand(M1), rand(M1))),
    ("maximum_1M", lambda: (lambda a, b: lambda: torch.maximum(a, b, out=a.new_empty(a.shape)))(rand(M1), rand(M1))),
    ("minimum_1M", lambda: (lambda a, b: lambda: torch.minimum(a, b, out=a.new_empty(a.shape)))(rand(M1), rand(M1))),
    ("fmod_1M", lambda: (lambda a, b: lambda: torch.fmod(a, b, out=a.new_empty(a.shape)))(rand(M1, lo=0.5, hi=2), rand(M1, lo=0.5, hi=2))),
    ("cos_1M", lambda: into(torch.cos, rand(M1, lo=-4, hi=4))),
    ("asin_1M", lambda: into(torch.asin, rand(M1))),
    ("atanh_1M", lambda: into(torch.atanh, rand(M1, lo=-0.9, hi=0.9))),
    ("expm1_1M", lambda: into(torch.expm1, rand(M1))),
    ("log1p_1M", lambda: into(torch.log1p, rand(M1, lo=0, hi=4))),
    ("log2_1M", lambda: into(torch.log2, rand(M1, lo=0.1, hi=4))),
    ("erf_1M", lambda: into(torch.erf, rand(M1, lo=-2, hi=2))),
    ("cumsum_4096sq", lambda: into(lambda a, out: torch.cumsum(a, 1, out=out), rand(SQ, SQ))),
    ("cumsum_dim0_4096sq", lambda: into(lambda a, out: torch.cumsum(a, 0, out=out), rand(SQ, SQ))),
    ("amax_dim1_4096sq", lambda: (lambda a: lambda: torch.amax(a, 1))(rand(SQ, SQ))),
    ("amax_dim0_4096sq", lambda: (lambda a: lambda: torch.amax(a, 0))(rand(SQ, SQ))),
    ("amin_dim1_4096sq", lambda: (lambda a: lambda: torch.amin(a, 1))(rand(SQ, SQ))),
    ("exp_16M", lambda: into(torch.exp, rand(M16))),
    ("sigmoid_16M", lambda: into(torch.sigmoid, rand(M16, lo=-8, hi=8))),
    ("relu_16M", lambda: into(lambda a, out: torch.clamp_min(a, 0, out=out), rand(M16))),
    ("sin_16M", lambda: into(torch.sin, rand(M16, lo=-4, hi=4))),
    ("log1p_16M", lambda: into(torch.log1p, rand(M16, lo=0, hi=4))),
    ("index_rows_1M", lambda: (lambda a, i: lambda: torch.ops.aten.index.Tensor(a, [i]))(rand(4096, 256), ROWS)),
    ("index_put_acc_1M", lambda: (lambda a, i, v: lambda: torch.ops.aten.index_put(a, [i], v, True))(
        rand(4096, 256), ROWS, rand(4096, 256))),
    ("scatter_reduce_sum_1M", lambda: (lambda a, i, v: lambda: torch.ops.aten.scatter_reduce.two(a, 0, i, v, "sum"))(
        rand(4096, 256), ROWS[:, None].expand(-1, 256).contiguous(), rand(4096, 256))),
    ("chain_100", lambda: chain(100), 100),
    ("chain_10k", lambda: chain(10000), 10000),
]

only = set(sys.argv[3].split(",")) if len(sys.argv) > 3 else None
for name, make, *per in CASES:
    if only and name not in only:
        continue
    print(name, time_ns(make()) / (per[0] if per else 1), flush=True)
