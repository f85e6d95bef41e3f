"""The GPT example (examples/gpt/) in PyTorch 1.13, f64: the reference of tests/test_gpt.c.

The same model, built the way a PyTorch user writes it (nn.Embedding, nn.LayerNorm,
nn.Linear, F.gelu(approximate="tanh"), masked softmax attention, F.cross_entropy,
torch.optim.AdamW), with the same initial weights and the same batches, drawn from the
same SplitMix64 generator as examples/gpt/gpt_rng.h in the order examples/gpt/gpt_model.h
documents. Trains STEPS steps and prints one line per step, `loss VALUE` (%.17g).

    gpt_reference.py --text PATH [--layers N --heads N --embd N --context N --batch N
                      --steps N --lr X --weight-decay X --seed N]
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.attn(x).split(C, dim=2)
        q, k, v = (t.reshape(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.heads))
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().reshape(B, T, C)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, d, heads, layers, block):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.lnf = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.lnf(x))
        return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))

    def draw_weights(self, rng):
        """Overwrites every weight in gpt_model.h's order and scale."""
        d = self.wte.weight.shape[1]

        def fill(p, bound):
            vals = [(2.0 * rng.uniform() - 1.0) * bound for _ in range(p.numel())]
            p.copy_(torch.tensor(vals, dtype=torch.float64).reshape(p.shape))

        with torch.no_grad():
            fill(self.wte.weight, math.sqrt(3.0))
            fill(self.wpe.weight, math.sqrt(3.0))
            lin, lin4 = 1.0 / math.sqrt(d), 1.0 / math.sqrt(4 * d)
            for b in self.blocks:
                for layer, bound in ((b.attn, lin), (b.proj, lin), (b.fc, lin), (b.fc2, lin4)):
                    fill(layer.weight, bound)
                    fill(layer.bias, bound)
            fill(self.head.weight, lin)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", required=True)
    for name, default in (("layers", 2), ("heads", 4), ("embd", 128), ("context", 64), ("batch", 16),
                          ("steps", 20), ("seed", 1337)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    a = ap.parse_args()

    torch.set_default_dtype(torch.float64)
    data = open(a.text, "rb").read()
    chars = sorted(set(data))
    token_of = {c: i for i, c in enumerate(chars)}
    tokens = torch.tensor([token_of[c] for c in data], dtype=torch.int64)

    model = GPT(len(chars), a.embd, a.heads, a.layers, a.context)
    model.draw_weights(SplitMix64(a.seed))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=a.weight_decay, foreach=False)
    batches = SplitMix64(a.seed + 1)
    starts = len(tokens) - a.context
    for _ in range(a.steps):
        pos = [batches.next() % starts for _ in range(a.batch)]
        x = torch.stack([tokens[s:s + a.context] for s in pos])
        y = torch.stack([tokens[s + 1:s + 1 + a.context] for s in pos])
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print("loss %.17g" % loss.item(), flush=True)


if __name__ == "__main__":
    main()
