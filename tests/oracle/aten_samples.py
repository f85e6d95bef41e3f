"""Oracle: ATen ops called by name on opreg's YAML samples (test_aten_samples.c).

The input file holds cases, each one call of an ATen op with the arguments opreg built
from a sample, and the gradients of the outputs to back-propagate:

    case ID NAME                   NAME: "convolution", "max_pool2d_with_indices", or
                                   with an overload, "upsample_nearest2d.vec"
    argnames NAME..                opreg's names of the arguments, in order
    arg tensor RG DTYPE NDIM D..   then one line of values; RG 1: it requires grad
    arg int V | arg float V | arg bool 0|1 | arg ints N V.. | arg bools N 0|1..
                                   | arg floats N V.. (a float[]: scale_factors)
                                   | arg none | arg str S
    arg tensors N                  a Tensor[] or Tensor?[], then N lines "item none"
                                   or "item DTYPE NDIM D.." (then one line of values)
    gradout NDIM D..               then one line of values: the gradient of an output
                                   (one per output, in order; "gradout none" for one
                                   that gets none, integer outputs)
    end

Without an overload, the op's overloads are tried in turn (default first) until one
accepts the arguments. The arguments bind to the overload's schema by position up to
its first keyword-only argument and by their opreg names after it (ATen's tensor
options, `*, ScalarType? dtype=None, ..., Device? device=None`); a string given for
`dtype` (a ScalarType) is the dtype it names. Overloads newer than the PyTorch at hand
(any.dims, squeeze.dims of PyTorch 2) are computed from its older ops, as PyTorch 2
defines them (NEWER). Ops whose values ATen leaves unspecified (empty.memory_format,
empty_strided) are compared for their shape: their PyTorch output is taken as zeros,
opreg's is zeros. resize_ leaves a grown storage's new elements uninitialised: they
are zeroed (DEFINED_HERE), as opreg zeroes them. The output file holds, per case, either

    case ID ok NOUT
    out K NDIM D.. (values line) | out K none
    grad I NDIM D.. (values line) | grad I none       for each argument I with RG 1
    after I NDIM D.. (values line)                    each tensor argument as the call
                                                      left it (running statistics)

or `case ID error MESSAGE` (the op failed in PyTorch) or `case ID missing` (no such
ATen op). Values are written as %.17g (integers exactly).
"""
import sys

import torch

DTYPES = {"f64": torch.float64, "f32": torch.float32, "i64": torch.int64, "bool": torch.bool, "i32": torch.int32}
DTYPE_WORDS = {v: k for k, v in DTYPES.items()}


def read_cases(path):
    with open(path) as f:
        lines = f.read().split("\n")
    i, cases = 0, []
    while i < len(lines):
        head = lines[i].split()
        i += 1
        if not head:
            continue
        assert head[0] == "case", lines[i - 1]
        case = {"id": head[1], "name": head[2], "args": [], "rg": [], "gradouts": [], "names": []}
        while True:
            w = lines[i].split()
            i += 1
            if w[0] == "end":
                break
            if w[0] == "argnames":
                case["names"] = w[1:]
                continue
            if w[0] == "gradout":
                if w[1] == "none":
                    case["gradouts"].append(None)
                    continue
                shape = [int(d) for d in w[2:2 + int(w[1])]]
                vals = [float(v) for v in lines[i].split()]
                i += 1
                case["gradouts"].append(torch.tensor(vals, dtype=torch.float64).reshape(shape))
                continue
            kind = w[1]
            if kind == "tensor":
                rg, dt, nd = w[2] == "1", DTYPES[w[3]], int(w[4])
                shape = [int(d) for d in w[5:5 + nd]]
                vals = [float(v) for v in lines[i].split()]
                i += 1
                t = torch.tensor(vals, dtype=torch.float64).to(dt).reshape(shape)
                if rg:
                    t.requires_grad_(True)
                    case["rg"].append(len(case["args"]))
                case["args"].append(t)
            elif kind == "int":
                case["args"].append(int(w[2]))
            elif kind == "float":
                case["args"].append(float(w[2]))
            elif kind == "bool":
                case["args"].append(w[2] == "1")
            elif kind == "ints":
                case["args"].append([int(v) for v in w[3:3 + int(w[2])]])
            elif kind == "floats":
                case["args"].append([float(v) for v in w[3:3 + int(w[2])]])
            elif kind == "bools":
                case["args"].append([v != "0" for v in w[3:3 + int(w[2])]])
            elif kind == "tensors":  # a Tensor[] / Tensor?[]: one "item" line (and values) each
                items = []
                for _ in range(int(w[2])):
                    iw = lines[i].split()
                    i += 1
                    if iw[1] == "none":
                        items.append(None)
                        continue
                    dt, nd = DTYPES[iw[1]], int(iw[2])
                    shape = [int(d) for d in iw[3:3 + nd]]
                    vals = [float(v) for v in lines[i].split()]
                    i += 1
                    items.append(torch.tensor(vals, dtype=torch.float64).to(dt).reshape(shape))
                case["args"].append(items)
            elif kind == "none":
                case["args"].append(None)
            elif kind == "str":
                case["args"].append(w[2] if len(w) > 2 else "")
            else:
                raise ValueError("bad arg line %r" % lines[i - 1])
        cases.append(case)
    return cases


