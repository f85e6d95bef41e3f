"""PyTorch side of opreg_bench_finetune: training steps of torchvision's resnet18
(num_classes 4, train mode, SGD with momentum 0.9, f32) in two cases, each step being
forward, cross-entropy, backward, optimizer.step() and
optimizer.zero_grad(set_to_none=True), as the C side's resnet_sgd_step:
  frozen  the backbone's parameters do not require grad, only fc trains;
  full    every parameter trains.

    finetune_torch.py THREADS REPS BATCH IMAGE

Prints `NAME VALUE` lines, CASE frozen or full: torch_CASE_ms (median step time of REPS
steps after 2 of warm-up) and torch_CASE_peak (median over the same steps of the bytes
live in the C allocator at the step's highest point above those live before it,
counted by bench/memhook.c when it is preloaded; -1 without it)."""
import memhook  # bench/memhook.py
import sys
import time

import openblas_threads  # before torch (bench/openblas_threads.py)
openblas_threads.limit(sys.argv[1])

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torchvision.models import resnet18  # noqa: E402

threads, reps, batch, image = (int(a) for a in sys.argv[1:5])
torch.set_num_threads(threads)
torch.manual_seed(0)

hook = memhook.load()


def median(xs):
    return sorted(xs)[len(xs) // 2]


def run(case):
    m = resnet18(num_classes=4)
    m.train()
    if case == "frozen":
        for name, p in m.named_parameters():
            if not name.startswith("fc."):
                p.requires_grad_(False)
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.01, momentum=0.9)
    x = torch.rand(batch, 3, image, image)
    y = torch.randint(0, 4, (batch,))

    def step():
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    ts, peaks = [], []
    for _ in range(reps):
        base = hook.memhook_current() if hook is not None else 0
        if hook is not None:
            hook.memhook_reset_peak()
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
        peaks.append(hook.memhook_peak() - base if hook is not None else -1)
    print("torch_%s_ms %.6f" % (case, 1e3 * median(ts)), flush=True)
    print("torch_%s_peak %d" % (case, median(peaks)), flush=True)


run("frozen")
run("full")
