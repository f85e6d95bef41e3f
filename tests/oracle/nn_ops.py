"""Oracle: the ops of registry/ops/nn.yaml (test_nn_ops.c).

Inputs: weight [N, D], indices (i64), pad (0-d i64), r (weights of the loss, the
shape of the embedding), x [B, R, C] (f64), xi [R, C] (i64 with ties), mask (i64 0/1
broadcastable to x), value (0-d). Writes the values of
    embedding(weight, indices, padding_idx=pad), its weight gradient for
    loss = sum(embedding * r), also with scale_grad_by_freq; triu / tril of x at diagonals -1 and 2, with the
    gradient of sum(triu(x, -1) * x) for x; masked_fill(x, mask, value); argmax /
    argmin of x and xi along each dim and over everything (keepdim for dim 1).
"""
import sys

import torch
import torch.nn.functional as F

import oracle_io

inp = oracle_io.read(sys.argv[1])
out = {}
w = inp["weight"].clone().requires_grad_(True)
emb = F.embedding(inp["indices"], w, padding_idx=int(inp["pad"]))
(emb * inp["r"]).sum().backward()
out["emb"] = emb
out["grad_weight"] = w.grad
# scale_grad_by_freq: each position's gradient divided by its index's count (not a
# derivative: checked here, not by finite differences)
w = inp["weight"].clone().requires_grad_(True)
(F.embedding(inp["indices"], w, padding_idx=int(inp["pad"]), scale_grad_by_freq=True) * inp["r"]).sum().backward()
out["grad_weight_freq"] = w.grad

x = inp["x"].clone().requires_grad_(True)
for k in (-1, 2):
    out["triu_%d" % k] = torch.triu(x, k)
    out["tril_%d" % k] = torch.tril(x, k)
(torch.triu(x, -1) * inp["x"]).sum().backward()
out["grad_triu"] = x.grad

out["masked_fill"] = inp["x"].masked_fill(inp["mask"].bool(), float(inp["value"]))

for name, t in (("x", inp["x"]), ("xi", inp["xi"])):
    for d in range(t.dim()):
        out["argmax_%s_%d" % (name, d)] = torch.argmax(t, d)
        out["argmin_%s_%d" % (name, d)] = torch.argmin(t, d)
    out["argmax_%s_all" % name] = torch.argmax(t)
    out["argmin_%s_all" % name] = torch.argmin(t)
    out["argmax_%s_keep" % name] = torch.argmax(t, 1, keepdim=True)
oracle_io.write(sys.argv[2], out)
