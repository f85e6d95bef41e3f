"""PyTorch's DistributedDataParallel (gloo, find_unused_parameters=True) on the model of
tests/dist/test_ddp.c's train_unused: a two-layer MLP, a parameter q only rank 0's loss
reaches (+ sum(q * q)) and one, z, no loss reaches; 5 SGD steps (lr 0.1) in f64, each
rank on its share of the batch of 12. Writes the parameters after the steps (the same on
every rank, which it checks), one line each, to OUT; test_ddp --torch OUT compares every
rank's with them.

    python3 ddp_unused_torch.py NRANKS OUT
"""
import math
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BATCH, IN, HID, OUT, STEPS = 12, 4, 8, 3, 5
SHAPES = [(IN, HID), (HID,), (HID, OUT), (OUT,)]


def rows_of(target, first, rows):
    w = OUT if target else IN
    v = [[math.cos(0.7 * (first + r) + 1.3 * c) if target else math.sin(0.9 * (first + r) - 0.4 * c + 0.2)
          for c in range(w)] for r in range(rows)]
    return torch.tensor(v, dtype=torch.float64)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        ps = []
        for k, shape in enumerate(SHAPES):
            n = math.prod(shape)
            ps.append(torch.tensor([0.5 * math.sin(1.0 + 3.1 * k + 0.77 * i) for i in range(n)],
                                   dtype=torch.float64).reshape(shape))
        ps.append(torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64))  # q
        ps.append(torch.tensor([1.0, 2.0], dtype=torch.float64))  # z: no loss reaches it
        self.p = torch.nn.ParameterList([torch.nn.Parameter(t) for t in ps])

    def forward(self, x, y, use_q):
        w1, b1, w2, b2, q, _ = self.p
        o = torch.tanh(x @ w1 + b1) @ w2 + b2
        loss = ((o - y) ** 2).mean()
        return loss + (q * q).sum() if use_q else loss


def run(rank, size, init, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size)
    model = torch.nn.parallel.DistributedDataParallel(Model(), find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    share = BATCH // size
    x, y = rows_of(False, rank * share, share), rows_of(True, rank * share, share)
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=False)
        model(x, y, rank == 0).backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.module.p])
    every = [torch.zeros_like(flat) for _ in range(size)]
    dist.all_gather(every, flat)
    assert all(torch.equal(e, flat) for e in every), "PyTorch's replicas differ"
    if rank == 0:
        with open(out, "w") as f:
            for p in model.module.p:
                f.write(" ".join("%.17g" % v for v in p.detach().reshape(-1).tolist()) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    size, out = int(sys.argv[1]), sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(run, args=(size, "file://" + os.path.join(d, "rendezvous"), out), nprocs=size)
