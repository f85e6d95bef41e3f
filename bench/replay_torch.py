"""PyTorch eager on a model of bench/replay_models.py, the side of bench/replay.sh that
opreg's replay is measured against: ms per forward, and per forward + backward (of the
loss the model returns, else of the sum of its outputs; the gradients dropped before
each run, as `opreg run --backward` does), median of REPEAT runs after WARMUP (default 3)
untimed ones, on one thread, in wall time and in the process's CPU time (which other
processes' load does not inflate). Prints `forward MS CPU_MS` and `forward_backward MS CPU_MS`.
    replay_torch.py FILE.py:FUNCTION REPEAT [WARMUP]"""
import importlib.util
import statistics
import sys
import time

import torch


def main():
    path, _, fn = sys.argv[1].rpartition(":")
    repeat = int(sys.argv[2])
    warmup = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("m", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model, inputs = getattr(mod, fn)()[:2]

    def step(backward):
        out = model(*inputs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if backward:
            sum(o.sum() for o in outs if o.is_floating_point()).backward()

    for name, backward in (("forward", False), ("forward_backward", True)):
        times, cpu = [], []
        for r in range(warmup + repeat):
            model.zero_grad(set_to_none=True)
            t0, c0 = time.perf_counter(), time.process_time()
            if backward:
                step(True)
            else:
                with torch.no_grad():
                    step(False)
            if r >= warmup:
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        print("%s %.4f %.4f" % (name, 1e3 * statistics.median(times), 1e3 * statistics.median(cpu)))


main()
