"""Tensor files shared by tests/test_oracle.c and the oracle scripts.

A file is a sequence of records, each a header line
    tensor NAME DTYPE NDIM D0 D1 ...
followed by one line with the NUMEL values (row-major; f64 as %.17g, i64 as integers).
"""
import torch

_DTYPES = {"f64": torch.float64, "i64": torch.int64}


def read(path):
    out = {}
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        head = lines[i].split()
        i += 1
        if not head:
            continue
        if head[0] != "tensor":
            raise ValueError("%s: bad record header %r" % (path, lines[i - 1]))
        name, dtype, ndim = head[1], head[2], int(head[3])
        shape = [int(d) for d in head[4:4 + ndim]]
        vals = lines[i].split()
        i += 1
        conv = float if dtype == "f64" else int
        t = torch.tensor([conv(v) for v in vals], dtype=_DTYPES[dtype])
        out[name] = t.reshape(shape)
    return out


def write(path, tensors):
    with open(path, "w") as f:
        for name, t in tensors.items():
            t = t.detach().contiguous()
            if t.dtype == torch.int64:
                dtype, vals = "i64", " ".join(str(int(v)) for v in t.reshape(-1).tolist())
            else:
                t = t.to(torch.float64)
                dtype, vals = "f64", " ".join("%.17g" % v for v in t.reshape(-1).tolist())
            f.write("tensor %s %s %d %s\n%s\n" % (name, dtype, t.dim(), " ".join(str(d) for d in t.shape), vals))


def leaves(inputs, names):
    """The named inputs as leaves that require grad."""
    return {n: inputs[n].clone().requires_grad_(True) for n in names}
