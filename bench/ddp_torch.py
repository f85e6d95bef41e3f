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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import gpt_reference  # noqa: E402


def run(rank, args):
    text, ranks, warmup, steps, layers, heads, embd, context, batch = args
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    data = open(text, "rb").read()
    chars = sorted(set(data))
    token_of = {c: i for i, c in enumerate(chars)}
    tokens = torch.tensor([token_of[c] for c in data], dtype=torch.int64)
    model = gpt_reference.GPT(len(chars), embd, heads, layers, context)
    model.draw_weights(gpt_reference.SplitMix64(1337))
    ddp = torch.nn.parallel.DistributedDataParallel(model) if ranks > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, foreach=False)
    batches = gpt_reference.SplitMix64(1338)
    starts = len(tokens) - context
    share = batch // ranks

    def step():
        pos = [batches.next() % starts for _ in range(batch)][rank * share:(rank + 1) * share]
        x = torch.stack([tokens[s:s + context] for s in pos])
        y = torch.stack([tokens[s + 1:s + 1 + context] for s in pos])
        loss = ddp(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

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
