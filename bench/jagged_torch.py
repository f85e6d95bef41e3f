"""PyTorch side of opreg_bench_jagged: the padded dense equivalents of its rows, f32, one
thread, timed the same way (forward + backward, the fastest of ROUNDS rounds).

    jagged_torch.py ROUNDS D MEM_LENGTHS SPEED_LENGTHS

The lengths are comma lists (the C driver draws them, so both sides see the same batch).
Prints `NAME VALUE` lines:
  mem_padded_peak  bytes: peak host memory of input (requires grad) -> linear(D->D,
                   weight and bias require grad) -> sum -> backward on the padded
                   [B, max_len, D] batch of MEM_LENGTHS, counted by bench/memhook.c
                   (preloaded; -1 without it)
  linear_padded    ns: linear forward + backward on the padded SPEED_LENGTHS batch
  chain_padded     ns: attention-like pooling, padded: y = linear(x); softmax of y over
                   the (masked) sequence dim, times y, summed over it -> sum -> backward"""
import memhook  # bench/memhook.py
import sys
import time

import openblas_threads  # before torch (bench/openblas_threads.py)
openblas_threads.limit(1)

import torch  # noqa: E402

torch.set_num_threads(1)
rounds = int(sys.argv[1])
D = int(sys.argv[2])
mem_lengths = [int(v) for v in sys.argv[3].split(",")]
speed_lengths = [int(v) for v in sys.argv[4].split(",")]
gen = torch.Generator().manual_seed(11)


def rand(*shape, lo=-1.0, hi=1.0):
    return torch.rand(*shape, generator=gen) * (hi - lo) + lo


# memory: the seed's test on the padded batch
h = memhook.load()
if h is not None:
    B, N = len(mem_lengths), max(mem_lengths)
    base = h.memhook_current()
    h.memhook_reset_peak()
    x = rand(B, N, D).requires_grad_(True)
    w = rand(D, D, lo=-0.05, hi=0.05).requires_grad_(True)
    b = rand(D).requires_grad_(True)
    torch.nn.functional.linear(x, w, b).sum().backward()
    print("mem_padded_peak", h.memhook_peak() - base, flush=True)
    del x, w, b
else:
    print("mem_padded_peak -1", flush=True)

B, N = len(speed_lengths), max(speed_lengths)
lengths = torch.tensor(speed_lengths)
valid = (torch.arange(N)[None, :] < lengths[:, None])  # [B, N]
neg_mask = torch.where(valid, 0.0, float("-inf"))[:, :, None]  # -inf on the padding
x = rand(B, N, D) * valid[:, :, None]
w = rand(D, D, lo=-0.05, hi=0.05)
b = rand(D)
for t in (x, w, b):
    t.requires_grad_(True)


def timed(fn):
    best = float("inf")
    for _ in range(rounds + 1):  # the first round warms up
        t0 = time.perf_counter()
        fn().backward()
        best = min(best, time.perf_counter() - t0)
    return best * 1e9


print("linear_padded", timed(lambda: torch.nn.functional.linear(x, w, b).sum()), flush=True)
def chain():
    y = torch.nn.functional.linear(x, w, b)
    return (torch.softmax(y + neg_mask, 1) * y).sum(1).sum()


print("chain_padded", timed(chain), flush=True)
