"""What bench/gpt_torch.py and bench/ddp_torch.py share: the demo GPT of
tests/gpt_reference.py on a text, with opreg's weights, batches and AdamW.

Import after bench/openblas_threads.py has limited OpenBLAS's threads (before torch)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import gpt_reference  # noqa: E402


class Training:
    """The model, its optimizer and the batch stream, as opreg's demo draws them."""

    def __init__(self, text, layers, heads, embd, context):
        data = open(text, "rb").read()
        chars = sorted(set(data))
        token_of = {c: i for i, c in enumerate(chars)}
        self.tokens = torch.tensor([token_of[c] for c in data], dtype=torch.int64)
        self.context = context
        self.model = gpt_reference.GPT(len(chars), embd, heads, layers, context)
        self.model.draw_weights(gpt_reference.SplitMix64(1337))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-3, weight_decay=0.01, foreach=False)
        self.batches = gpt_reference.SplitMix64(1338)
        self.starts = len(self.tokens) - context

    def batch(self, size, lo=0, hi=None):
        """Draws the next batch of size sequences (every rank draws all of them, to stay
        in step) and returns inputs and targets of sequences [lo, hi)."""
        pos = [self.batches.next() % self.starts for _ in range(size)][lo:hi]
        c = self.context
        x = torch.stack([self.tokens[s:s + c] for s in pos])
        y = torch.stack([self.tokens[s + 1:s + 1 + c] for s in pos])
        return x, y

    def step(self, forward, x, y):
        """One training step through forward (the model, or its DDP wrapper)."""
        loss = forward(x, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss
