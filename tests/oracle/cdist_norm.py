"""Oracle: pairwise distances and norms.

    d = cdist(x1, x2); loss = norm(d, 2) * norm(x2, 3)
Writes loss, d and the gradients of loss for x1 and x2."""
import sys

import torch

import oracle_io

inp = oracle_io.read(sys.argv[1])
p = oracle_io.leaves(inp, ["x1", "x2"])
d = torch.cdist(p["x1"], p["x2"], p=2.0)
loss = torch.norm(d, p=2) * torch.norm(p["x2"], p=3)
loss.backward()
out = {"loss": loss, "d": d}
out.update({"grad_" + n: t.grad for n, t in p.items()})
oracle_io.write(sys.argv[2], out)
