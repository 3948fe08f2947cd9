#!/usr/bin/python3
"""Exports the benchmark model zoo to ONNX (opset 17, batch 1) into bench/models/.

Random weights, fixed seed, nothing downloaded: torchvision architectures are
built with weights=None, the transformers from torch.nn.
usage: /usr/bin/python3 bench/export_zoo.py [--only NAME ...] [--out DIR]
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))


class EncoderLayer(nn.Module):
    """A BERT-style post-norm encoder layer written out in torch.nn (explicit attention)."""

    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads, self.dk = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.dk).transpose(1, 2)

    def attend(self, x, mask):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dk)
        if mask is not None:
            scores = scores + mask
        p = torch.softmax(scores, dim=-1)
        y = torch.matmul(p, v).transpose(1, 2).reshape(x.shape)
        return self.o(y)

    def forward(self, x, mask=None):
        x = self.ln1(x + self.attend(x, mask))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class Bert(nn.Module):
    def __init__(self, vocab=30522, d=768, layers=12, heads=12, ff=3072, seq=128):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.ModuleList(EncoderLayer(d, heads, ff) for _ in range(layers))
        self.register_buffer("positions", torch.arange(seq).unsqueeze(0))

    def forward(self, ids):
        x = self.ln(self.tok(ids) + self.pos(self.positions))
        for layer in self.layers:
            x = layer(x)
        return x


class DecoderLayer(EncoderLayer):
    """GPT-2 style pre-norm block with a causal mask."""

    def forward(self, x, mask=None):
        x = x + self.attend(self.ln1(x), mask)
        return x + self.ff2(nn.functional.gelu(self.ff1(self.ln2(x))))


class Gpt2(nn.Module):
    def __init__(self, vocab=50257, d=768, layers=12, heads=12, seq=128):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.layers = nn.ModuleList(DecoderLayer(d, heads, 4 * d) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("positions", torch.arange(seq).unsqueeze(0))
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), -1e9), diagonal=1).view(1, 1, seq, seq))

    def forward(self, ids):
        x = self.tok(ids) + self.pos(self.positions)
        for layer in self.layers:
            x = layer(x, self.mask)
        return self.head(self.ln(x))


def image(name, ctor):
    model = ctor(weights=None).eval()
    # torchvision zero-initializes some classifier heads (ViT's): its logits would all be 0,
    # and a comparison with ONNX Runtime would prove nothing.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear) and not m.weight.any():
                nn.init.normal_(m.weight, std=0.02)
    return name, model, (torch.randn(1, 3, 224, 224),), ["input"]


def zoo():
    return {
        "resnet50": lambda: image("resnet50", torchvision.models.resnet50),
        "mobilenet_v2": lambda: image("mobilenet_v2", torchvision.models.mobilenet_v2),
        "efficientnet_b0": lambda: image("efficientnet_b0", torchvision.models.efficientnet_b0),
        "squeezenet1_1": lambda: image("squeezenet1_1", torchvision.models.squeezenet1_1),
        "vit_b_16": lambda: image("vit_b_16", torchvision.models.vit_b_16),
        "bert_base_seq128": lambda: ("bert_base_seq128", Bert().eval(), (torch.randint(0, 30522, (1, 128)),), ["input_ids"]),
        "gpt2_small_seq128": lambda: ("gpt2_small_seq128", Gpt2().eval(), (torch.randint(0, 50257, (1, 128)),), ["input_ids"]),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "models"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    for key, make in zoo().items():
        if args.only and key not in args.only:
            continue
        torch.manual_seed(0)
        name, model, inputs, input_names = make()
        path = os.path.join(args.out, name + ".onnx")
        # Grad stays enabled: in eval mode under no_grad nn.MultiheadAttention (ViT) takes a
        # fused fast path that has no ONNX export.
        torch.onnx.export(model, inputs, path, opset_version=17, input_names=input_names,
                          output_names=["output"], do_constant_folding=True)
        print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
