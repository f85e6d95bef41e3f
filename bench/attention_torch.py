"""PyTorch side of opreg_bench_attention: causal attention written out by hand (torch
1.13 has no F.scaled_dot_product_attention), forward + backward timed together, the
fastest of ROUNDS rounds, f32, one thread; and the bytes autograd saves for it
(saved_tensors_hooks, each storage counted once). Prints `torch_T_ns` and
`torch_T_saved` per sequence length T."""
import math
import sys
import time

import openblas_threads  # before torch (bench/openblas_threads.py)
openblas_threads.limit(1)

import torch  # noqa: E402

torch.set_num_threads(1)
rounds = int(sys.argv[1])
bh, e = int(sys.argv[2]), int(sys.argv[3])
lengths = [int(t) for t in sys.argv[4:]]
gen = torch.Generator().manual_seed(5)


def attention(q, k, v):
    t = q.shape[-2]
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.matmul(torch.softmax(s, -1), v)


for t in lengths:
    q, k, v = ((torch.rand(bh, t, e, generator=gen) * 2 - 1).requires_grad_(True) for _ in range(3))
    best = float("inf")
    for _ in range(rounds + 1):  # the first round warms up
        t0 = time.perf_counter()
        attention(q, k, v).sum().backward()
        best = min(best, time.perf_counter() - t0)
    seen = {}

    def pack(x):
        st = x.storage()
        seen[st.data_ptr()] = st.nbytes()
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        y = attention(q, k, v).sum()
    print("torch_%d_ns" % t, best * 1e9)
    print("torch_%d_saved" % t, sum(seen.values()), flush=True)
