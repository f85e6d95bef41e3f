"""PyTorch side of bench/ddp.sh: the demo GPT (tests/gpt_reference.py, f32) trained with
torch.nn.parallel.DistributedDataParallel on the gloo backend, RANKS processes on this
host (torch.multiprocessing), one thread each, each rank BATCH / RANKS of the sequences.

    ddp_torch.py TEXT RANKS WARMUP STEPS LAYERS HEADS EMBD CONTEXT BATCH

Prints `torch_ddp_tokens_per_s VALUE`: the whole batch's tokens per second over STEPS
steps after WARMUP (rank 0's clock, the ranks in step)."""
import os
import sys
import time

import openblas_threads  # before torch (bench/openblas_threads.py)
openblas_threads.limit("1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import gpt_setup  # noqa: E402


def run(rank, args):
    text, ranks, warmup, steps, layers, heads, embd, context, batch = args
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    training = gpt_setup.Training(text, layers, heads, embd, context)
    model = training.model
    ddp = torch.nn.parallel.DistributedDataParallel(model) if ranks > 1 else model
    share = batch // ranks

    def step():
        x, y = training.batch(batch, rank * share, (rank + 1) * share)
        training.step(ddp, x, y)

    for _ in range(warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    t = time.perf_counter() - t0
    if rank == 0:
        print("torch_ddp_tokens_per_s", steps * batch * context / t, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    text = sys.argv[1]
    ints = [int(v) for v in sys.argv[2:10]]
    args = [text] + ints
    mp.spawn(run, args=(args,), nprocs=ints[0], join=True)
