#!/usr/bin/env python3
"""Exports a small transformer encoder (2 pre-norm layers, d_model 64, 4 heads,
GELU MLP, random weights) to ONNX for the AOT comparison with ONNX Runtime.
Written out by hand: torch's fused encoder fast path has no ONNX export.
usage: export_encoder.py OUT.onnx"""
import sys

import torch

D, H, T = 64, 4, 16


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
        self.qkv, self.proj = torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)
        self.fc1, self.fc2 = torch.nn.Linear(D, 4 * D), torch.nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (z.reshape(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (D // H) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(Layer(), Layer())
        self.head = torch.nn.Linear(D, 10)

    def forward(self, x):
        return self.head(self.layers(x).mean(dim=1))


def main():
    torch.manual_seed(0)
    model = Encoder().eval()
    with torch.no_grad():
        torch.onnx.export(model, (torch.randn(1, T, D),), sys.argv[1], input_names=["tokens"],
                          output_names=["logits"], opset_version=17)
    print(f"wrote {sys.argv[1]}")


if __name__ == "__main__":
    main()
