"""PyTorch side of opreg_bench_gpt: training steps of the demo GPT in PyTorch 1.13, f32,
the model of tests/gpt_reference.py (the same weights, batches and AdamW as opreg's).

    gpt_torch.py TEXT THREADS WARMUP STEPS LAYERS HEADS EMBD CONTEXT BATCH

Prints `NAME VALUE` lines: torch_tokens_per_s (over STEPS steps after WARMUP) and
torch_peak (bytes above what was live before the timed steps, counted by bench/memhook.c
when it is preloaded; -1 without it)."""
import memhook  # bench/memhook.py
import sys
import time

import openblas_threads  # before torch (bench/openblas_threads.py)
openblas_threads.limit(sys.argv[2])

import torch  # noqa: E402

import gpt_setup  # noqa: E402

text, threads, warmup, steps, layers, heads, embd, context, batch = sys.argv[1:10]
threads, warmup, steps = int(threads), int(warmup), int(steps)
layers, heads, embd, context, batch = int(layers), int(heads), int(embd), int(context), int(batch)
torch.set_num_threads(threads)
torch.set_default_dtype(torch.float32)
training = gpt_setup.Training(text, layers, heads, embd, context)


def step():
    x, y = training.batch(batch)
    return training.step(training.model, x, y).item()


hook = memhook.load()

for _ in range(warmup):
    step()
if hook is not None:
    base = hook.memhook_current()
    hook.memhook_reset_peak()
t0 = time.perf_counter()
for _ in range(steps):
    step()
t = time.perf_counter() - t0
peak = hook.memhook_peak() - base if hook is not None else -1
print("torch_tokens_per_s", steps * batch * context / t, flush=True)
print("torch_peak", peak, flush=True)
