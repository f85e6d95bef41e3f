"""Oracle: single-head attention block, matmul -> softmax -> matmul.

    q, k, v = x @ wq, x @ wk, x @ wv
    a = softmax((q @ k^T) * scale, -1); o = a @ v; loss = sum(o * r)
Writes loss, a, o and the gradients of loss for x, wq, wk, wv."""
import sys

import torch

import oracle_io

inp = oracle_io.read(sys.argv[1])
p = oracle_io.leaves(inp, ["x", "wq", "wk", "wv"])
q = torch.matmul(p["x"], p["wq"])
k = torch.matmul(p["x"], p["wk"])
v = torch.matmul(p["x"], p["wv"])
scores = torch.matmul(q, torch.transpose(k, 1, 2)) * inp["scale"]
a = torch.softmax(scores, -1)
o = torch.matmul(a, v)
loss = (o * inp["r"]).sum()
loss.backward()
out = {"loss": loss, "a": a, "o": o}
out.update({"grad_" + n: t.grad for n, t in p.items()})
oracle_io.write(sys.argv[2], out)
