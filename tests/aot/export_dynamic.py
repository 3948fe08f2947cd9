#!/usr/bin/python3
"""Torch models exported with dynamic axes, for the dynamic-shape tests of `hodu build`:
  cnn.onnx      [batch, 3, h, w] -> [batch, 10]: conv + batch norm, strided conv, max pool,
                global mean, linear, softmax
  encoder.onnx  ids [batch, seq], mask [batch, seq] -> [batch, seq, 64]: embeddings with
                positions (Range over the sequence), a padding mask, 2 post-norm layers
  decoder.onnx  ids [batch, seq] -> [batch, seq, 1000]: GPT-style, 2 pre-norm layers, the
                causal mask sliced to the sequence from a 64 x 64 buffer (longer sequences
                are an error the library reports)
  audio.onnx    [batch, samples] -> [batch, 8, frames]: 1-D convs over a waveform
Random weights, fixed seed. usage: export_dynamic.py OUT_DIR
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from export_zoo import DecoderLayer, EncoderLayer  # noqa: E402


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.bn = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.c2, self.fc = nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.Linear(32, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.c1(x)))
        y = nn.functional.max_pool2d(torch.relu(self.c2(y)), 2)
        return torch.softmax(self.fc(y.mean(dim=(2, 3))), -1)


class Encoder(nn.Module):
    def __init__(self, vocab=1000, d=64, layers=2, heads=4, ff=128, maxlen=512):
        super().__init__()
        self.tok, self.pos, self.ln = nn.Embedding(vocab, d), nn.Embedding(maxlen, d), nn.LayerNorm(d)
        self.layers = nn.ModuleList(EncoderLayer(d, heads, ff) for _ in range(layers))

    def forward(self, ids, mask):
        x = self.ln(self.tok(ids) + self.pos(torch.arange(ids.shape[1]).unsqueeze(0)))
        m = (1.0 - mask[:, None, None, :].float()) * -1e9
        for layer in self.layers:
            x = layer(x, m)
        return x


class Decoder(nn.Module):
    def __init__(self, vocab=1000, d=64, layers=2, heads=4, maxlen=64):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(maxlen, d)
        self.layers = nn.ModuleList(DecoderLayer(d, heads, 4 * d) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        mask = torch.triu(torch.full((maxlen, maxlen), -1e9), diagonal=1).view(1, 1, maxlen, maxlen)
        self.register_buffer("mask", mask)

    def forward(self, ids):
        n = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(n).unsqueeze(0))
        for layer in self.layers:
            x = layer(x, self.mask[:, :, :n, :n])
        return self.head(self.ln(x))


class Audio(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv1d(1, 8, 9, stride=4, padding=4), nn.Conv1d(8, 8, 5, padding=2)

    def forward(self, wav):
        y = torch.relu(self.c1(wav.unsqueeze(1)))
        return torch.tanh(self.c2(y)) + y


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (2, 7))
    exports = [
        ("cnn", Cnn(), (torch.randn(2, 3, 32, 32),), ["x"], ["y"],
         {"x": {0: "batch", 2: "h", 3: "w"}, "y": {0: "batch"}}),
        ("encoder", Encoder(), (ids, torch.ones(2, 7, dtype=torch.int64)), ["ids", "mask"], ["h"],
         {"ids": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}, "h": {0: "batch", 1: "seq"}}),
        ("decoder", Decoder(), (ids,), ["ids"], ["logits"],
         {"ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}),
        ("audio", Audio(), (torch.randn(2, 400),), ["wav"], ["y"], {"wav": {0: "batch", 1: "samples"}}),
    ]
    for name, model, args, ins, outs, axes in exports:
        model.eval()
        torch.onnx.export(model, args, os.path.join(out, name + ".onnx"), input_names=ins, output_names=outs,
                          dynamic_axes=axes, opset_version=17)
    return 0


if __name__ == "__main__":
    sys.exit(main())
