"""Bench-size models for bench/replay.sh, captured by opreg-capture: the GPT reference
model (tests/gpt_reference.py) at the demo's bench size and a torchvision ResNet with one
BasicBlock per stage at width 16 on 32x32 images (eval mode: batch norm's running
statistics, so the replay and PyTorch run the same graph)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "capture"))


def gpt():
    from gpt_reference import GPT, SplitMix64
    torch.manual_seed(3)
    m = GPT(vocab=65, d=128, heads=4, layers=2, block=64)
    m.draw_weights(SplitMix64(5))
    return m, (torch.randint(0, 65, (8, 64)), torch.randint(0, 65, (8, 64)))


def resnet():
    from models import _narrow_resnet
    torch.manual_seed(4)
    m = _narrow_resnet(16)
    m.eval()
    return m, (torch.randn(8, 3, 32, 32),)
