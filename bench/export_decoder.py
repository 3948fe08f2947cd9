#!/usr/bin/python3
"""A GPT-style decoder as PyTorch 1.13 exports it, for bench/run_bench.py.

Four pre-norm blocks (d=256, 4 heads), token and position embeddings (Gather,
Range), the fused QKV projection cut by `split` (Split), a causal mask by
`torch.tril` + `torch.where` (Trilu, Where, ConstantOfShape), GELU by `Erf`;
random weights (seed 0), sequence length a symbolic dim `T`. The ops real
decoders bring that the zoo's GPT-2 export folds away.

usage: /usr/bin/python3 bench/export_decoder.py [OUT.onnx]   (default bench/models/gpt_decoder.onnx)
then:  /usr/bin/python3 bench/run_bench.py --shape idx=1x64 bench/models/gpt_decoder.onnx
"""
import math
import os
import sys

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.h)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = torch.where(mask, att, torch.full_like(att, float("-inf"))).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(nn.functional.gelu(self.fc(self.ln2(x))))


class Decoder(nn.Module):
    def __init__(self, vocab=1000, d=256, h=4, layers=4, max_t=128):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(max_t, d)
        self.blocks = nn.ModuleList([Block(d, h) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(0, idx.shape[1], dtype=torch.long).unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "models",
                                                             "gpt_decoder.onnx")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    torch.manual_seed(0)
    model = Decoder().eval()
    torch.onnx.export(model, torch.randint(0, 1000, (1, 64)), out, input_names=["idx"], output_names=["logits"],
                      dynamic_axes={"idx": {1: "T"}}, opset_version=17)
    print(out)


if __name__ == "__main__":
    main()
