"""PyTorch eager on a model of bench/replay_models.py, the side of bench/replay.sh that
opreg's replay is measured against: ms per forward, and per forward + backward (of the
loss the model returns, else of the sum of its outputs), median of REPEAT runs after
warm-up. Prints `forward MS` and `forward_backward MS`.
    replay_torch.py FILE.py:FUNCTION REPEAT"""
import importlib.util
import statistics
import sys
import time

import torch


def main():
    path, _, fn = sys.argv[1].rpartition(":")
    repeat = int(sys.argv[2])
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
        times = []
        for r in range(repeat + 2):
            t0 = time.perf_counter()
            if backward:
                step(True)
            else:
                with torch.no_grad():
                    step(False)
            if r >= 2:
                times.append(time.perf_counter() - t0)
        print("%s %.4f" % (name, 1e3 * statistics.median(times)))


main()
