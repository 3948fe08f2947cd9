"""Small torch modules the hodu.torch tests and bench/torch train: a CNN and a transformer; and
dispatched(), the kernels hodu chose while a function ran."""
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CNN(nn.Module):
    """8x8 grey images, 10 classes: two conv + pool stages and two linear layers."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 2 * 2, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


class Block(nn.Module):
    """A pre-norm transformer block: multi-head self-attention and a GELU MLP."""

    def __init__(self, d, heads, ff, dropout=0.0):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        heads = lambda t: t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(v)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1) @ v
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, s, d)))
        return x + self.drop(self.ff2(F.gelu(self.ff1(self.ln2(x)))))


class Transformer(nn.Module):
    """Token sequences (vocabulary 32, length 16) to 10 classes: embedding, learned positions,
    pre-norm blocks, mean pooling."""

    def __init__(self, vocab=32, seq=16, d=64, heads=4, ff=128, layers=2, classes=10, dropout=0.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.ModuleList([Block(d, heads, ff, dropout) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x).mean(dim=1))


def cnn_batches(n, batch, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 1, 8, 8, generator=g), torch.randint(0, 10, (batch,), generator=g)) for _ in range(n)]


def token_batches(n, batch, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 32, (batch, 16), generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(n)]


def dispatched(fn, path):
    """{op: {kernels}} hodu's dispatcher chose while fn() ran: the dispatch events of a hodu
    profile written to `path` (sessions are planned on first use, so inside the profile)."""
    import hodu
    with hodu.runtime.profile(path):
        fn()
    trace = json.loads(path.read_text())
    seen = {}
    for e in trace["traceEvents"] if isinstance(trace, dict) else trace:
        a = e.get("args", {})
        if a.get("what") == "kernel":
            seen.setdefault(a["op_name"], set()).add(a["choice"])
    return seen
