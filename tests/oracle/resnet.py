"""Oracle: torchvision's ResNet class against examples/resnet (test_resnet.c).

Inputs: every parameter and buffer of the example's model by its state_dict name (f64,
the model of width 64 with one BasicBlock per stage: torchvision's
ResNet(BasicBlock, [1, 1, 1, 1], num_classes=4)), images x0 [4, 3, 32, 32] with labels
y0, and three f32 training batches x1..x3 / y1..y3. Writes
    loss        the f64 training-mode cross-entropy of x0
    g.NAME      the f64 gradient of each parameter
    b.NAME      each buffer after that forward (running statistics)
    losses32    the losses of three torch.optim.SGD steps (lr 0.01, momentum 0.9,
                weight decay 1e-4) in f32 from the same weights, one per batch
"""
import sys

import torch
import torch.nn.functional as F
from torchvision.models.resnet import BasicBlock, ResNet

import oracle_io

inp = oracle_io.read(sys.argv[1])
out = {}


def model(dtype):
    m = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=4).to(dtype)
    state = {k: v.to(dtype) for k, v in inp.items() if "." in k}
    missing, unexpected = m.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing), (missing, unexpected)
    return m.train()


m = model(torch.float64)
loss = F.cross_entropy(m(inp["x0"]), inp["y0"])
loss.backward()
out["loss"] = loss
for name, p in m.named_parameters():
    out["g." + name] = p.grad
for name, b in m.named_buffers():
    if not name.endswith("num_batches_tracked"):
        out["b." + name] = b

m = model(torch.float32)
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
losses = []
for k in (1, 2, 3):
    loss = F.cross_entropy(m(inp["x%d" % k].float()), inp["y%d" % k])
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
out["losses32"] = torch.tensor(losses, dtype=torch.float64)
oracle_io.write(sys.argv[2], out)
