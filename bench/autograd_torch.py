#!/usr/bin/env python3
"""The PyTorch (Python) side of opreg's autograd benchmark. bench/autograd.c runs it as a
subprocess with --serve and interleaves its timed repetitions with opreg's and
libtorch's; it can also be run by hand, timing on its own:

    python3 bench/autograd_torch.py --cases a,b --threads 2

Cases, the same as the C driver's:
  a  one step = (x * y).sum().backward(); x.grad = None   on 8-element f32 tensors,
     x requires grad. Figure: ns per step.
  b  MLP 1024-4096-4096-4096-1024 (linear layers, ReLU between), batch 64, f32; only
     the first and last layers (weight and bias) require grad; loss = sum(output).
     Figures: bytes of the tensors autograd saves for backward, counted with
     torch.autograd.graph.saved_tensors_hooks over one forward (each pack call's tensor;
     deduplicated by (data_ptr, nbytes), so a tensor saved by two nodes, or a weight
     saved as its transpose view, counts once), and ns per step (forward + backward +
     grads set to None).

Standalone timing: the method of bench/bench_timing.h: double the loop count until one
loop takes >= 20 ms, size the loop so that --reps repetitions take about --time
seconds, one untimed warm-up repetition, then the median over the repetitions of
elapsed / loop count, on time.perf_counter_ns (CLOCK_MONOTONIC on Linux).

Output (stdout), one line each:  RESULT <key> <values...>   or   SKIP <reason>
--serve: after the RESULT lines of the setup, prints READY, then answers each stdin line
"a N" / "b N" (run N steps of that case) with "T <elapsed ns>" (or "E <message>"), until
"quit" or end of input.
Exit status: 0 when every case ran, 3 when torch cannot be imported, 1 on error.
"""
import argparse
import os
import sys
import time


def measure(body, cell_s, reps):
    """bench_measure() of bench_timing.h: returns (median_ns, min_ns, max_ns, iters)."""
    probe_s = min(cell_s, 0.02)
    n = 1
    while True:
        t0 = time.perf_counter_ns()
        body(n)
        t = (time.perf_counter_ns() - t0) * 1e-9
        if t >= probe_s or n >= (1 << 40):
            break
        n = int(n * (probe_s / t) * 1.2) + 1 if t > 0 and probe_s / t < 2.0 else n * 2
    per_call = t / n
    want = cell_s / reps / (per_call if per_call > 0 else 1e-9)
    iters = max(1, min(int(want), 10**12))
    body(iters)  # warm-up repetition at the final count
    v = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        body(iters)
        v.append((time.perf_counter_ns() - t0) / iters)
    v.sort()
    med = v[reps // 2] if reps % 2 else 0.5 * (v[reps // 2 - 1] + v[reps // 2])
    return med, v[0], v[-1], iters


def setup_a(torch):
    """Returns the body of case a: runs `iters` steps."""
    n = 8
    x = torch.linspace(-1.0, 1.0, n, dtype=torch.float32).requires_grad_(True)
    y = torch.linspace(0.5, -0.5, n, dtype=torch.float32)

    def body(iters):
        for _ in range(iters):
            (x * y).sum().backward()
            x.grad = None

    (x * y).sum().backward()
    ok = torch.equal(x.grad, y)
    x.grad = None
    if not ok:
        raise RuntimeError("case a: x.grad != y")
    return body


def setup_b(torch, widths, batch):
    """Measures the saved bytes (printed) and returns the body of case b."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    x = torch.rand(batch, widths[0], generator=g) * 2 - 1
    ws, bs = [], []
    nl = len(widths) - 1
    for l in range(nl):
        scale = 1.0 / widths[l] ** 0.5
        w = (torch.rand(widths[l + 1], widths[l], generator=g) * 2 - 1) * scale
        b = (torch.rand(widths[l + 1], generator=g) * 2 - 1) * scale
        trainable = l == 0 or l == nl - 1
        ws.append(w.requires_grad_(trainable))
        bs.append(b.requires_grad_(trainable))
    params = [t for t in ws + bs if t.requires_grad]

    def forward():
        h = x
        for l in range(nl):
            h = F.linear(h, ws[l], bs[l])
            if l + 1 < nl:
                h = F.relu(h)
        return h.sum()

    # saved bytes of one forward, before backward
    seen = {}
    total = [0, 0]

    def pack(t):
        nbytes = t.numel() * t.element_size()
        total[0] += nbytes
        total[1] += 1
        seen[(t.data_ptr(), nbytes)] = tuple(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    distinct = sum(k[1] for k in seen)
    loss.backward()
    for p in params:
        p.grad = None
    print(f"RESULT b_saved_bytes {distinct} {total[0]} {len(seen)} {total[1]}", flush=True)
    shapes = " ".join("x".join(str(d) for d in s) for s in sorted(seen.values()))
    print(f"RESULT b_saved_shapes {shapes}", flush=True)

    def body(iters):
        for _ in range(iters):
            forward().backward()
            for p in params:
                p.grad = None

    return body


def serve(bodies):
    print("READY", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        try:
            body = bodies[words[0]]
            iters = int(words[1])
            t0 = time.perf_counter_ns()
            body(iters)
            print(f"T {time.perf_counter_ns() - t0}", flush=True)
        except Exception as e:  # answer, so that the driver does not wait forever
            print(f"E {type(e).__name__}: {e}".replace("\n", " "), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="a,b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--serve", action="store_true", help="answer timing requests on stdin (for bench/autograd.c)")
    ap.add_argument("--time-a", type=float, default=0.3, help="timed seconds of case a, all repetitions")
    ap.add_argument("--reps-a", type=int, default=11)
    ap.add_argument("--time-b", type=float, default=0.5)
    ap.add_argument("--reps-b", type=int, default=7)
    ap.add_argument("--widths", default="1024,4096,4096,4096,1024")
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        print(f"SKIP {sys.executable}: cannot import torch ({type(e).__name__}: {e})", flush=True)
        return 3
    torch.set_num_threads(args.threads)
    print(f"RESULT info {sys.executable} (Python {sys.version.split()[0]}), torch {torch.__version__}, "
          f"intra-op threads {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '-')}", flush=True)
    cases = args.cases.split(",")
    bodies = {}
    if "a" in cases:
        bodies["a"] = setup_a(torch)
    if "b" in cases:
        bodies["b"] = setup_b(torch, [int(w) for w in args.widths.split(",")], args.batch)
    if args.serve:
        return serve(bodies)
    if "a" in bodies:
        med, lo, hi, iters = measure(bodies["a"], args.time_a, args.reps_a)
        print(f"RESULT a_step_ns {med:.1f} {lo:.1f} {hi:.1f} {iters} {args.reps_a}", flush=True)
    if "b" in bodies:
        med, lo, hi, iters = measure(bodies["b"], args.time_b, args.reps_b)
        print(f"RESULT b_step_ns {med:.0f} {lo:.0f} {hi:.0f} {iters} {args.reps_b}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
