"""Oracle: two-layer MLP with log_softmax and NLL loss through gather/mean.

    h = relu(linear(x, w1, b1)); logits = linear(h, w2, b2)
    lp = log_softmax(logits, 1); loss = -mean(gather(lp, 1, target))
Writes loss, logits, lp and the gradients of loss for x, w1, b1, w2, b2."""
import sys

import torch

import oracle_io

inp = oracle_io.read(sys.argv[1])
p = oracle_io.leaves(inp, ["x", "w1", "b1", "w2", "b2"])
h = torch.relu(torch.nn.functional.linear(p["x"], p["w1"], p["b1"]))
logits = torch.nn.functional.linear(h, p["w2"], p["b2"])
lp = torch.log_softmax(logits, 1)
loss = -torch.gather(lp, 1, inp["target"]).mean()
loss.backward()
out = {"loss": loss, "logits": logits, "lp": lp}
out.update({"grad_" + n: t.grad for n, t in p.items()})
oracle_io.write(sys.argv[2], out)
