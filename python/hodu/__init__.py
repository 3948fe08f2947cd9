"""hodu: an ML compiler and runtime.

    import hodu
    s = hodu.InferenceSession("model.onnx", device="cpu", threads=2)
    y = s.run(None, {"input": x})            # onnxruntime's call shape

See docs/python.md.
"""
from . import errors
from ._hodu import Model, Tensor, __version__
from .errors import (CudaError, DeviceError, HoduError, InternalError, InvalidArgumentError, InvalidModelError,
                     IoError, OutOfMemoryError, UnsupportedOperationError)
from .models import compile, convert, info, load, load_tensors, pack, package_info, parse, save, save_tensors
from .session import InferenceSession, IOBinding, NodeArg, SessionOptions
from . import client, policies, runtime
from .tensors import from_dlpack

__all__ = [
    "InferenceSession", "SessionOptions", "IOBinding", "NodeArg", "Model", "Tensor", "from_dlpack",
    "load", "save", "convert", "info", "compile", "pack", "package_info", "parse", "load_tensors", "save_tensors",
    "policies", "runtime", "errors", "client",
    "HoduError", "InvalidModelError", "InvalidArgumentError", "UnsupportedOperationError", "OutOfMemoryError",
    "DeviceError", "CudaError", "IoError", "InternalError", "__version__",
]
