"""Oracle: gradients at the special points fast mode skips (normal mode must match).

    norm(a), norm(z), norm(a, 1.5), prod(q1), prod(q2), max(m), min(m), sum(cdist(c1, c2))
with zeros in a, z all zeros, one zero in q1, two in q2, ties in m, and a zero distance
between c1 and c2. Writes the gradient of each for its input(s)."""
import sys

import torch

import oracle_io

inp = oracle_io.read(sys.argv[1])
out = {}


def grad(name, fn, *names):
    xs = [inp[n].clone().requires_grad_(True) for n in names]
    y = fn(*xs)
    gs = torch.autograd.grad(y.sum(), xs)
    for n, g in zip(names, gs):
        out["grad_%s_%s" % (name, n)] = g


grad("norm2", lambda x: torch.norm(x, p=2), "a")
grad("norm2", lambda x: torch.norm(x, p=2), "z")
grad("norm15", lambda x: torch.norm(x, p=1.5), "a")
grad("prod", torch.prod, "q1")
grad("prod", torch.prod, "q2")
grad("max", torch.max, "m")
grad("min", torch.min, "m")
grad("cdist", lambda x1, x2: torch.cdist(x1, x2, p=2.0), "c1", "c2")
oracle_io.write(sys.argv[2], out)
