#!/usr/bin/env python3
"""Exports a torchvision model (random weights, eval mode) to ONNX for the
AOT comparison with ONNX Runtime.  usage: export_torchvision.py NAME OUT.onnx"""
import sys

import torch
import torchvision


def main():
    name, out = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    torch.onnx.export(model, (x,), out, input_names=["input"], output_names=["logits"], opset_version=17)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
