"""PyTorch side of opreg_bench_vmap: per-sample gradients of an MLP 784-512-10 with
cross-entropy, batch B, f32, one thread, with functorch's vmap(grad(f)) (torch 1.13),
timed the same way as the opreg side (the fastest of ROUNDS rounds).

    vmap_torch.py ROUNDS B

Prints `NAME VALUE` lines: functorch_ns (one batch of per-sample gradients) and
functorch_peak (bytes above what was live before, counted by bench/memhook.c when it is
preloaded; -1 without it)."""
import memhook  # bench/memhook.py
import sys
import time

import openblas_threads  # before torch (bench/openblas_threads.py)
openblas_threads.limit(1)

import functorch  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)
rounds, B = int(sys.argv[1]), int(sys.argv[2])
gen = torch.Generator().manual_seed(3)
x = torch.rand(B, 784, generator=gen)
y = torch.randint(0, 10, (B, 1), generator=gen)
params = {
    "w1": torch.rand(512, 784, generator=gen) * 0.1 - 0.05, "b1": torch.zeros(512),
    "w2": torch.rand(10, 512, generator=gen) * 0.1 - 0.05, "b2": torch.zeros(10),
}


def loss(p, xi, yi):
    h = torch.relu(torch.nn.functional.linear(xi, p["w1"], p["b1"]))
    lp = torch.log_softmax(torch.nn.functional.linear(h, p["w2"], p["b2"]), 0)
    return -torch.gather(lp, 0, yi).sum()


per_sample = functorch.vmap(functorch.grad(loss), in_dims=(None, 0, 0))

hook = memhook.load()

best = float("inf")
peak = -1
for r in range(rounds + 1):  # the first round warms up
    if hook is not None:
        base = hook.memhook_current()
        hook.memhook_reset_peak()
    t0 = time.perf_counter()
    g = per_sample(params, x, y)
    t = time.perf_counter() - t0
    if hook is not None:
        peak = hook.memhook_peak() - base
    del g
    if r:
        best = min(best, t)
print("functorch_ns", best * 1e9, flush=True)
print("functorch_peak", peak, flush=True)
