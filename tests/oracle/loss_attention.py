"""Oracle: nll_loss, cross_entropy and scaled dot-product attention (written out by
hand: torch 1.13 has no F.scaled_dot_product_attention), all in f64.

Input "case" (i64): [kind, reduction, ignore_index, has_weight, is_causal, has_mask]
with kind 0 = nll_loss, 1 = cross_entropy, 2 = attention; reduction 0 none, 1 mean,
2 sum. "eps" (f64, 0-d): label_smoothing. Losses read "x", "target", "weight";
attention "q", "k", "v", "mask". "r" weighs the output: the gradients written are
those of sum(out * r). Writes "out" and "grad_x" (losses) or "grad_q", "grad_k",
"grad_v" (attention)."""
import math
import sys

import torch
import torch.nn.functional as F

import oracle_io

inp = oracle_io.read(sys.argv[1])
kind, red, ignore, has_w, causal, has_mask = [int(v) for v in inp["case"].tolist()]
reduction = ["none", "mean", "sum"][red]
res = {}
if kind in (0, 1):
    x = inp["x"].clone().requires_grad_(True)
    w = inp["weight"] if has_w else None
    if kind == 0:
        out = F.nll_loss(x, inp["target"], weight=w, reduction=reduction, ignore_index=ignore)
    else:
        out = F.cross_entropy(x, inp["target"], weight=w, reduction=reduction, ignore_index=ignore,
                              label_smoothing=float(inp["eps"]))
    (out * inp["r"]).sum().backward()
    res = {"out": out, "grad_x": x.grad}
else:
    q, k, v = (inp[n].clone().requires_grad_(True) for n in ("q", "k", "v"))
    L, S = q.shape[-2], k.shape[-2]
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if has_mask:
        scores = scores + inp["mask"]
    if causal:
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.matmul(torch.softmax(scores, -1), v)
    (out * inp["r"]).sum().backward()
    res = {"out": out, "grad_q": q.grad, "grad_k": k.grad, "grad_v": v.grad}
oracle_io.write(sys.argv[2], res)
