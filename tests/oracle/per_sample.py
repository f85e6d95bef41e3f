"""Oracle: per-sample gradients with functorch (torch 1.13): vmap(grad(f)) over the
samples x (dim 0) with the parameters shared, for the cases of tests/test_oracle.c
`per_sample_grads`. Each case CASE reads CASE_x and CASE_y (batched, dim 0), CASE_w
(shared) and constants CASE_*, and writes CASE_gx and CASE_gw: the gradients of
f(x_i, w, y_i) with respect to x_i and w, for every sample i.

The ops are those whose backward formulas PyTorch once had to patch for vmap(vjp):
masked_select, clamp (values on the bounds), diag, index_select, topk, prod (with
zeros), mode, sort; then linear, mm, cdist, log_softmax + gather (cross-entropy), an
MLP, and one nested vmap."""
import sys

import functorch
import torch

import oracle_io

inp = oracle_io.read(sys.argv[1])


def c(case, name):
    return inp[case + "_" + name]


def f_masked_select(x, w, y):
    return torch.masked_select(x * w, c("masked_select", "mask").bool()).sum()


def f_clamp(x, w, y):
    return (torch.clamp(x * w, -0.5, 0.5) * c("clamp", "k")).sum()


def f_diag(x, w, y):
    return (torch.diag(x) * w).sum()


def f_index_select(x, w, y):
    return (torch.index_select(x * w, 0, c("index_select", "idx")) ** 2).sum()


def f_topk(x, w, y):
    return (torch.topk(x * w, 2).values * c("topk", "k")).sum()


def f_prod(x, w, y):
    return torch.prod(x * w)


def f_mode(x, w, y):
    return (torch.mode(x * w, -1).values * c("mode", "k")).sum()


def f_sort(x, w, y):
    return (torch.sort(x * w).values * c("sort", "k")).sum()


def f_linear(x, w, y):
    return torch.tanh(torch.nn.functional.linear(x, w, c("linear", "b"))).sum()


def f_mm(x, w, y):
    return (torch.mm(x, w) ** 2).sum()


def f_cdist(x, w, y):
    return torch.cdist(x, w).sum()


def f_cross_entropy(x, w, y):
    lp = torch.log_softmax(torch.nn.functional.linear(x, w), 0)
    return -torch.gather(lp, 0, y).sum()


def f_mlp(x, w, y):
    h = torch.relu(torch.nn.functional.linear(x, w))
    lp = torch.log_softmax(torch.nn.functional.linear(h, c("mlp", "w2")), 0)
    return -torch.gather(lp, 0, y).sum()


def f_nested(x, w, y):
    return torch.tanh(torch.nn.functional.linear(x, w)).sum()


CASES = {
    "masked_select": f_masked_select, "clamp": f_clamp, "diag": f_diag, "index_select": f_index_select,
    "topk": f_topk, "prod": f_prod, "mode": f_mode, "sort": f_sort, "linear": f_linear, "mm": f_mm,
    "cdist": f_cdist, "cross_entropy": f_cross_entropy, "mlp": f_mlp,
}

out = {}
for case, f in CASES.items():
    gx, gw = functorch.vmap(functorch.grad(f, argnums=(0, 1)), in_dims=(0, None, 0))(c(case, "x"), c(case, "w"),
                                                                                      c(case, "y"))
    out[case + "_gx"] = gx
    out[case + "_gw"] = gw

# nested: vmap over the outer batch of a vmap over the inner one, of grad
inner = functorch.vmap(functorch.grad(f_nested, argnums=(0, 1)), in_dims=(0, None, 0))
gx, gw = functorch.vmap(inner, in_dims=(0, None, 0))(c("nested", "x"), c("nested", "w"), c("nested", "y"))
out["nested_gx"] = gx
out["nested_gw"] = gw
oracle_io.write(sys.argv[2], out)
