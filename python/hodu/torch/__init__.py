"""hodu.torch: PyTorch on hodu (docs/python.md, "Training with PyTorch").

    import hodu.torch
    model = hodu.torch.compile(model, example_inputs)     # forward and backward on hodu
    loss = loss_fn(model(x), y); loss.backward(); optimizer.step()

compile(module, example_inputs, policy=None, fallback=False, threads=None) -> torch.nn.Module
    captures the module (torch.onnx.export with the parameters as graph inputs), runs its
    forward on hodu's cpu engine and its backward as hodu's autodiff graph inside a
    torch.autograd.Function; parameters are shared with hodu without copies.
ops: torch.ops.hodu.{matmul, linear, conv2d, attention, layer_norm, gelu, softmax}, hodu's
    kernels as torch operators with their backward (importing hodu.torch loads the C++
    extension that registers them, or registers them from Python without it;
    hodu.torch.ops.set_policy picks the extension's kernels, hodu's engine's, torch's, or
    "auto" per family).
"""
try:
    import torch as _torch  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised by a test without torch
    raise ImportError("hodu.torch needs PyTorch (the `torch` package; on Debian: apt install python3-torch, "
                      "or pip install 'hodu[torch]'); `import hodu` works without it") from e

from .capture import CaptureError
from .compiled import CompiledModule
from .fallback import compile
from . import ops
from .ops import load_ops

load_ops()

__all__ = ["compile", "CompiledModule", "CaptureError", "ops", "load_ops"]