SCALAR_TYPES = {"f64": torch.float64, "f32": torch.float32, "i64": torch.int64, "bool": torch.bool,
                "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32}


def any_dims(self, dim=None, keepdim=False):
    """PyTorch 2's any.dims: None or [] reduces every dim."""
    dims = range(self.dim()) if not dim else [d % max(self.dim(), 1) for d in dim]
    out = self != 0
    for d in sorted(dims, reverse=True):
        out = torch.ops.aten.any.dim(out, d, keepdim) if self.dim() else out.clone()
    return out


def squeeze_dims(self, dim):
    """PyTorch 2's squeeze.dims: the listed dims of size 1 go, one at a time from the last."""
    out = self
    for d in sorted({d % max(self.dim(), 1) for d in dim}, reverse=True):
        out = torch.ops.aten.squeeze.dim(out, d)
    return out


def resize_zeroed(self, size, memory_format=None):
    """resize_, with the elements a grown storage gains zeroed, as opreg's are (PyTorch
    leaves them uninitialised)."""
    old = self.storage().size()
    torch.ops.aten.resize_(self, size, memory_format=memory_format)
    with torch.no_grad():
        self.new_empty(0).set_(self.storage())[old:] = 0
    return self


NEWER = {"any.dims": any_dims, "squeeze.dims": squeeze_dims}
UNSPECIFIED = {"empty.memory_format", "empty_strided"}
# ops whose values ATen leaves unspecified in part: computed with those parts as opreg
# defines them
DEFINED_HERE = {"resize_": resize_zeroed}


def overloads(name):
    if name in DEFINED_HERE:
        return [DEFINED_HERE[name]]
    base, _, ov = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if ov and (packet is None or ov not in packet.overloads()) and name in NEWER:
        return [NEWER[name]]
    if packet is None:
        return None
    if ov:
        return [getattr(packet, ov)]
    names = packet.overloads()
    names.sort(key=lambda n: n != "default")
    return [getattr(packet, n) for n in names]


def bind(op, case):
    """The positional and keyword arguments of a call of op (see the module comment)."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return case["args"], {}
    pos, kw = [], {}
    for k, v in enumerate(case["args"]):
        a = schema.arguments[k] if k < len(schema.arguments) else None
        if a is not None and not a.kwarg_only:
            pos.append(v)
            continue
        name = case["names"][k] if k < len(case["names"]) else None
        a = next((b for b in schema.arguments if b.kwarg_only and b.name == name), None)
        if a is None:
            raise TypeError("%s: no keyword argument %r" % (schema.name, name))
        if a.name == "dtype" and isinstance(v, str):  # ScalarType (an int to TorchScript)
            v = SCALAR_TYPES[v]
        kw[a.name] = v
    return pos, kw


def call(case):
    ops = overloads(case["name"])
    if not ops:
        return None, None
    err = None
    for op in ops:
        try:
            pos, kw = bind(op, case)
            res = op(*pos, **kw)
            if case["name"] in UNSPECIFIED:
                res = torch.zeros_like(res)
            return res, None
        except (RuntimeError, TypeError, ValueError, IndexError) as e:
            err = e
    return None, err


def fmt(t):
    t = t.detach().to(torch.float64).contiguous().reshape(-1)
    return " ".join("%.17g" % v for v in t.tolist())


def write_tensor(f, tag, k, t):
    if t is None:
        f.write("%s %d none\n" % (tag, k))
        return
    f.write("%s %d %d %s\n%s\n" % (tag, k, t.dim(), " ".join(str(d) for d in t.shape), fmt(t)))


def main():
    cases = read_cases(sys.argv[1])
    with open(sys.argv[2], "w") as f:
        for case in cases:
            try:
                res, err = call(case)
            except Exception as e:  # anything else PyTorch raises is a result too
                res, err = None, e
            if res is None and err is None:
                f.write("case %s missing\n" % case["id"])
                continue
            if err is not None:
                f.write("case %s error %s\n" % (case["id"], " ".join(str(err).split())[:300]))
                continue
            number = isinstance(res, (bool, int, float))
            if number:  # a Scalar result (_local_scalar_dense): opreg's is 0-d, of any dtype
                res = torch.tensor(res, dtype=torch.float64)
            outs = list(res) if isinstance(res, (tuple, list)) else [res]
            f.write("case %s ok %d\n" % (case["id"], len(outs)))
            for k, t in enumerate(outs):  # the tag names the dtype: out:i64
                tag = "out" if number or not isinstance(t, torch.Tensor) else "out:" + DTYPE_WORDS.get(t.dtype, "?")
                write_tensor(f, tag, k, t)
            grads = [None] * len(case["rg"])
            pairs = [(o, g) for o, g in zip(outs, case["gradouts"])
                     if g is not None and o is not None and o.requires_grad]
            if case["rg"] and pairs:
                grads = torch.autograd.grad([o for o, _ in pairs], [case["args"][a] for a in case["rg"]],
                                            [g.to(o.dtype) for o, g in pairs], allow_unused=True)
            for a, g in zip(case["rg"], grads):
                write_tensor(f, "grad", a, g)
            for a, t in enumerate(case["args"]):
                if isinstance(t, torch.Tensor):
                    write_tensor(f, "after", a, t)


main()
