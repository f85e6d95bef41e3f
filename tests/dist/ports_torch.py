"""torch.distributed (gloo) on the inputs of tests/dist/test_dist_ports.c, world group:
all_reduce and reduce with every reduction for f32, f64, i64 and i32 (gloo 1.13 refuses
bool tensors: "Invalid scalar type"),
all_gather, broadcast, gather and scatter (dst / src the last rank), all_to_all_single
with test_dist_ports's uneven splits, and isend / irecv around the ring. Writes one line
per result, "KEY RANK v0 v1 ...", to OUT (reduce and gather: the root's only);
test_dist_ports --torch OUT compares every rank's with them.

    python3 ports_torch.py NRANKS OUT
"""
import math
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROWS, COLS = 6, 2
N = ROWS * COLS
DTYPES = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64, "i32": torch.int32, "bool": torch.bool}
OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
       "min": dist.ReduceOp.MIN, "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR,
       "bxor": dist.ReduceOp.BXOR}


def value(r, i, dt):
    """test_dist_ports.c's input()."""
    if dt in ("i64", "i32"):
        return float((r * 7 + i * 3) % 11 - 4)
    if dt == "bool":
        return float((r + i) % 3 == 0 or i % 5 == 0)
    return math.sin(1.0 + 7.3 * r + 0.37 * i) + 0.01 * r + 1.5


def tensor(vals, dt):
    t = torch.tensor(vals, dtype=torch.float64)
    return (t != 0) if dt == "bool" else t.to(DTYPES[dt])


def make_input(r, dt):
    return tensor([value(r, i, dt) for i in range(N)], dt).reshape(ROWS, COLS)


def a2a_rows(r, s):
    return 1 + (r + 2 * s) % 3


def a2a_input(r, size, dt):
    """test_dist_ports.c's a2a_input()."""
    v = []
    for s in range(size):
        for j in range(a2a_rows(r, s)):
            base = float((r + s + j) % 2) if dt == "bool" else 100.0 * r + 10 * s + j
            second = 1 - base if dt == "bool" else base + (1 if dt in ("i64", "i32") else 0.5)
            v.append([base, second])
    return tensor(v, dt)


def worker(rank, size, path, out):
    dist.init_process_group("gloo", init_method="file://" + path, rank=rank, world_size=size)
    lines = []

    def put(key, t):
        vals = t.reshape(-1).to(torch.float64).tolist()
        lines.append("%s %d %s" % (key, rank, " ".join(repr(v) for v in vals)))

    last = size - 1
    for dt in DTYPES:
        if dt == "bool":
            continue  # gloo 1.13 refuses bool tensors ("Invalid scalar type")
        x = make_input(rank, dt)
        for name, op in OPS.items():
            if name[0] == "b" and dt in ("f32", "f64"):
                continue  # bitwise: integers only
            y = x.clone()
            dist.all_reduce(y, op)
            put("all_reduce:%s:%s" % (name, dt), y)
            y = x.clone()
            dist.reduce(y, last, op)
            if rank == last:
                put("reduce_to:%s:%s" % (name, dt), y)
        if dt in ("f32", "f64"):
            y = x.clone()
            dist.all_reduce(y)
            put("all_reduce:mean:%s" % dt, y / size)
        ys = [torch.empty_like(x) for _ in range(size)]
        dist.all_gather(ys, x)
        put("all_gather:%s" % dt, torch.cat(ys))
        y = x.clone()
        dist.broadcast(y, last)
        put("broadcast_from:%s" % dt, y)
        ys = [torch.empty_like(x) for _ in range(size)] if rank == last else None
        dist.gather(x, ys, dst=last)
        if rank == last:
            put("gather_to:%s" % dt, torch.cat(ys))
        y = torch.empty_like(x)
        dist.scatter(y, [make_input(s, dt) for s in range(size)] if rank == last else None, src=last)
        put("scatter_from:%s" % dt, y)
        xin = a2a_input(rank, size, dt)
        out_split = [a2a_rows(s, rank) for s in range(size)]
        y = torch.empty((sum(out_split), COLS), dtype=xin.dtype)
        dist.all_to_all_single(y, xin, out_split, [a2a_rows(rank, s) for s in range(size)])
        put("all_to_all_single:%s" % dt, y)
        if size > 1:
            y = torch.empty_like(x)
            reqs = [dist.isend(x, (rank + 1) % size, tag=5), dist.irecv(y, (rank + size - 1) % size, tag=5)]
            for q in reqs:
                q.wait()
            put("recv:%s" % dt, y)
    dist.destroy_process_group()
    with open(out + ".%d" % rank, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    size, out = int(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    fd, path = tempfile.mkstemp(prefix="opreg_ports_gloo_")
    os.close(fd)
    os.unlink(path)  # the file store makes it
    try:
        # fork: the children share the imported torch instead of importing it again
        mp.start_processes(worker, args=(size, path, out), nprocs=size, start_method="fork")
    finally:
        if os.path.exists(path):
            os.unlink(path)
    with open(out, "w") as f:
        for r in range(size):
            with open(out + ".%d" % r) as part:
                f.write(part.read())
            os.unlink(out + ".%d" % r)


if __name__ == "__main__":
    main()
