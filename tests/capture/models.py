"""Small models for the capture-and-replay tests (tests/capture/replay.sh): each function
returns (model, example_inputs) or (model, example_inputs, loss_fn) for opreg-capture.
Sizes are tiny on purpose: a few hundred elements per tensor keeps the suite fast."""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def mlp():
    torch.manual_seed(1)
    m = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))
    return m, (torch.randn(5, 6),)


class Attention(nn.Module):
    """One pre-norm block of causal self-attention with an MLP, written as users write it."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).permute(0, 2, 1, 3) for t in (q, k, v))
        att = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)
        mask = torch.ones(T, T).tril() == 0
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).permute(0, 2, 1, 3).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.relu(self.fc(x)))


def attention():
    torch.manual_seed(2)
    return Attention(), (torch.randn(2, 5, 16),)


def gpt():
    """The GPT reference model (tests/gpt_reference.py) at a tiny size, its loss as output."""
    from gpt_reference import GPT, SplitMix64
    torch.manual_seed(3)
    m = GPT(vocab=11, d=16, heads=2, layers=2, block=8)
    m.draw_weights(SplitMix64(5))
    idx = torch.randint(0, 11, (2, 6))
    tgt = torch.randint(0, 11, (2, 6))
    return m, (idx, tgt)


def resnet():
    """torchvision's ResNet with one BasicBlock per stage, width 8, 16x16 images, in eval mode."""
    from torchvision.models.resnet import BasicBlock, ResNet
    torch.manual_seed(4)
    m = _narrow_resnet(8)
    m.eval()
    return m, (torch.randn(2, 3, 16, 16),)


def _narrow_resnet(width):
    from torchvision.models.resnet import BasicBlock, ResNet

    class Narrow(ResNet):
        def __init__(self):
            nn.Module.__init__(self)
            self._norm_layer = nn.BatchNorm2d
            self.inplanes, self.dilation, self.groups, self.base_width = width, 1, 1, 64
            self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(BasicBlock, width, 1)
            self.layer2 = self._make_layer(BasicBlock, 2 * width, 1, stride=2)
            self.layer3 = self._make_layer(BasicBlock, 4 * width, 1, stride=2)
            self.layer4 = self._make_layer(BasicBlock, 8 * width, 1, stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(8 * width, 4)
            for mod in self.modules():  # running statistics that are not the identity
                if isinstance(mod, nn.BatchNorm2d):
                    mod.running_mean.uniform_(-0.5, 0.5)
                    mod.running_var.uniform_(0.5, 1.5)
                    nn.init.uniform_(mod.weight, 0.5, 1.5)
                    nn.init.uniform_(mod.bias, -0.5, 0.5)
    return Narrow()


def convbn_train():
    """Convolution, batch norm in training mode (its running statistics are buffers the
    graph writes: copy_ nodes) and a linear layer, with a named loss (cross entropy)."""
    torch.manual_seed(5)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    m.train()
    y = torch.tensor([0, 2, 1, 2])
    return m, (torch.randn(4, 3, 6, 6),), lambda out: F.cross_entropy(out, y)
